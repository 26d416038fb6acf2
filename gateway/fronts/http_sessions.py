"""The legacy clients' sessions on the HTTP front (2025-11-25 basic/transports
"Session Management"): minted when an `initialize` opens one upstream, found
by Mcp-Session-Id for the principal that opened it and no other, ended by
DELETE, idle expiry or shutdown; each with its GET stream (2025-11-25
"Listening for Messages from the Server") and its resumable streams."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Mapping
from typing import Protocol

import anyio
import structlog

from gateway import wire
from gateway.client_link import ClientLink
from gateway.core import fair_share
from gateway.core.routing import LegacyClientSession
from gateway.fronts.asgi import Receive, Send
from gateway.fronts.client_queues import ClientQueues
from gateway.fronts.http_answers import HttpError, serve_session_stream
from gateway.fronts.http_calls import HttpCalls
from gateway.fronts.http_output import http_link
from gateway.fronts.legacy_session import LegacySession
from gateway.fronts.port import GatewayPort
from gateway.loop_clock import LazyClock
from gateway.share_log import log_refusal

log = structlog.get_logger("gateway.fronts.http")


class HasLink(Protocol):
    @property
    def link(self) -> ClientLink: ...


def too_many(refusal: str) -> str:
    """The 503's words for a session refused by `HttpSessions.refusal`."""
    if refusal == "total":
        return "Too many sessions"
    return "Too many sessions for this client ([http] max_sessions_per_principal)"


class HttpSessions:
    def __init__(self, service: GatewayPort, calls: HttpCalls, queues: ClientQueues) -> None:
        self.service = service
        self.calls = calls
        self.queues = queues
        self.by_id: dict[str, LegacySession] = {}
        # The front's other legacy sessions (HTTP+SSE), under the same limit.
        self.others: Mapping[str, HasLink] = {}
        self._now = LazyClock()  # find() is on every legacy request's path

    async def initialize(
        self, principal: str, msg: wire.Message, receive: Receive, send: Send
    ) -> None:
        """Run a legacy `initialize`; its answer carries the new session's id
        if it opened a session upstream."""
        refusal = self.refusal(principal)
        if refusal is not None:
            raise HttpError(503, too_many(refusal), wire.INTERNAL_ERROR, msg.get("id"))
        output, link = http_link(self.queues, principal)
        session = LegacySession(secrets.token_urlsafe(24), link, output)
        self.service.links.add(link)
        opened: list[LegacyClientSession | None] = []

        def extra(reply: wire.Message) -> list[tuple[bytes, bytes]]:
            opened.append(link.session)
            if link.session is None:
                return []
            self.by_id[session.id] = session
            log.info("http session opened", session=session.id[:8], principal=principal)
            return [(b"mcp-session-id", session.id.encode())]

        try:
            await self.calls.run(
                link, output, msg, receive, send, modern=False, extra_headers=extra
            )
        finally:
            if not opened or opened[0] is None:
                self.service.drop_link(link)

    def refusal(self, principal: str) -> str | None:
        """Whether `principal` may open one more legacy session, of either
        transport: "total" past `[http] max_sessions`, "share" past its own
        `max_sessions_per_principal`, else None."""
        holders = itertools.chain(self.by_id.values(), self.others.values())
        share = self.service.config.http_session_share
        refusal = fair_share.refusal_among((s.link.principal for s in holders), principal, share)
        if refusal is not None:
            log_refusal(refusal, "legacy client sessions", principal, share)
        return refusal

    def find(
        self, session_id: str | None, principal: str, msg_id: wire.RequestId | None
    ) -> LegacySession:
        """The session a request names, seen now; another principal's is not found."""
        if session_id is None:
            raise HttpError(400, "Bad Request: Mcp-Session-Id header is required", msg_id=msg_id)
        session = self.by_id.get(session_id)
        if session is None:
            raise HttpError(404, "Session not found", msg_id=msg_id)
        if session.link.principal != principal:
            raise HttpError(404, "Session not found", msg_id=msg_id)
        session.last_seen = self._now()
        return session

    async def serve_get(
        self,
        session_id: str,
        last_event_id: str | None,
        principal: str,
        receive: Receive,
        send: Send,
    ) -> None:
        """A session's GET: its one GET stream, or with Last-Event-ID
        (2025-11-25 "Resumability and Redelivery") the stream it names, resumed."""
        session = self.find(session_id, principal, None)
        if last_event_id is not None:
            if not await self.calls.streams.resume(session.streams, last_event_id, receive, send):
                raise HttpError(
                    400,
                    "Bad Request: Last-Event-ID names no stream of this session that can be"
                    " resumed (it ended, expired, or was never sent)",
                    reason="unknown-event-id",
                )
            return
        stream = session.output.open_get()
        if stream is None:
            raise HttpError(409, "Conflict: this session already has a GET stream")
        try:
            await serve_session_stream(stream, receive, send)
        finally:
            session.output.close_get()
            stream.discard()

    def end(self, session: LegacySession, why: str) -> None:
        self.by_id.pop(session.id, None)
        self.service.drop_link(session.link)
        session.output.close_all()
        log.info("http session ended", session=session.id[:8], why=why)

    def end_get_streams(self) -> None:
        for session in self.by_id.values():
            session.output.close_get()

    def expire_idle(self, cutoff: float) -> None:
        """End the sessions nobody used since `cutoff` (anyio.current_time());
        sweep the ended streams the others keep for resumption."""
        for session in list(self.by_id.values()):
            if session.last_seen < cutoff and not session.link.inflight:
                self.end(session, "idle")
            else:
                session.streams.sweep(anyio.current_time(), self.calls.streams.window)
