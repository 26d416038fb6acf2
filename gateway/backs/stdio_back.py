"""The upstream stdio transport: one server subprocess, newline-delimited JSON.

Transport only: it frames, parses and writes messages and owns the process
lifecycle (2026-07-28 stdio "Shutdown": close stdin, wait, SIGTERM, SIGKILL).
It makes no protocol decisions. The pipes are non-blocking file descriptors
(see gateway.pipes) and the exit is watched through a pidfd, so nothing here
needs a thread. Where there is no pidfd (macOS, Linux before 5.3, a seccomp
profile or sandbox that refuses pidfd_open), the exit is polled instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import signal
import subprocess
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence

import anyio
import structlog

from gateway import wire
from gateway.core import upstream_checks
from gateway.flow_control import DEFAULT_BOUNDS, QueueBounds
from gateway.log_limit import LogLimiter
from gateway.peer_queue import PeerQueue, QueueFull
from gateway.pipes import PipeReader, PipeWriter
from gateway.upstream_errors import (
    ConnectionLost,
    ServerNotStarted,
    UpstreamNotReading,
    map_exceptions,
)

log = structlog.get_logger("gateway.backs.stdio")


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: if the gateway is killed outright (SIGKILL
    leaves it no time to stop its upstream), the kernel sends the server
    SIGTERM, so it is never orphaned. Linux only; elsewhere a no-op."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


# The end of the server's stderr is kept, so that when it dies its own reason
# ("No module named ...", "API_KEY missing") reaches the client and the log:
# this many lines, each cut to this many bytes.
STDERR_TAIL_LINES = 10
STDERR_LINE_BYTES = 400
# The server's stderr goes to the log (at info), but a chatty or looping
# server must not flood it: this many lines per interval, each cut to this
# many bytes; the next line logged after a quiet spell says how many were not.
STDERR_LOG_BURST = 50
STDERR_LOG_INTERVAL = 10.0
STDERR_LOG_BYTES = 2000
# The stderr is diagnostics, not protocol: after a read the pump waits this
# long before it reads again, so the lines written meanwhile come in one
# chunk. A server that logs a line per request (the MCP Python SDK's servers
# do, at info) then costs the gateway a wake-up per interval instead of one
# per request: in front of mcp 1.30 FastMCP at one call at a time, 4.5 fewer
# system calls and 8 % fewer instructions a call (tests/test_stderr_pump.py).
# A read of this many bytes or more goes on at once: a server writing faster
# than that is never held up on a full pipe.
STDERR_BATCH_SECONDS = 0.05
STDERR_BATCH_BYTES = 16 * 1024
# How many of those lines an error message quotes, and how long it waits for
# the pipe to be read to its end after the exit (a child that inherited it may
# hold it open).
STDERR_QUOTED_LINES = 3
# Without a pidfd, how often an exit being waited for is polled: from the
# first interval, doubling up to the last (an exit is seen within that).
EXIT_POLL_FIRST = 0.001
EXIT_POLL_LAST = 0.05
STDERR_SETTLE_SECONDS = 0.5


async def pump_lines(
    read: Callable[[], Awaitable[bytes]],
    handle: Callable[[list[bytes | wire.Oversized]], None],
    pause: Callable[[float], Awaitable[None]],
) -> None:
    """Hand `handle` the lines of what `read` returns until it returns b""
    (the last line even without its newline), pausing after each small
    read (STDERR_BATCH_SECONDS) so that lines come in batches."""
    splitter = wire.LineSplitter(64 * 1024)
    while chunk := await read():
        handle(splitter.feed(chunk))
        if len(chunk) < STDERR_BATCH_BYTES:
            await pause(STDERR_BATCH_SECONDS)
    handle(splitter.close())


def stderr_summary(tail: Sequence[str]) -> str:
    """The last lines of a server's stderr, for an error message ("" if none)."""
    quoted = [line for line in tail if line.strip()][-STDERR_QUOTED_LINES:]
    return " | ".join(quoted)


class ServerExited(ConnectionLost):
    def __init__(self, returncode: int | None, stderr: Sequence[str] = ()) -> None:
        text = f"upstream server exited (code {returncode})"
        summary = stderr_summary(stderr)
        super().__init__(f"{text}; its stderr ends: {summary}" if summary else text)
        self.returncode = returncode
        self.stderr = list(stderr)


def _not_started(exc: Exception) -> ServerNotStarted:
    return ServerNotStarted(str(exc))


