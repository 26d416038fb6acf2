"""The subscriptions a client has through the gateway, wired to the upstream:
a legacy session's own upstream listen (DESIGN §5.2.6), the listens moved to
a new session when the upstream restarts, and every listen ended gracefully
at shutdown (2026-07-28 subscriptions "Graceful Closure")."""

from __future__ import annotations

import anyio
import structlog

from gateway import wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.core import subscriptions as subs_core
from gateway.runtime.subscriptions.listens import Listens
from gateway.runtime.subscriptions.session_listen import SessionListen
from gateway.runtime.upstream_pool import UpstreamPool
from gateway.runtime.upstream_session import UpstreamSession
from gateway.upstream_errors import UpstreamError

log = structlog.get_logger("gateway")


class ClientSubscriptions:
    def __init__(self, config: Config, pool: UpstreamPool, listens: Listens) -> None:
        self.config = config
        self.pool = pool
        self.listens = listens
        self.tg: anyio.abc.TaskGroup | None = None

    def session_listen(self, link: ClientLink) -> SessionListen:
        if link.session_listen is None:
            assert self.tg is not None

            async def session_for() -> UpstreamSession:
                return await self.pool.session_for(link.principal, {})

            link.session_listen = SessionListen(self.config, link, self.tg, session_for)
        listen: SessionListen = link.session_listen
        return listen

    async def open_session_listen(self, link: ClientLink) -> None:
        """A legacy session of a modern server hears list_changed from the start."""
        try:
            session = await self.pool.session_for(link.principal, {})
            await self.session_listen(link).reopen(session)
        except (UpstreamError, TimeoutError) as exc:
            log.warning("cannot open the session's upstream listen", error=str(exc))

    async def session_lost(self, session: UpstreamSession) -> None:
        principal = session.key.principal

        async def replace() -> UpstreamSession:
            return await self.pool.session_for(principal if principal != "*" else "local", {})

        assert self.tg is not None
        self.tg.start_soon(self.listens.session_lost, session, replace)

    def end_all(self) -> None:
        """Shutdown begins: listens end with their graceful closing result
        (2026-07-28 subscriptions "Graceful Closure"): those the gateway serves
        on a legacy server, and a modern client's listens passed through to a
        modern server, which the server is told to drop."""
        self.listens.end_all()
        for session in list(self.pool.sessions.values()):
            for upstream_id, pending in list(session.pending.items()):
                if (
                    pending.method == "subscriptions/listen"
                    and pending.owner is not None
                    and pending.client_id is not None
                    and pending.tag is None  # not a legacy session's own listen
                ):
                    session.abandon_call(upstream_id, "the gateway is shutting down")
                    closing = subs_core.closing_result(pending.client_id)
                    pending.settle(wire.result_response(pending.client_id, closing))
