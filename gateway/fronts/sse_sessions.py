"""The sessions of HTTP+SSE clients (the deprecated transport of 2024-11-05
and 2025-03-26; 2025-11-25 basic/transports "Backwards Compatibility").

Each is one event stream: the client link's every message (replies, server
requests, notifications) is queued for it in order, and the GET that opened
it writes them out. The session lives exactly as long as that stream. A
client that stops reading is bounded: past `max_queued` waiting messages the
stream is cut and the session ends, with one log line.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field

import anyio
import structlog

from gateway import wire
from gateway.client_link import ClientLink
from gateway.fronts.http_access import HttpAccess
from gateway.fronts.http_output import MAX_QUEUED, Inbox
from gateway.fronts.port import GatewayPort
from gateway.log_limit import LogLimiter

log = structlog.get_logger("gateway.fronts.sse")
overflow_log = LogLimiter(log)

# secrets.token_urlsafe(24): 32 characters of the URL-safe alphabet.
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{32}")


@dataclass(eq=False)
class SseSession:
    id: str
    link: ClientLink
    outbox: Inbox = field(default_factory=Inbox)
    # The client's requests not yet answered, counted against its principal.
    pending: set[wire.RequestId] = field(default_factory=set)
    # The stream's writer: cancelled to cut a stream its client does not read.
    scope: anyio.CancelScope | None = None
    ended_why: str | None = None
    cut: bool = False


class SseSessions:
    def __init__(self, service: GatewayPort, access: HttpAccess) -> None:
        self.service = service
        self.access = access
        self.by_id: dict[str, SseSession] = {}
        self.max_queued = MAX_QUEUED

    def open(self, principal: str) -> SseSession:
        holder: list[SseSession] = []

        async def send(msg: wire.Message) -> None:
            deliver(msg)

        def deliver(msg: wire.Message) -> None:
            self._deliver(holder[0], msg)

        link = ClientLink(send=send, send_nowait=deliver, principal=principal, transport="sse")
        session = SseSession(secrets.token_urlsafe(24), link)
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
            session.pending.discard(msg["id"])
            self.access.end(session.link.principal)
        if len(session.outbox) >= self.max_queued:
            overflow_log.warning(
                "sse session ended: its client does not read its stream",
                session=session.id[:8],
                queued=self.max_queued,
            )
            self.stop(session, "its client does not read its stream", cut=True)
            return
        session.outbox.put(msg)

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
        session.outbox.close()
        for _ in session.pending:
            self.access.end(session.link.principal)
        session.pending.clear()
        self.service.drop_link(session.link)
        log.info("sse session ended", session=session.id[:8], why=why)

    def stop_all(self, why: str) -> None:
        for session in list(self.by_id.values()):
            self.stop(session, why)