class ServerOutput:
    """What a stdio server writes, as messages: framed by lines (bounded by
    `max_bytes`) and screened (gateway.core.upstream_checks). A refused line
    is logged (at most once a minute), stands in as an error for the call it
    names, and a malformed request of the server's is answered with `reply`."""

    def __init__(
        self, max_bytes: int, reply: Callable[[wire.Message], None], *, label: str
    ) -> None:
        self._splitter = wire.LineSplitter(max_bytes)
        self._max_bytes = max_bytes
        self._reply = reply
        self._label = label
        # A server that writes junk in a loop gets one log line a minute.
        self._junk_log = LogLimiter(log)

    def feed(self, chunk: bytes) -> list[wire.Message]:
        return self._take(self._splitter.feed(chunk))

    def close(self) -> list[wire.Message]:
        return self._take(self._splitter.close())

    def _take(self, items: list[bytes | wire.Oversized]) -> list[wire.Message]:
        out: list[wire.Message] = []
        for item in items:
            if isinstance(item, wire.Oversized):
                # Its bytes are gone; its edges may still name the call it
                # answered (otherwise that call ends with its timeout).
                refused = upstream_checks.oversized(item, self._max_bytes)
                self._junk_log.warning(
                    "upstream message over the size limit dropped",
                    size=item.size,
                    call_failed=refused.to_call is not None,
                    session=self._label,
                )
                if refused.to_call is not None:
                    out.append(refused.to_call)
                continue
            outcome = upstream_checks.screen_line(item)
            if not isinstance(outcome, upstream_checks.Refused):
                out.append(outcome)
                continue
            # 2026-07-28 stdio: a server must write only MCP messages; a stray
            # or malformed line is the server's bug, not a reason to stop.
            self._junk_log.warning(
                "upstream sent a malformed message",
                reason=outcome.reason,
                line=item[:200].decode("utf-8", "replace"),
                session=self._label,
            )
            if outcome.to_call is not None:
                out.append(outcome.to_call)
            if outcome.to_server is not None:
                self._reply(outcome.to_server)
        return out


# Why pidfd_open failed, each reason said once in the log (not once a spawn).
_no_pidfd_said: set[str] = set()


def _open_pidfd(pid: int) -> int:
    """A pidfd for the exit to wait on, or -1 where the system gives none
    (exits are then polled)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not on this system"
        if why not in _no_pidfd_said:
            _no_pidfd_said.add(why)
            log.info("no pidfd_open; upstream exits are polled", reason=why)
        return -1


class StdioServerProcess:
    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        command: Sequence[str],
        max_bytes: int,
        bounds: QueueBounds = DEFAULT_BOUNDS,
    ) -> None:
        assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
        self._popen = popen
        self.command = list(command)
        self.pid = popen.pid
        self._stdin = PipeWriter(popen.stdin.fileno())
        self._to_server = PeerQueue(self._stdin, bounds, "server", label=f"pid {popen.pid}")
        self._stdout = PipeReader(popen.stdout.fileno())
        self._stderr = PipeReader(popen.stderr.fileno())
        self._pidfd = _open_pidfd(popen.pid)
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
    ) -> StdioServerProcess:
        full_env = {**os.environ, **env} if env else None
        # No such command, no permission, no such cwd: the OS's own words.
        with map_exceptions({OSError: _not_started}):
            popen = subprocess.Popen(  # noqa: ASYNC220 - fork+exec is quick; the pipes are async
                list(command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=full_env,
                cwd=cwd,
                # Its own process group: a Ctrl-C at our terminal is ours to handle,
                # and we decide when the server stops (and signal its children too).
                start_new_session=True,
                # The gateway runs no threads of its own when it spawns; the hook
                # only calls prctl.
                preexec_fn=_die_with_parent,  # noqa: PLW1509
            )
        log.info("upstream started", pid=popen.pid, command=list(command))
        return cls(popen, command, max_bytes, bounds)

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

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
        if self._watching:
            with anyio.move_on_after(timeout):
                await self._exit_seen.wait()
            return self._popen.returncode
        return await self._poll_exit(timeout)

    async def _poll_exit(self, timeout: float) -> int | None:
        async with self._exit_lock:
            with anyio.move_on_after(timeout):
                delay = EXIT_POLL_FIRST
                while self._popen.poll() is None:  # each pass waits on the pidfd
                    if self._pidfd >= 0:
                        await anyio.wait_readable(self._pidfd)
                    else:
                        await anyio.sleep(delay)
                        delay = min(delay * 2, EXIT_POLL_LAST)
        return self._popen.returncode

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
            await self._stop_group(grace)
            for reader, pipe in (
                (self._stdout, self._popen.stdout),
                (self._stderr, self._popen.stderr),
            ):
                reader.release()
                self._close_fd(pipe)
            if self._pidfd >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._pidfd)
                self._pidfd = -1
        log.info("upstream stopped", pid=self.pid, returncode=self._popen.returncode)
        return self._popen.returncode

    @staticmethod
    def _close_fd(pipe: object) -> None:
        fileno = getattr(pipe, "fileno", None)
        if fileno is None or getattr(pipe, "closed", True):
            return
        # Wake any task still waiting on the fd before it goes away.
        anyio.notify_closing(fileno())
        with contextlib.suppress(OSError):
            pipe.close()  # type: ignore[attr-defined]

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
        if self._popen.poll() is None:
            self._signal(signal.SIGTERM)

    def _signal(self, sig: signal.Signals) -> None:
        # The server runs in its own session: signal the whole group so that
        # its children (e.g. `npx` wrappers) go too.
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(sig)
