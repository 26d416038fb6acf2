"""Connection-level limits of the HTTP front, enforced in uvicorn's httptools
protocol before anything reaches the ASGI app: head size (431), slow heads and
slow bodies (408), idle connections (closed), connections at once (the oldest
idle one makes room, else 503).

This leans on uvicorn's HttpToolsProtocol internals (its parser callbacks,
`cycle`, `pipeline`, `on_response_complete`); pyproject pins uvicorn to the versions
tests/test_http_limits.py was run against, and that test checks the hooks
still exist.
"""

from __future__ import annotations

import asyncio
import errno
import math
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
    "shutdown": "requests whose body was still coming at shutdown answered 503",
    "evicted": "connections closed to admit new ones (idle, or slow to send a request)",
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
    """The open connections of one server, least recently active first, and
    the one timer that enforces their deadlines: a sweep every `tick`
    seconds, so a request costs no timer of its own (a deadline fires up to
    a tick late)."""

    def __init__(
        self, limits: HttpLimits, refusals: RefusalLog, on_refusal: Callable[[int], None]
    ) -> None:
        self.limits = limits
        self.cap = limits.max_connections
        self.refusals = refusals
        self.on_refusal = on_refusal  # the HTTP status, for metrics
        self.open: dict[LimitedHttpToolsProtocol, None] = {}
        shortest = min(limits.header_timeout, limits.body_timeout, limits.idle_timeout)
        self.tick = min(shortest / 4, 1.0)
        self._sweep: asyncio.TimerHandle | None = None

    def admit(self, conn: LimitedHttpToolsProtocol) -> bool:
        if len(self.open) >= self.cap and not self._make_room():
            return False
        self.open[conn] = None
        if self._sweep is None:
            self._sweep = conn.loop.call_later(self.tick, self.sweep, conn.loop)
        return True

    def touch(self, conn: LimitedHttpToolsProtocol) -> None:
        """`conn` is active: it moves to the end of the eviction order."""
        if conn in self.open:
            del self.open[conn]
            self.open[conn] = None

    def forget(self, conn: LimitedHttpToolsProtocol) -> None:
        self.open.pop(conn, None)

    def sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        """Expire what is past its deadline; runs while connections are open."""
        # The next sweep is booked first, so that nothing below can stop them.
        self._sweep = loop.call_later(self.tick, self.sweep, loop) if self.open else None
        now = loop.time()
        for conn in [c for c in self.open if c.deadline <= now]:
            conn.expire()

    def cut_off_bodies(self) -> None:
        """The shutdown grace is over: requests still sending their body get
        503 (their calls never started)."""
        for conn in list(self.open):
            if conn.phase == BODY:
                conn.refuse_body(503, "shutdown", "The gateway is shutting down")

    def _make_room(self) -> bool:
        # The least recently active connection with no call running makes
        # room: idle, or still sending its request (a slow sender must not
        # hold a slot that a quick one could use). One running a call (or
        # streaming its answer) never does.
        for conn in self.open:
            if conn.evictable():
                del self.open[conn]
                conn.evict()
                return True
        return False


def protocol_class(guard: ConnectionGuard) -> type[LimitedHttpToolsProtocol]:
    """A protocol class for uvicorn's `Config(http=...)`, bound to one guard."""

    class Bound(LimitedHttpToolsProtocol):
        pass

    Bound.guard = guard
    return Bound


