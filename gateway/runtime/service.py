"""The gateway at work: takes each client's messages and the upstream's, and
hands them to the parts that serve them — client calls (runtime/client_calls.py),
a legacy server's requests (runtime/server_requests.py) and its notifications
(runtime/server_notifications.py). The decisions are the core's; this is the
one place that knows all the parts, and what the fronts see of them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import structlog

from gateway import era, inbound, log_setup, peer_queue, wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.core import routing
from gateway.core.profile import UpstreamProfile
from gateway.fronts.port import GatewaySnapshot, Readiness
from gateway.runtime import message_log
from gateway.runtime.client_calls import ClientCalls
from gateway.runtime.message_log import MessageLog
from gateway.runtime.server_notifications import NotificationRouter
from gateway.runtime.server_requests import ServerRequestDesk
from gateway.runtime.subscriptions.client_subscriptions import ClientSubscriptions
from gateway.runtime.subscriptions.listens import Listens
from gateway.runtime.upstream_pool import UpstreamPool
from gateway.runtime.upstream_session import UpstreamSession
from gateway.runtime.upstream_supervisor import Connector
from gateway.upstream_errors import UpstreamError

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from gateway.runtime.tracing import RequestTracing

log = structlog.get_logger("gateway")


class GatewayService:
    def __init__(
        self,
        config: Config,
        tap: Callable[[str, wire.Message], None] | None = None,
        connect: Connector | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        """`tracer_provider`: where spans go when tracing is on (tests);
        else the process's (runtime/tracing.py `install`)."""
        self.config = config
        self.links: set[ClientLink] = set()
        # --log-level debug only (runtime/message_log.py); None costs nothing.
        self.message_log: MessageLog | None = None
        if message_log.enabled(config):
            self.message_log = MessageLog(lambda: self.pool.era_name)
            tap = self.message_log.tap(tap)
        self.pool = UpstreamPool(config, self._on_server_message, tap, connect, corker=self)
        self.tracing: RequestTracing | None = None
        if config.tracing or tracer_provider is not None:
            from gateway.runtime.tracing import RequestTracing  # only then: the otel extra

            self.tracing = RequestTracing(self.pool, tracer_provider)
        self.listens = Listens(config)
        self.subscriptions = subs = ClientSubscriptions(config, self.pool, self.listens)
        self.pool.on_session_lost = subs.session_lost
        self.pool.in_use = self.listens.holds
        self.calls = ClientCalls(
            config, self.pool, self.links, self.listens, subs.session_listen, self.tracing
        )
        self.bridge = self.calls.bridge
        self.legacy_input = self.calls.legacy_input
        self.server_requests = ServerRequestDesk(config, self.links, self.bridge)
        self.notifications = NotificationRouter(self.links, self.listens, self.server_requests)
        self._tg: anyio.abc.TaskGroup | None = None
        # Shutting down (SIGTERM on the HTTP front): /readyz turns 503 first.
        self.draining = False

    # -- client side -----------------------------------------------------
    async def handle_client_message(
        self,
        link: ClientLink,
        msg: wire.Message,
        tg: anyio.abc.TaskGroup,
        *,
        checked: bool = False,
    ) -> None:
        """Take one message from a client. Requests that wait run as tasks in
        `tg` (the link's own task group), so a slow call never holds up the
        next line. `checked`: the front already ran `inbound.problem` on it."""
        if self.message_log is not None:
            self.message_log.from_client(link, msg)
        kind = wire.kind_of(msg)
        if not checked and kind in (wire.Kind.REQUEST, wire.Kind.NOTIFICATION):
            wrong = inbound.problem(msg)
            if wrong is not None:
                await self._refuse(link, msg, wrong)
                return
        if kind is wire.Kind.REQUEST:
            self._take_request(link, msg, tg)
        elif kind is wire.Kind.NOTIFICATION:
            await self._handle_client_notification(link, msg)
        else:
            self.server_requests.client_answered(link, msg)

    def take_request(self, link: ClientLink, msg: wire.Message, tg: anyio.abc.TaskGroup) -> None:
        """A client request whose shape the front checked: served at once
        when nothing in it waits, else in a task of `tg` (the link's group);
        refused past the link's limits (the answer queued on the link)."""
        if self.message_log is not None:
            self.message_log.from_client(link, msg)
        self._take_request(link, msg, tg)

    def _take_request(self, link: ClientLink, msg: wire.Message, tg: anyio.abc.TaskGroup) -> None:
        inflight = link.inflight
        if msg["id"] in inflight or len(inflight) >= self.config.max_inflight_per_client:
            refusal = self._over_limits(link, msg["id"])
            if self.tracing is None:
                link.send_nowait(refusal)
            else:  # a reused id's refusal must not end the span of the call that has it
                self.tracing.send_untraced(link, refusal)
        else:
            traced = None if self.tracing is None else self.tracing.request(link, msg)
            self.calls.take(link, msg, tg, traced)

    def _over_limits(self, link: ClientLink, msg_id: wire.RequestId) -> wire.Message:
        if msg_id in link.inflight:
            return wire.error_response(
                msg_id,
                wire.INVALID_REQUEST,
                "Invalid Request: a request with this id is still in progress",
            )
        limit = self.config.max_inflight_per_client
        return wire.gateway_error(
            msg_id,
            wire.INTERNAL_ERROR,
            f"Too many requests in flight (limit {limit})",
            reason="inflight-limit",
        )

    async def _refuse(self, link: ClientLink, msg: wire.Message, wrong: tuple[str, str]) -> None:
        """A client message with a field of the wrong shape: a request gets
        -32602 naming it, a notification (nobody to answer) is dropped."""
        path, what = wrong
        if "id" in msg:
            log.debug("client request refused", method=msg["method"], field=path, problem=what)
            await link.send(inbound.invalid_params(msg["id"], path, what))
        else:
            # debug, like the refusals: a client cannot flood the log with them.
            log.debug("client notification dropped", method=msg["method"], field=path, problem=what)

    async def _handle_client_notification(self, link: ClientLink, msg: wire.Message) -> None:
        method = msg["method"]
        if method == "notifications/cancelled":
            target = (msg.get("params") or {}).get("requestId")
            if isinstance(target, str | int):
                self.cancel_request(link, target)
            return
        legacy = link.session is not None
        profile = self.pool.profile_for(legacy)
        if profile is None:
            return
        if (
            method == "notifications/initialized"
            and link.session is not None
            and profile.era is era.Era.MODERN
            and self._tg is not None
        ):
            self._tg.start_soon(self.subscriptions.open_session_listen, link)
        upstream_msg = routing.route_notification(msg, link.session, profile)
        if upstream_msg is None:
            return
        key_caps = link.session.modern_capabilities() if link.session else {}
        try:
            session = await self.pool.session_for(link.principal, key_caps, legacy)
            await session.notify(upstream_msg["method"], upstream_msg.get("params"))
        except (UpstreamError, TimeoutError) as exc:
            log.warning("client notification not delivered upstream", method=method, error=str(exc))

    def cancel_request(self, link: ClientLink, msg_id: wire.RequestId) -> None:
        """The client gave up on a request (stdio notifications/cancelled, or a
        closed HTTP response stream): the upstream is told with its own
        notifications/cancelled and no reply goes to the client (2026-07-28
        "Cancellation", "Behavior Requirements")."""
        call = link.inflight.get(msg_id)
        if call is None:
            return
        if self.tracing is not None:
            self.tracing.cancelled(link, msg_id)
        call.cancel()

    def hold_upstream_writes(self) -> None:
        self.pool.cork()

    def release_upstream_writes(self) -> None:
        self.pool.uncork()

    def drop_link(self, link: ClientLink) -> None:
        """A client connection or session is over: cancel what it still runs."""
        for msg_id in list(link.inflight):
            self.cancel_request(link, msg_id)
        for forwarded in link.server_requests.values():
            forwarded.done.set()
        if link.session_listen is not None:
            link.session_listen.close()
        if self.tracing is not None:
            self.tracing.link_dropped(link)
        self.links.discard(link)

    def handle_client_reply(self, link: ClientLink, msg: wire.Message) -> None:
        self.server_requests.client_answered(link, msg)

    # -- server side -----------------------------------------------------
    async def _on_server_message(self, session: UpstreamSession, msg: wire.Message) -> None:
        """Runs on the upstream reader: never blocks for long."""
        if "id" in msg:
            assert self._tg is not None
            await self.server_requests.on_request(session, msg, self._tg)
        else:
            await self.notifications.route(session, msg)

    # -- batching and lifecycle --------------------------------------------
    def cork(self) -> None:
        for link in self.links:
            link.cork()

    def uncork(self) -> None:
        for link in list(self.links):
            try:
                link.uncork()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                log.debug("client output closed", link=link.id)

    def end_subscriptions(self) -> None:
        """Shutdown begins: every listen ends with its graceful closing result."""
        self.subscriptions.end_all()

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = self.subscriptions.tg = tg
        self.calls.start(tg)
        await self.pool.start(tg)

    async def aclose(self) -> None:
        await self.pool.aclose()

    @asynccontextmanager
    async def closing_on_error(self) -> AsyncIterator[None]:
        """Around a front's whole run: an error nobody handled (or a
        cancellation from outside) ends the gateway, and on the way out the
        upstreams are still stopped and reaped, at once (SIGTERM, not a wait
        for them to notice their stdin), with what they started. Were the
        gateway's process to end first, the upstreams' process keepers would
        see to that (issue #29, class 6); this way it is said in the log."""
        try:
            yield
        except BaseException:
            log.warning("the gateway is ending on an error; stopping the upstreams")
            with anyio.CancelScope(shield=True):
                self.pool.hurry()
                await self.aclose()
            raise

    # -- what the fronts read (gateway.fronts.port.GatewayPort) ----------
    def remember_credential(self, principal: str, credential: str) -> None:
        self.pool.remember_credential(principal, credential)

    def path_for(self, legacy_client: bool) -> str:
        return self.pool.path_for(legacy_client)

    @property
    def replica(self) -> str:
        return self.bridge.sealer.instance

    def readiness(self) -> Readiness:
        pool, profile = self.pool, self.pool.profile
        if not pool.settled or profile is None:
            return Readiness(
                False, awaiting_credentials=pool.awaiting_credentials, failure=pool.failure
            )
        if self.draining:
            return Readiness(False, era=pool.era_name, failure="draining", draining=True)
        if pool.down is not None:
            return Readiness(False, era=pool.era_name, failure=pool.down)
        legacy = pool.legacy_side
        return Readiness(
            True,
            era=pool.era_name,
            server_info=profile.server_info,
            modern_version=profile.version if legacy is not None else None,
            legacy_version=legacy.version if legacy is not None else None,
        )

    def snapshot(self) -> GatewaySnapshot:
        pool = self.pool
        return GatewaySnapshot(
            upstream_sessions=len(pool.sessions),
            parked_calls=len(self.bridge.held),
            rounds_to_modern_client=self.bridge.rounds,
            rounds_to_legacy_client=self.legacy_input.rounds,
            tasks_polled_for_legacy_clients=self.legacy_input.tasks_polled,
            upstream_restarts=pool.restarts,
            upstream_ready=pool.up and pool.profile is not None,
            log_lines_dropped=log_setup.SINK.dropped,
            messages_dropped={
                **{("client", k): n for k, n in peer_queue.TOWARD_CLIENTS.counts.items()},
                **{("server", k): n for k, n in peer_queue.TOWARD_SERVERS.counts.items()},
            },
        )


__all__ = ["GatewayService", "UpstreamProfile"]
