"""The upstream stdio transport: one server subprocess, newline-delimited JSON.

Transport only: it frames, parses and writes messages and owns the process
lifecycle (2026-07-28 stdio "Shutdown": close stdin, wait, SIGTERM, SIGKILL).
It makes no protocol decisions.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections import deque
from collections.abc import Callable, Mapping, Sequence

import anyio
import structlog
from anyio.abc import Process

from gateway import wire

log = structlog.get_logger("gateway.backs.stdio")

_READ_CHUNK = 65536


class ServerExited(Exception):
    def __init__(self, returncode: int | None) -> None:
        super().__init__(f"upstream server exited (code {returncode})")
        self.returncode = returncode


class StdioServerProcess:
    def __init__(self, process: Process, command: Sequence[str], max_bytes: int) -> None:
        self._process = process
        self.command = list(command)
        self._splitter = wire.LineSplitter(max_bytes)
        self._ready: deque[wire.Message] = deque()
        self._send_lock = anyio.Lock()
        self._eof = False
        self.pid = process.pid
        # Optional observer of every message in and out (the demo's wire view).
        self.tap: Callable[[str, wire.Message], None] | None = None

    @classmethod
    async def spawn(
        cls,
        command: Sequence[str],
        *,
        max_bytes: int,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> StdioServerProcess:
        full_env = None
        if env:
            full_env = {**os.environ, **env}
        process = await anyio.open_process(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
            cwd=cwd,
            # Its own process group: a Ctrl-C at our terminal is ours to handle,
            # and we decide when the server stops.
            start_new_session=True,
        )
        log.info("upstream started", pid=process.pid, command=list(command))
        return cls(process, command, max_bytes)

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def send(self, msg: wire.Message) -> None:
        if self.tap is not None:
            self.tap("to-server", msg)
        data = wire.encode(msg)
        stdin = self._process.stdin
        assert stdin is not None
        async with self._send_lock:
            try:
                await stdin.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise ServerExited(self._process.returncode) from exc

    async def receive(self) -> wire.Message:
        """The next message from the server; ServerExited once its stdout ends."""
        stdout = self._process.stdout
        assert stdout is not None
        while not self._ready:
            if self._eof:
                raise ServerExited(await self._wait_exit())
            try:
                chunk = await stdout.receive(_READ_CHUNK)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._eof = True
                self._take(self._splitter.close())
                continue
            self._take(self._splitter.feed(chunk))
        msg = self._ready.popleft()
        if self.tap is not None:
            self.tap("from-server", msg)
        return msg

    def _take(self, items: list[bytes | wire.Oversized]) -> None:
        for item in items:
            if isinstance(item, wire.Oversized):
                log.warning("upstream message over the size limit dropped", size=item.size)
                continue
            try:
                self._ready.append(wire.decode(item))
            except wire.InvalidMessage as exc:
                # 2026-07-28 stdio: a server must write only MCP messages; a
                # stray line is the server's bug, not a reason to stop.
                log.warning("upstream wrote a non-MCP line", reason=exc.reason, line=item[:200])

    async def _wait_exit(self) -> int | None:
        with anyio.move_on_after(5):
            await self._process.wait()
        return self._process.returncode

    async def pump_stderr(self) -> None:
        """Forward the server's stderr to our log, line by line, until it closes."""
        stderr = self._process.stderr
        if stderr is None:
            return
        splitter = wire.LineSplitter(64 * 1024)
        try:
            async for chunk in stderr:
                for line in splitter.feed(chunk):
                    if isinstance(line, bytes):
                        log.info(
                            "upstream stderr", pid=self.pid, line=line.decode("utf-8", "replace")
                        )
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass

    async def aclose(self, grace: float = 5.0) -> int | None:
        """Close stdin, wait `grace`, then SIGTERM, then SIGKILL. Always reaps."""
        process = self._process
        with anyio.CancelScope(shield=True):
            if process.stdin is not None:
                with contextlib.suppress(OSError, anyio.BrokenResourceError):
                    await process.stdin.aclose()
            with anyio.move_on_after(grace):
                await process.wait()
            if process.returncode is None:
                self._signal(signal.SIGTERM)
                with anyio.move_on_after(grace):
                    await process.wait()
            if process.returncode is None:
                self._signal(signal.SIGKILL)
                await process.wait()
            # Closing the Process closes its pipes and transport, so nothing is
            # left for the garbage collector to close after the loop is gone.
            with contextlib.suppress(OSError):
                await process.aclose()
        log.info("upstream stopped", pid=self.pid, returncode=process.returncode)
        return process.returncode

    def terminate(self) -> None:
        """SIGTERM now, without waiting for the server to notice its closed stdin."""
        if self._process.returncode is None:
            self._signal(signal.SIGTERM)

    def _signal(self, sig: signal.Signals) -> None:
        # The server runs in its own session: signal the whole group so that
        # its children (e.g. `npx` wrappers) go too.
        try:
            os.killpg(self._process.pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                self._process.send_signal(sig)
