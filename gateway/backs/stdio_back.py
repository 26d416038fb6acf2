"""The upstream stdio transport: one server subprocess, newline-delimited JSON.

Transport only: it frames, parses and writes messages and owns the process
lifecycle (2026-07-28 stdio "Shutdown": close stdin, wait, SIGTERM, SIGKILL).
It makes no protocol decisions. The pipes are non-blocking file descriptors
(see gateway.pipes) and the exit is watched through a pipe or a pidfd, so
nothing here needs a thread.

How the process is started (through a keeper) is gateway.backs.process_start;
what it writes, read as messages and log lines, gateway.backs.server_output.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
from collections import deque
from collections.abc import Callable, Mapping, Sequence

import anyio
import structlog

from gateway import wire
from gateway.backs import process_start
from gateway.backs.process_start import (
    EXIT_POLL_FIRST,
    EXIT_POLL_LAST,
    KEEPER_END_MARGIN,
    KeeperReport,
    keeper_command,
    keeper_started,
    open_pidfd,
    popen_for,
    reaped,
)
from gateway.backs.server_output import (
    STDERR_LINE_BYTES,
    STDERR_LOG_BURST,
    STDERR_LOG_BYTES,
    STDERR_LOG_INTERVAL,
    STDERR_SETTLE_SECONDS,
    STDERR_TAIL_LINES,
    ServerExited,
    ServerOutput,
    pump_lines,
)
from gateway.flow_control import DEFAULT_BOUNDS, QueueBounds
from gateway.log_limit import LogLimiter
from gateway.peer_queue import PeerQueue, QueueFull
from gateway.pipes import PipeReader, PipeWriter
from gateway.upstream_errors import UpstreamNotReading

log = structlog.get_logger("gateway.backs.stdio")


class StdioServerProcess:
    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        command: Sequence[str],
        max_bytes: int,
        bounds: QueueBounds = DEFAULT_BOUNDS,
        keeper: KeeperReport | None = None,
        keeper_grace: float = 0.0,
        pidfd: int | None = None,
    ) -> None:
        assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
        # The process the gateway started: the keeper, or (without one) the
        # server itself. `pid` is the server's, and its process group's.
        self._popen = popen
        self._keeper = keeper
        self._keeper_grace = keeper_grace
        self.command = list(command)
        self.pid = keeper.pid if keeper is not None and keeper.pid is not None else popen.pid
        self._stdin = PipeWriter(popen.stdin.fileno())
        self._to_server = PeerQueue(self._stdin, bounds, "server", label=f"pid {self.pid}")
        self._stdout = PipeReader(popen.stdout.fileno())
        self._stderr = PipeReader(popen.stderr.fileno())
        self._pidfd = open_pidfd(popen.pid) if pidfd is None else pidfd
        self._exit_lock = anyio.Lock(fast_acquire=True)
        # Set by the exit watcher (run_background), the one waiter on the
        # pidfd while it runs.
        self._exit_seen = anyio.Event()
        self._watching = False
        self._output = ServerOutput(max_bytes, self._reply_quietly, label=f"pid {self.pid}")
        self._ready: deque[wire.Message] = deque()
        self._stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self._stderr_log = LogLimiter(log, STDERR_LOG_INTERVAL, burst=STDERR_LOG_BURST)
        self._stderr_done = anyio.Event()
        self._eof = False
        self._closed = False
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
        bounds: QueueBounds = DEFAULT_BOUNDS,
        exit_grace: float = 1.5,
    ) -> StdioServerProcess:
        """`exit_grace` ([upstream] exit_grace): how long what the server
        leaves running gets between SIGTERM and SIGKILL, after the server's
        exit or the gateway's."""
        full_env = {**os.environ, **env} if env else None
        # Read from its module, not copied: a test sets it to None to run without one.
        if process_start.KEEPER is None:
            popen = popen_for(list(command), env=full_env, cwd=cwd)
            log.info("upstream started", pid=popen.pid, command=list(command))
            return cls(popen, command, max_bytes, bounds)
        report_r, report_w = os.pipe()
        try:
            keeper_cmd = keeper_command(
                report_w, exit_grace, command, os.environ if full_env is None else full_env
            )
            popen = popen_for(keeper_cmd, env=full_env, cwd=cwd, pass_fds=(report_w,))
        except BaseException:
            os.close(report_r)
            raise
        finally:
            os.close(report_w)
        report = KeeperReport(report_r)
        pidfd = open_pidfd(popen.pid)
        await keeper_started(popen, report, pidfd, command)
        log.info("upstream started", pid=report.pid, keeper=popen.pid, command=list(command))
        return cls(popen, command, max_bytes, bounds, report, exit_grace, pidfd)

    @property
    def returncode(self) -> int | None:
        """The server's: its exit code, or -N if signal N ended it."""
        if self._keeper is not None and not self._exit_lock.locked():
            self._keeper.read()  # else its holder reads, and is woken by it
        return self._status()

    def _status(self) -> int | None:
        keeper = self._keeper
        if keeper is None:
            return self._popen.poll()
        if keeper.exit is not None:
            return keeper.exit
        # A keeper that ended without a word (SIGKILLed): its own status.
        return self._popen.poll() if keeper.eof else None

    # -- writing ---------------------------------------------------------
    def _exited(self, exc: Exception) -> ServerExited:
        return ServerExited(self.returncode)

    def send_nowait(self, msg: wire.Message) -> None:
        if self.tap is not None:
            self.tap("to-server", msg)
        try:  # a broken stdin pipe is the server's exit
            self._to_server.put(msg)
        except anyio.BrokenResourceError as exc:
            raise self._exited(exc) from exc
        except QueueFull as exc:
            raise UpstreamNotReading(str(exc)) from exc

    async def send(self, msg: wire.Message) -> None:
        self.send_nowait(msg)

    def cork(self) -> None:
        self._stdin.cork()

    def uncork(self) -> None:
        # A broken pipe shows up as the server's exit on the reading side.
        with contextlib.suppress(anyio.BrokenResourceError):
            self._stdin.uncork()

    # -- reading ---------------------------------------------------------
    async def receive(self) -> wire.Message:
        """The next message from the server; ServerExited once its stdout ends."""
        if not self._ready:
            await self._fill()
        msg = self._ready.popleft()
        if self.tap is not None:
            self.tap("from-server", msg)
        return msg

    async def receive_batch(self) -> list[wire.Message]:
        """Every message of the next read (at least one)."""
        if not self._ready:
            await self._fill()
        batch = list(self._ready)
        self._ready.clear()
        if self.tap is not None:
            for msg in batch:
                self.tap("from-server", msg)
        return batch

    async def _fill(self) -> None:
        while not self._ready:  # each pass reads the pipe once
            if self._eof:
                code = await self._wait_exit(5)
                raise ServerExited(code, await self.last_words())
            chunk = await self._stdout.read()
            if not chunk:
                self._eof = True
                self._ready.extend(self._output.close())
            else:
                self._ready.extend(self._output.feed(chunk))

    def _reply_quietly(self, msg: wire.Message) -> None:
        # The server's own malformed request is answered; if it is gone,
        # the reader sees that on its own.
        with contextlib.suppress(ServerExited):
            self.send_nowait(msg)

    # -- background work ----------------------------------------------------
    async def run_background(self) -> None:
        """The stdin flusher, the exit watcher and the stderr pump, until the
        process goes."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._stdin.run_flusher)
            tg.start_soon(self._watch_exit)
            await self._pump_stderr()
            await self._exit_seen.wait()
            tg.cancel_scope.cancel()

    async def _watch_exit(self) -> None:
        """See the exit when it happens, not at the end of stdout: a child the
        server forked may hold its stdout and stderr open for as long as it
        lives (issue #29). Then the readers get what is left and end, so the
        exit is handled as the crash it is."""
        self._watching = True
        try:
            await self._poll_exit(math.inf)
        finally:
            # Seen, or no longer watched (cancelled): _wait_exit tells which.
            self._watching = False
            self._exit_seen.set()
        self._stdout.end_when_empty()
        self._stderr.end_when_empty()

    async def _pump_stderr(self) -> None:
        """Forward the server's stderr to our log, in batches of lines
        (pump_lines), until it closes, keeping its last lines."""
        try:
            await pump_lines(self._stderr.read, self._log_stderr, anyio.sleep)
        finally:
            self._stderr_done.set()

    def _log_stderr(self, lines: list[bytes | wire.Oversized]) -> None:
        for line in lines:
            if isinstance(line, bytes):
                text = line.decode("utf-8", "replace")
                self._stderr_tail.append(text[:STDERR_LINE_BYTES])
                self._stderr_log.info("upstream stderr", pid=self.pid, line=text[:STDERR_LOG_BYTES])

    async def last_words(self, timeout: float = STDERR_SETTLE_SECONDS) -> list[str]:
        """The last lines the server wrote to stderr, once the pipe has been
        read to its end (or `timeout` has passed)."""
        with anyio.move_on_after(timeout):
            await self._stderr_done.wait()
        return list(self._stderr_tail)

    # -- stopping --------------------------------------------------------
    async def _wait_exit(self, timeout: float) -> int | None:
        deadline = anyio.current_time() + timeout
        if self._watching:
            with anyio.move_on_after(timeout):
                await self._exit_seen.wait()
        status = self._status()
        if status is None and not self._watching:  # (or no longer: it was cancelled)
            status = await self._poll_exit(max(0.0, deadline - anyio.current_time()))
        return status

    async def _poll_exit(self, timeout: float) -> int | None:
        async with self._exit_lock:
            # (ClosedResourceError: aclose gave up on a process stuck in the
            # kernel and closed what this waits on.)
            with anyio.move_on_after(timeout), contextlib.suppress(anyio.ClosedResourceError):
                delay = EXIT_POLL_FIRST
                while True:  # each pass waits on the keeper's word or the pidfd
                    if self._keeper is not None:
                        self._keeper.read()
                    if self._status() is not None:
                        break
                    if self._keeper is not None and not self._keeper.eof:
                        await anyio.wait_readable(self._keeper.fd)
                    elif self._pidfd >= 0:
                        await anyio.wait_readable(self._pidfd)
                    else:
                        await anyio.sleep(delay)
                        delay = min(delay * 2, EXIT_POLL_LAST)
        return self._status()

    async def aclose(self, grace: float = 5.0) -> int | None:
        """Close stdin, wait `grace`, then SIGTERM, then SIGKILL. Always reaps."""
        with anyio.CancelScope(shield=True):
            if not self._closed:
                self._closed = True
                await self._stdin.flush(min(grace, 1.0))
                self._close_fd(self._popen.stdin)
            if await self._wait_exit(grace) is None:
                self._signal(signal.SIGTERM)
                if await self._wait_exit(grace) is None:
                    self._signal(signal.SIGKILL)
                    await self._wait_exit(30)
            if self._keeper is not None:
                await self._keeper_done()
            if self._keeper is None or self._keeper.exit is None:
                # No keeper, or one that ended without a word (SIGKILLed): the
                # server's group is the gateway's to stop.
                await self._stop_group(grace)
            for reader, pipe in (
                (self._stdout, self._popen.stdout),
                (self._stderr, self._popen.stderr),
            ):
                reader.release()
                self._close_fd(pipe)
            if self._keeper is not None:
                self._keeper.close()
            if self._pidfd >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._pidfd)
                self._pidfd = -1
        code = self._status()
        log.info("upstream stopped", pid=self.pid, returncode=code)
        return code

    @staticmethod
    def _close_fd(pipe: object) -> None:
        fileno = getattr(pipe, "fileno", None)
        if fileno is None or getattr(pipe, "closed", True):
            return
        # Wake any task still waiting on the fd before it goes away.
        anyio.notify_closing(fileno())
        with contextlib.suppress(OSError):
            pipe.close()  # type: ignore[attr-defined]

    async def _keeper_done(self) -> None:
        """Once the server is gone, the keeper stops what it left (see
        process_keeper) and ends: wait for that, and reap it. A keeper that
        does not end in its own bounds is killed, with the server's group."""
        keeper = self._keeper
        assert keeper is not None
        said_left = False
        # (The lock too is waited for within the bound: an exit watcher holds
        # it until the server's exit, which a server stuck in the kernel
        # never makes.)
        with anyio.move_on_after(2 * self._keeper_grace + KEEPER_END_MARGIN):
            async with self._exit_lock:
                delay = EXIT_POLL_FIRST
                while True:
                    keeper.read()
                    if keeper.left and not said_left:
                        said_left = True
                        log.info("stopping what the upstream left running", pid=self.pid)
                    if keeper.eof and self._popen.poll() is not None:
                        return
                    if not keeper.eof:
                        await anyio.wait_readable(keeper.fd)
                    elif self._pidfd >= 0:
                        await anyio.wait_readable(self._pidfd)
                    else:
                        await anyio.sleep(delay)
                        delay = min(delay * 2, EXIT_POLL_LAST)
        log.warning(
            "the upstream's process keeper did not end; killing it and the server's group",
            pid=self.pid,
            keeper=self._popen.pid,
        )
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self._popen.kill()
        await reaped(self._popen, self._pidfd, 5)

    async def _stop_group(self, grace: float) -> None:
        """What the server left running in its process group (a child that
        inherited its pipes, a browser, a language server) goes with it:
        SIGTERM, then SIGKILL after `grace`. The group keeps the server's pid
        as its id while any member lives, and Linux hands no new process an
        id still in use as a group's, so this reaches that group alone."""
        if not self._group_alive():
            return
        log.info("stopping what the upstream left running", pid=self.pid)
        self._signal_group(signal.SIGTERM)
        with anyio.move_on_after(grace):
            delay = EXIT_POLL_FIRST
            while self._group_alive():  # not our children: nothing to wait on but polling
                await anyio.sleep(delay)
                delay = min(delay * 2, EXIT_POLL_LAST)
        if self._group_alive():
            self._signal_group(signal.SIGKILL)

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM now, without waiting for the server to notice its closed stdin."""
        if self.returncode is None:
            self._signal(signal.SIGTERM)

    def _signal(self, sig: signal.Signals) -> None:
        # The server runs in its own session: signal the whole group so that
        # its children (e.g. `npx` wrappers) go too. (Not the keeper's: it is
        # in a group of its own, and stays to stop what is left.)
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            if self._keeper is None:
                with contextlib.suppress(ProcessLookupError):
                    self._popen.send_signal(sig)
