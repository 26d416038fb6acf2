"""The sessions of HTTP+SSE clients (the deprecated transport of 2024-11-05
and 2025-03-26; 2025-11-25 basic/transports "Backwards Compatibility").

Each is one event stream: the client link's every message (replies, server
requests, notifications) is queued for it in order, and the GET that opened
it writes them out. The session lives exactly as long as that stream. A
client that stops reading is bounded: past `max_queued` waiting messages
or `max_queued_bytes` of them, or past `[http] max_queued_bytes_per_principal`
waiting on all the streams of its principal (fronts/client_queues.py), the
stream is cut and the session ends, with one log line.
"""

from __future__ import annotations

import re
import secrets
import time
from collections import deque
from dataclasses import dataclass, field

import anyio
import orjson
import structlog

from gateway import wire
from gateway.client_link import ClientLink
from gateway.fronts.client_queues import ClientQueues
from gateway.fronts.http_access import HttpAccess
from gateway.fronts.metrics import Metrics
from gateway.fronts.port import GatewayPort
from gateway.log_limit import LogLimiter

log = structlog.get_logger("gateway.fronts.sse")

# The events waiting for one stream, at most (and at most `[gateway]
# max_queued_bytes` of them, or twice `max_message_bytes` if more).
MAX_QUEUED = 1024
# Events already queued go out together up to this many bytes: under load
# replies come in bursts, and each write is a send() (and an HTTP chunk).
MAX_BATCH_BYTES = 64 * 1024
# secrets.token_urlsafe(24): 32 characters of the URL-safe alphabet.
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{32}")


class EventQueue:
    """The encoded events on their way to one stream, in order, and how
    many bytes they hold (counted with the other streams of its principal
    in `queues`): the bound is on both, so that a client that stops reading
    costs at most so much memory however large its messages."""

    __slots__ = ("_event", "_items", "_principal", "_queues", "closed", "size")

    def __init__(self, queues: ClientQueues, principal: str) -> None:
        self._items: deque[bytes] = deque()
        self._event: anyio.Event | None = None
        self._queues = queues
        self._principal = principal
        self.size = 0
        self.closed = False

    def __len__(self) -> int:
        return len(self._items)

    def put(self, data: bytes) -> None:
        if self.closed:
            return
        self._items.append(data)
        self.size += len(data)
        self._queues.add(self._principal, len(data))
        if self._event is not None:
            self._event.set()

    def close(self) -> None:
        self.closed = True
        if self._event is not None:
            self._event.set()

    def discard(self) -> None:
        """The stream is over: what it did not write goes, its bytes released."""
        self.close()
        if self.size:
            self._queues.release(self._principal, self.size)
        self._items.clear()
        self.size = 0

    async def get(self) -> bytes:
        """The next event and those queued after it, in order, up to
        MAX_BATCH_BYTES (one event at least, however large);
        anyio.EndOfStream once closed and drained."""
        while not self._items:  # each pass waits for a put or the close
            if self.closed:
                raise anyio.EndOfStream
            self._event = event = anyio.Event()
            try:
                await event.wait()
            finally:
                self._event = None
        items = self._items
        data = items.popleft()
        if items and len(data) + len(items[0]) <= MAX_BATCH_BYTES:
            batch = [data]
            size = len(data)
            while items and size + len(items[0]) <= MAX_BATCH_BYTES:
                size += len(items[0])
                batch.append(items.popleft())
            data = b"".join(batch)
        self.size -= len(data)
        self._queues.release(self._principal, len(data))
        return data


def message_event(msg: wire.Message) -> bytes:
    return b"event: message\ndata: " + orjson.dumps(msg) + b"\n\n"


@dataclass(eq=False)
class SseSession:
    id: str
    link: ClientLink
    outbox: EventQueue
    # The client's requests not yet answered, counted against its principal:
    # their method and when they came (for the request metrics).
    pending: dict[wire.RequestId, tuple[str, float]] = field(default_factory=dict)
    # The stream's writer: cancelled to cut a stream its client does not read.
    scope: anyio.CancelScope | None = None
    ended_why: str | None = None
    cut: bool = False
    # When the client last POSTed (anyio.current_time()): an open stream
    # alone does not keep a session that nobody uses.
    last_seen: float = field(default_factory=anyio.current_time)


