"""A server's notifications on their way to clients: core/server_notifications.py
says where each goes; this looks up the tables (progress routes, forwarded
requests, listens) and sends."""

from __future__ import annotations

import structlog

from gateway import era, wire
from gateway.client_link import ClientLink
from gateway.core import server_notifications as notes
from gateway.core import subscriptions as subs_core
from gateway.core.server_notifications import Kind
from gateway.core.session_choice import MODERN_KEY
from gateway.log_limit import LogLimiter
from gateway.runtime.pending_calls import PendingCall
from gateway.runtime.server_requests import ServerRequestDesk, send_quietly
from gateway.runtime.subscriptions.listens import Listens
from gateway.runtime.upstream_session import UpstreamSession

log = structlog.get_logger("gateway")


class NotificationRouter:
    def __init__(
        self, links: set[ClientLink], listens: Listens, server_requests: ServerRequestDesk
    ) -> None:
        self.links = links
        self.listens = listens
        self.server_requests = server_requests
        # A misbehaving server can send junk without end: one line a minute.
        self._junk_log = LogLimiter(log)

    async def route(self, session: UpstreamSession, msg: wire.Message) -> None:
        server_is_legacy = session.profile is not None and session.profile.era is era.Era.LEGACY
        route = notes.route(msg, server_is_legacy)
        kind = route.kind
        if kind is Kind.PROGRESS:
            progress = session.progress.get(route.key)
            if progress is not None:
                await send_quietly(
                    progress.owner, notes.for_client_token(msg, progress.client_token)
                )
        elif kind is Kind.LOG:
            for link in self._legacy_links_of(session):
                assert link.session is not None
                if notes.legacy_client_wants_log(
                    link.session.log_level, route.key, server_is_legacy
                ):
                    await send_quietly(link, msg)
            call = notes.log_call(session.calls_a_notification_may_belong_to(msg), route.key)
            if call is not None and call.owner is not None:
                await send_quietly(call.owner, msg)
        elif kind is Kind.CANCELLED:
            await self.server_requests.server_cancelled(session, msg)
        elif kind is Kind.LISTEN:
            await self._to_listener(session.pending.get(route.key), msg)
        elif kind is Kind.SESSION:
            await self.listens.deliver(session, msg)
            # Same-era passthrough for legacy clients (list_changed, resources/updated, …).
            for link in self._legacy_links_of(session):
                await send_quietly(link, msg)
        elif kind is Kind.MALFORMED:
            self._junk_log.warning(
                "malformed server notification dropped",
                method=str(msg.get("method"))[:100],
                why=route.key,
                session=session.label,
            )
        else:
            log.debug("server notification with no listener dropped", method=msg["method"])

    async def _to_listener(self, listen: PendingCall | None, msg: wire.Message) -> None:
        """A modern server's listen stream: back under the client's own id."""
        if listen is None:
            return
        if listen.tag is not None:
            await listen.tag.on_notification(msg)
        elif listen.owner is not None and listen.client_id is not None:
            await send_quietly(listen.owner, subs_core.tagged(msg, listen.client_id))

    def _legacy_links_of(self, session: UpstreamSession) -> list[ClientLink]:
        """The legacy clients a session's notifications that name no call may
        go to: those of the session's principal, never another's (sessions
        are keyed by principal, DESIGN §5.1.1; a log line or a resource
        update of one tenant's server session is not another's to see)."""
        if session.key == MODERN_KEY:
            # One modern session for every principal: only the clients with a
            # call on it (a modern server logs per request, 2026-07-28).
            return [link for link in session.owners() if link.session is not None]
        principal = session.key.principal
        return [
            link for link in self.links if link.session is not None and link.principal == principal
        ]