NEVER = math.inf
# What a connection's deadline is for.
IDLE, HEAD, BODY, SERVING = "idle", "head", "body", "serving"


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    guard: ConnectionGuard

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = self.guard.limits
        self.deadline = NEVER  # loop time; the guard's sweep calls expire() after it
        self.phase = IDLE
        self._in_head = False
        self._done = False  # refused or evicted: nothing more is read
        # Sizes of the current head, counted per chunk (not per header, to
        # keep a request cheap): an upper bound (every chunk since the one
        # it began in, whole) and a lower bound (chunks wholly inside it).
        self._head_upper = 0
        self._head_lower = 0
        self._chunk = 0  # the size of the chunk being parsed
        self._begun = 0  # requests begun on this connection

    def _set_deadline(self, phase: str, seconds: float) -> None:
        self.phase = phase
        self.deadline = self.loop.time() + seconds

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
        self._set_deadline(IDLE, self.limits.idle_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.forget(self)
        self.deadline = NEVER
        super().connection_lost(exc)

    def serving(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def drop(self, why: str) -> None:
        self._done = True
        self.deadline = NEVER
        self.guard.refusals.note(why)
        self.transport.close()

    def evictable(self) -> bool:
        if self.phase == IDLE:
            return True
        if self.phase == HEAD:  # unless pipelined behind a call still running
            return not self.serving()
        # Its body still coming, unless queued behind a call still running.
        return self.phase == BODY and not self.pipeline

    def evict(self) -> None:
        message = "Service Unavailable: too many connections; this one was not sending fast enough"
        if self.phase == BODY:
            self.refuse_body(503, "evicted", message)
        elif self.phase == HEAD:
            self._refuse(503, "evicted", message)
        else:
            self.drop(REFUSALS["evicted"])

    def expire(self) -> None:
        self.deadline = NEVER
        if self.phase == IDLE:
            self.guard.forget(self)
            if not self.transport.is_closing():
                self.transport.close()
        elif self.phase == HEAD:
            self._head_timed_out()
        elif self.phase == BODY:
            self._body_timed_out()

    # -- input ---------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        # Unlike uvicorn, bytes alone do not make a connection active (a
        # client sending a CRLF now and then would hold it): a request
        # beginning does (on_message_begin).
        if self._done:
            return
        whole_chunk_in_head, begun = self._in_head, self._begun
        self._chunk = len(data)
        if whole_chunk_in_head:
            self._head_upper += self._chunk
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # Served as plain HTTP/1.1 (e.g. curl's "Upgrade: h2c"), as
            # uvicorn does, minus its warning per request.
            return
        except httptools.HttpParserError:
            if not self._done:
                self._refuse(400, "bad-http", "Bad Request: invalid HTTP request")
            return
        if self._in_head and whole_chunk_in_head and begun == self._begun:
            # Still the same head, still incomplete: httptools buffers its
            # headers until each is complete, so refuse at the limit rather
            # than after the whole of it.
            self._head_lower += self._chunk
            if self._head_lower > self.limits.max_header_bytes:
                self._refuse_head()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.guard.touch(self)
        self._begun += 1
        self._in_head = True
        self._head_upper = self._chunk
        self._head_lower = 0
        self._set_deadline(HEAD, self.limits.header_timeout)

    def on_headers_complete(self) -> None:
        self._in_head = False
        if self._head_upper > self.limits.max_header_bytes and self._head_size() > (
            self.limits.max_header_bytes
        ):
            self._refuse_head()
            raise _Refused  # stop parsing: nothing of this request runs
        self._set_deadline(BODY, self.limits.body_timeout)
        super().on_headers_complete()

    def _head_size(self) -> int:
        """The head's bytes: request line, header lines, blank line (less any
        extra whitespace around header values)."""
        line = len(self.parser.get_method()) + len(self.url) + len(b"  HTTP/1.1\r\n")
        return line + sum(len(n) + len(v) + 4 for n, v in self.headers) + 2

    def on_message_complete(self) -> None:
        if self.cycle is not None and self.cycle.response_complete and not self.pipeline:
            # Answered before its body ended (e.g. 401): idle from now.
            self._set_deadline(IDLE, self.limits.idle_timeout)
        else:
            self.phase, self.deadline = SERVING, NEVER
        super().on_message_complete()

    def on_response_complete(self) -> None:
        # uvicorn's, with the idle deadline instead of a keep-alive timer.
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        elif self.phase == SERVING:
            self._set_deadline(IDLE, self.limits.idle_timeout)

    # -- refusals ------------------------------------------------------------
    def _refuse_head(self) -> None:
        self._refuse(
            431,
            "header-too-large",
            f"Request Header Fields Too Large: the limit is {self.limits.max_header_bytes} bytes",
        )

    def _head_timed_out(self) -> None:
        if self.serving():
            # A pipelined head, behind a request still being answered: its
            # time starts once that answer is out.
            self._set_deadline(HEAD, self.limits.header_timeout)
            return
        if self._in_head:
            self._refuse(408, "header-timeout", "Request Timeout: the head came too slowly")

    def _body_timed_out(self) -> None:
        self.refuse_body(408, "body-timeout", "Request Timeout: the body came too slowly")

    def refuse_body(self, status: int, reason: str, message: str) -> None:
        cycle = self.cycle
        if cycle is not None and not cycle.response_started and not self.pipeline:
            # The app is waiting in receive(): it sees a disconnect, and its
            # answer goes nowhere (send is a no-op once disconnected).
            cycle.disconnected = True
            cycle.message_event.set()
            self._refuse(status, reason, message, body_phase=True)
        else:
            # Answered already (e.g. 401 before the body), or queued behind
            # another request's answer: only closing is left.
            self.drop(REFUSALS[reason])

    def _refuse(self, status: int, reason: str, message: str, body_phase: bool = False) -> None:
        if self._done:
            return
        cycle = self.cycle
        # A pipelined request's refusal would be read as the answer to the
        # one before it, unless that one is answered: else only close.
        if cycle is None or cycle.response_complete or body_phase:
            code = wire.INTERNAL_ERROR if status >= 500 else wire.INVALID_REQUEST
            body = orjson.dumps(wire.gateway_error(None, code, message, reason=reason))
            head = [
                STATUS_LINE[status],
                b"content-type: application/json\r\n",
                b"content-length: %d\r\n" % len(body),
                b"connection: close\r\n\r\n",
            ]
            self.transport.write(b"".join(head) + body)
        self.guard.on_refusal(status)
        self.drop(REFUSALS[reason])


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
# Accepted sockets not yet admitted, and evicted ones not yet closed, at once:
# measured with floods of 2,000 connections at 1,024 open files (2 was short).
BACKLOGS_IN_FLIGHT = 4


def capacity(configured: int, open_files: int, upstream_sessions: int) -> Capacity:
    """The connection cap and listen backlog the open-files limit allows.

    asyncio accepts up to `backlog` sockets in one pass, before any of them
    reaches the protocol that would refuse or evict; their descriptors (and
    those of evicted connections, closed a pass later) come on top of the cap.
    Over the limit, every accept() fails until descriptors free up. Warns once
    when the cap must be lower than configured."""
    budget = max(open_files - FD_RESERVE - FD_PER_UPSTREAM_SESSION * upstream_sessions, 5)
    if budget >= configured + BACKLOGS_IN_FLIGHT * MAX_BACKLOG:
        return Capacity(configured, MAX_BACKLOG)
    backlog = min(max(budget // 16, 1), MAX_BACKLOG)
    allowed = min(configured, max(budget - BACKLOGS_IN_FLIGHT * backlog, 1))
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