class SseSessions:
    def __init__(
        self, service: GatewayPort, access: HttpAccess, metrics: Metrics, queues: ClientQueues
    ) -> None:
        self.service = service
        self.access = access
        self.metrics = metrics
        self.queues = queues
        self.by_id: dict[str, SseSession] = {}
        self.max_queued = MAX_QUEUED
        # Many clients that stop reading at once must not flood the log.
        self.overflow_log = LogLimiter(log)
        # At least one message of the largest size the gateway passes.
        config = service.config
        self.max_queued_bytes = max(config.queue_bounds.queue_bytes, 2 * config.max_message_bytes)

    def open(self, principal: str) -> SseSession:
        holder: list[SseSession] = []

        async def send(msg: wire.Message) -> None:
            deliver(msg)

        def deliver(msg: wire.Message) -> None:
            self._deliver(holder[0], msg)

        link = ClientLink(send=send, send_nowait=deliver, principal=principal, transport="sse")
        session = SseSession(secrets.token_urlsafe(24), link, EventQueue(self.queues, principal))
        holder.append(session)
        self.by_id[session.id] = session
        self.service.links.add(link)
        log.info("sse session opened", session=session.id[:8], principal=principal)
        return session

    def find(self, session_id: str, principal: str) -> SseSession | None:
        """The open session of this id and principal (another's is not found)."""
        session = self.by_id.get(session_id)
        if session is None or session.link.principal != principal:
            return None
        return session

    def _deliver(self, session: SseSession, msg: wire.Message) -> None:
        if session.ended_why is not None:
            return
        if "method" not in msg and msg.get("id") in session.pending:
            method, started = session.pending.pop(msg["id"])
            self.access.end(session.link.principal)
            self.metrics.observe_request(
                method,
                session.link,
                msg,
                time.perf_counter() - started,
                self.service.path_for(True),
            )
        data = message_event(msg)
        outbox = session.outbox
        principal = session.link.principal
        shared = self.queues.queued(principal) + len(data) > self.queues.shared.queue_bytes
        if (
            len(outbox) >= self.max_queued
            or outbox.size + len(data) > self.max_queued_bytes
            or shared
        ):
            self.overflow_log.warning(
                "sse session ended: its client does not read its stream",
                session=session.id[:8],
                queued=len(outbox),
                queued_bytes=outbox.size,
                principal_queued_bytes=self.queues.queued(principal),
                bound="principal" if shared else "stream",
            )
            self.stop(session, "its client does not read its stream", cut=True)
            return
        outbox.put(data)

    def stop(self, session: SseSession, why: str, *, cut: bool = False) -> None:
        """End the session's stream after what is queued, or (`cut`) at
        once; its writer then ends the session."""
        if session.ended_why is None:
            session.ended_why = why
        session.outbox.close()
        if cut:
            session.cut = True
            if session.scope is not None:
                session.scope.cancel()

    def end(self, session: SseSession) -> None:
        """The stream is over: the session and its calls end with it."""
        if self.by_id.pop(session.id, None) is None:
            return
        why = session.ended_why or "the client closed the stream"
        session.ended_why = why
        session.outbox.discard()
        for _ in session.pending:
            self.access.end(session.link.principal)
        session.pending.clear()
        self.service.drop_link(session.link)
        if not session.cut:  # a cut stream's warning said it already
            log.info("sse session ended", session=session.id[:8], why=why)

    def expire_idle(self, cutoff: float) -> None:
        """End the sessions whose client has POSTed nothing since `cutoff`
        and waits for no reply (`[http] session_idle`, as for Streamable
        HTTP sessions): their streams end, and the client reconnects."""
        for session in list(self.by_id.values()):
            if session.last_seen < cutoff and not session.pending and not session.link.inflight:
                self.stop(session, "idle")

    def stop_all(self, why: str) -> None:
        for session in list(self.by_id.values()):
            self.stop(session, why)
