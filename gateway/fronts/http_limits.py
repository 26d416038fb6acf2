"""Connection-level limits of the HTTP front, enforced in uvicorn's httptools
protocol before anything reaches the ASGI app: head size (431), slow heads and
slow bodies (408), idle connections (closed), connections at once (the oldest
idle one makes room, else 503).

This leans on uvicorn's HttpToolsProtocol internals (its parser callbacks,
`cycle`, `timeout_keep_alive_task`); pyproject pins uvicorn to the versions
tests/test_http_limits.py was run against, and that test checks the hooks
still exist.
"""

from __future__ import annotations

import asyncio
import errno
import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httptools
import orjson
import structlog
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from gateway import wire

log = structlog.get_logger("gateway.fronts.http")

# File descriptors kept aside for everything that is not a client connection:
# the listening socket, log and upstream pipes, upstream HTTP connections.
FD_RESERVE = 64
FD_PER_UPSTREAM_SESSION = 4
# data.reason of each refusal -> how its log line names it (plural)
REFUSALS = {
    "too-many-connections": "connections over the limit answered 503",
    "header-too-large": "request heads over the size limit answered 431",
    "header-timeout": "request heads too slow answered 408",
    "body-timeout": "request bodies too slow answered 408",
    "bad-http": "malformed HTTP requests answered 400",
}


@dataclass(frozen=True, slots=True)
class HttpLimits:
    max_header_bytes: int = 32 * 1024
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    idle_timeout: float = 30.0
    max_connections: int = 1000


class RefusalLog:
    """Counts refusals by kind and logs one line per kind per interval, so a
    flood of bad connections costs one log line every few seconds, not one
    per connection. A kind reads as a plural noun phrase (REFUSALS)."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self.counts: dict[str, int] = {}
        self._flush: asyncio.TimerHandle | None = None

    def note(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(self.interval, self.flush)

    def flush(self) -> None:
        self._flush = None
        counts, self.counts = self.counts, {}
        for kind, count in sorted(counts.items()):
            log.warning(f"{kind}: {count} in the last {self.interval:g} s", count=count)

    def close(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
        self.flush()


class ConnectionGuard:
    """The open connections of one server, least recently active first."""

    def __init__(
        self, limits: HttpLimits, refusals: RefusalLog, on_refusal: Callable[[int], None]
    ) -> None:
        self.limits = limits
        self.cap = limits.max_connections
        self.refusals = refusals
        self.on_refusal = on_refusal  # the HTTP status, for metrics
        self.open: dict[LimitedHttpToolsProtocol, None] = {}

    def admit(self, conn: LimitedHttpToolsProtocol) -> bool:
        if len(self.open) >= self.cap and not self._evict_idle():
            return False
        self.open[conn] = None
        return True

    def touch(self, conn: LimitedHttpToolsProtocol) -> None:
        """`conn` is active: it moves to the end of the eviction order."""
        if conn in self.open:
            del self.open[conn]
            self.open[conn] = None

    def forget(self, conn: LimitedHttpToolsProtocol) -> None:
        self.open.pop(conn, None)

    def _evict_idle(self) -> bool:
        # A connection that is not being served (no request running: idle,
        # or still sending its head) makes room; one serving a call does not.
        for conn in self.open:
            if not conn.serving():
                del self.open[conn]
                conn.drop("idle connections closed to admit new ones")
                return True
        return False


def protocol_class(guard: ConnectionGuard) -> type[LimitedHttpToolsProtocol]:
    """A protocol class for uvicorn's `Config(http=...)`, bound to one guard."""

    class Bound(LimitedHttpToolsProtocol):
        pass

    Bound.guard = guard
    return Bound


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    guard: ConnectionGuard

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limits = self.guard.limits
        self.timeout_keep_alive = limits.idle_timeout  # type: ignore[assignment]
        self._max_head = limits.max_header_bytes
        self._deadline: asyncio.TimerHandle | None = None
        self._in_head = False
        # Two lower bounds of the current head's size: what the parser
        # reported (URL and complete headers), and whole chunks that arrived
        # while it was incomplete. Either over the limit refuses it.
        self._head_bytes = 0
        self._head_buffered = 0
        self._messages = 0  # requests begun on this connection
        self._done = False  # refused or evicted: nothing more is read

    # -- lifecycle -----------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self.guard.admit(self):
            self._refuse(
                503,
                "too-many-connections",
                "Service Unavailable: too many connections",
            )
            return
        # Idle from the start: a connection that never sends a byte is closed too.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.forget(self)
        self._cancel_deadline()
        self._unset_keepalive_if_required()
        super().connection_lost(exc)

    def serving(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def drop(self, why: str) -> None:
        self._done = True
        self.guard.refusals.note(why)
        self.transport.close()

    # -- input ---------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        # Unlike uvicorn, bytes alone do not reset the idle timer (a client
        # sending a CRLF now and then would hold the connection): a request
        # beginning does (on_message_begin).
        if self._done:
            return
        in_head, begun = self._in_head, self._messages
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, "bad-http", "Bad Request: protocol upgrades are not supported")
            return
        except httptools.HttpParserError:
            if not self._done:
                self._refuse(400, "bad-http", "Bad Request: invalid HTTP request")
            return
        if in_head and self._in_head and begun == self._messages:
            # The whole chunk belongs to a head still coming, whose headers
            # httptools buffers until each is complete: count it, so a huge
            # header is refused at the limit, not after it is all read.
            self._head_buffered += len(data)
            if self._head_buffered > self._max_head:
                self._refuse_head()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._unset_keepalive_if_required()
        self.guard.touch(self)
        self._messages += 1
        self._in_head = True
        self._head_bytes = 0
        self._head_buffered = 0
        self._arm(self.guard.limits.header_timeout, self._head_timed_out)

    def on_url(self, url: bytes) -> None:
        self.url += url
        self._head_bytes += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        if self._head_bytes > self._max_head:
            self._refuse_head()
            raise _Refused  # stop parsing: nothing of this request runs
        self._arm(self.guard.limits.body_timeout, self._body_timed_out)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._cancel_deadline()
        super().on_message_complete()

    # -- refusals ------------------------------------------------------------
    def _refuse_head(self) -> None:
        self._refuse(
            431,
            "header-too-large",
            f"Request Header Fields Too Large: the limit is {self._max_head} bytes",
        )

    def _head_timed_out(self) -> None:
        self._deadline = None
        if self.serving():
            # A pipelined head, behind a request still being answered: its
            # time starts once that answer is out.
            self._arm(self.guard.limits.header_timeout, self._head_timed_out)
            return
        if self._in_head:
            self._refuse(408, "header-timeout", "Request Timeout: the head came too slowly")

    def _body_timed_out(self) -> None:
        self._deadline = None
        cycle = self.cycle
        if cycle is not None and not cycle.response_started and not self.pipeline:
            # The app is waiting in receive(): it sees a disconnect, and its
            # answer goes nowhere (send is a no-op once disconnected).
            cycle.disconnected = True
            cycle.message_event.set()
            self._refuse(408, "body-timeout", "Request Timeout: the body came too slowly")
        else:
            # Answered already (e.g. 401 before the body), or queued behind
            # another request's answer: only closing is left.
            self.drop(REFUSALS["body-timeout"])

    def _refuse(self, status: int, reason: str, message: str) -> None:
        if self._done:
            return
        self._cancel_deadline()
        self._unset_keepalive_if_required()
        cycle = self.cycle
        # A pipelined request's refusal would be read as the answer to the
        # one before it, unless that one is answered: else only close.
        if cycle is None or cycle.response_complete or reason == "body-timeout":
            body = orjson.dumps(
                wire.gateway_error(None, wire.INVALID_REQUEST, message, reason=reason)
            )
            head = [
                STATUS_LINE[status],
                b"content-type: application/json\r\n",
                b"content-length: %d\r\n" % len(body),
                b"connection: close\r\n\r\n",
            ]
            self.transport.write(b"".join(head) + body)
        self.guard.on_refusal(status)
        self.drop(REFUSALS[reason])

    # -- timers --------------------------------------------------------------
    def _arm(self, seconds: float, callback: Callable[[], None]) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(seconds, callback)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def timeout_keep_alive_handler(self) -> None:
        if not self.transport.is_closing():
            self.guard.forget(self)
            self.transport.close()


