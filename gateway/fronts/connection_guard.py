"""The server-wide side of the HTTP front's connection limits: the limits
themselves, the open connections least recently active first, the one timer
that enforces every connection's deadline, and the log that counts
refusals instead of writing a line each. Each connection's own side is
limited_protocol.py."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import structlog

log = structlog.get_logger("gateway.fronts.http")

NEVER = math.inf
# What a connection's deadline is for (the sweep below enforces it).
IDLE, HEAD, BODY, SERVING = "idle", "head", "body", "serving"
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


class GuardedConnection(Protocol):
    """What the guard needs of a connection (fronts/limited_protocol.py's)."""

    loop: asyncio.AbstractEventLoop
    deadline: float  # loop time
    phase: str  # IDLE, HEAD, BODY or SERVING

    def evictable(self) -> bool: ...
    def evict(self) -> None: ...
    def expire(self) -> None: ...
    def refuse_body(self, status: int, reason: str, message: str) -> None: ...


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
        self.open: dict[GuardedConnection, None] = {}
        shortest = min(limits.header_timeout, limits.body_timeout, limits.idle_timeout)
        self.tick = min(shortest / 4, 1.0)
        self._sweep: asyncio.TimerHandle | None = None
        # Draining (SIGTERM): every answer closes its connection, so that
        # clients open their next one to a replica the balancer still sends
        # to, and none is left idle here to race the final close.
        self.draining = False

    def admit(self, conn: GuardedConnection) -> bool:
        if len(self.open) >= self.cap and not self._make_room():
            return False
        self.open[conn] = None
        if self._sweep is None:
            self._sweep = conn.loop.call_later(self.tick, self.sweep, conn.loop)
        return True

    def touch(self, conn: GuardedConnection) -> None:
        """`conn` is active: it moves to the end of the eviction order."""
        if conn in self.open:
            del self.open[conn]
            self.open[conn] = None

    def forget(self, conn: GuardedConnection) -> None:
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
