"""What an upstream stdio server writes: on stdout, newline-delimited JSON
messages, framed and screened here; on stderr, lines for the log, the last of
which are quoted when it exits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import structlog

from gateway import wire
from gateway.core import upstream_checks
from gateway.log_limit import LogLimiter
from gateway.upstream_errors import ConnectionLost

log = structlog.get_logger("gateway.backs.stdio")


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