class _Refused(Exception):
    """Raised from a parser callback to stop parsing a refused request."""


# -- open files ------------------------------------------------------------------
def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; the soft limit after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning(
                "could not raise the open-files limit", soft=soft, hard=hard, error=str(exc)
            )
    return soft


@dataclass(frozen=True, slots=True)
class Capacity:
    connections: int  # the connection cap
    backlog: int  # the listen backlog, which is also how many accepts one loop pass makes


MAX_BACKLOG = 2048  # uvicorn's default


def capacity(configured: int, open_files: int, upstream_sessions: int) -> Capacity:
    """The connection cap and listen backlog the open-files limit allows.

    asyncio accepts up to `backlog` sockets in one pass, before any of them
    reaches the protocol that would refuse or evict; their descriptors (and
    those of evicted connections, closed a pass later) come on top of the cap.
    Over the limit, every accept() fails until descriptors free up. Warns once
    when the cap must be lower than configured."""
    budget = max(open_files - FD_RESERVE - FD_PER_UPSTREAM_SESSION * upstream_sessions, 3)
    if budget >= configured + 2 * MAX_BACKLOG:
        return Capacity(configured, MAX_BACKLOG)
    backlog = min(max(budget // 8, 1), MAX_BACKLOG)
    allowed = min(configured, max(budget - 2 * backlog, 1))
    if allowed < configured:
        log.warning(
            f"the open-files limit ({open_files}) allows only {allowed} HTTP connections "
            f"of the configured max_connections = {configured}; raise it (ulimit -n) "
            "to allow more",
            open_files=open_files,
            max_connections=configured,
            allowed=allowed,
        )
    return Capacity(allowed, backlog)


def quiet_accept_errors(loop: asyncio.AbstractEventLoop, refusals: RefusalLog) -> None:
    """asyncio logs a traceback each time accept() fails for lack of file
    descriptors (and retries a second later); count those instead."""
    default = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
            refusals.note("accept() failures for lack of file descriptors")
            return
        if default is not None:
            default(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
