"""A client's request on its way upstream and its answer on the way back.

The core routes the request (core/routing.py) and plans how it travels
(core/call_plan.py). When nothing in the plan has to wait, the request goes
out at once and the upstream reader hands the reply back through a callback:
no task, the speed of a bare relay. Otherwise a task in the client link's
task group does the waiting (start-up, the session lease, a log level to set
first, the MRTR bridge, a listen) with every wait bounded. Both take the
same steps: the route here, the plan, progress token, lease and shaping in
runtime/session_calls.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio
import structlog

from gateway import era, wire
from gateway.client_link import CURRENT_REQUEST, ClientLink, InflightCall
from gateway.config import Config
from gateway.core import call_plan, legacy_tasks, mrtr_shapes, routing, task_shapes
from gateway.core.call_plan import Lease
from gateway.core.profile import UpstreamProfile
from gateway.core.upstream_failures import failure_reply
from gateway.runtime.held_calls import MrtrBridge
from gateway.runtime.legacy_input import LegacyInputLoop
from gateway.runtime.legacy_task_runner import LegacyTaskRunner
from gateway.runtime.listens import Listens
from gateway.runtime.session_calls import SessionCalls
from gateway.runtime.session_listen import SessionListen
from gateway.runtime.task_runner import TaskRunner
from gateway.runtime.upstream_pool import UpstreamPool
from gateway.runtime.upstream_session import UpstreamSession
from gateway.upstream_errors import (
    UpstreamError,
    UpstreamGone,
    UpstreamUnauthorized,
    UpstreamUnavailable,
)

if TYPE_CHECKING:
    from gateway.runtime.tracing import RequestSpan, RequestTracing

log = structlog.get_logger("gateway")

Answer = Callable[[InflightCall], Awaitable[wire.Message | None]]


class ClientCalls:
    def __init__(
        self,
        config: Config,
        pool: UpstreamPool,
        links: set[ClientLink],
        listens: Listens,
        session_listen: Callable[[ClientLink], SessionListen],
        tracing: RequestTracing | None = None,
    ) -> None:
        self.config = config
        self.pool = pool
        self.listens = listens
        self.session_listen = session_listen
        self.on_session = on_session = SessionCalls(config, pool, links, listens, tracing)
        self.bridge = MrtrBridge(config, on_session.forward, on_session.shape)
        self.legacy_input = LegacyInputLoop(config, on_session.forward)
        self.tasks = TaskRunner(config, self.bridge, on_session)
        self.legacy_tasks = LegacyTaskRunner(config, on_session, self.legacy_input)
        self._discover_hint = config.cache_hint("server/discover")
        self._tg: anyio.abc.TaskGroup | None = None

    def start(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self.bridge.start(tg)
        self.tasks.start(tg)
        self.legacy_tasks.start(tg)

    def take(
        self,
        link: ClientLink,
        msg: wire.Message,
        tg: anyio.abc.TaskGroup,
        traced: RequestSpan | None = None,
    ) -> None:
        """Serve a client request whose shape the front checked: at once when
        nothing in it waits, else in a task of `tg` (the link's own group).
        `traced`: its span, when tracing is on."""
        if self._send_now(link, msg, traced):
            return
        call = InflightCall(anyio.CancelScope())
        link.inflight[msg["id"]] = call
        tg.start_soon(self._run, link, msg, call, None)

    # -- the steps both paths take --------------------------------------------
    def _route(
        self, link: ClientLink, msg: wire.Message, profile: UpstreamProfile, *, fast: bool = False
    ) -> routing.Decision | None:
        """The core's decision; None on the fast path for one that opens a
        legacy session (rare, and worth its log line)."""
        decision = routing.route_request(
            msg,
            link.session,
            profile,
            self._discover_hint,
            self.config.passthrough_methods,
            shapes_checked=True,  # the front ran inbound.problem
            tasks_for_legacy=self.config.tasks_for_legacy_clients,
            tasks_for_modern=self.config.tasks_for_modern_clients,
        )
        if isinstance(decision, routing.Reply) and decision.opens_session is not None:
            if fast:
                return None
            link.session = decision.opens_session
            log.info(
                "legacy client session opened",
                link=link.id,
                version=decision.opens_session.version,
                client=decision.opens_session.client_info,
            )
        return decision

    # -- at once ----------------------------------------------------------------
    def _send_now(self, link: ClientLink, msg: wire.Message, traced: RequestSpan | None) -> bool:
        """Send the request now if nothing in it waits; False leaves it to a task."""
        pool = self.pool
        legacy = _meets_legacy_side(link, msg)
        profile = pool.profile_for(legacy)
        if profile is None or not pool.settled:
            return False
        decision = self._route(link, msg, profile, fast=True)
        if decision is None:
            return False
        if isinstance(decision, routing.Reply):
            link.send_nowait(decision.message)
            return True
        if decision.shape is routing.Shape.TO_MODERN and (
            MrtrBridge.takes(decision, msg)
            or decision.method in task_shapes.TASK_METHODS
            or self.tasks.takes(link, decision, msg)
        ):
            return False
        if decision.shape is routing.Shape.TO_LEGACY and (
            decision.method in legacy_tasks.METHODS or legacy_tasks.wants_task(msg.get("params"))
        ):
            return False
        if (
            self.on_session.task_tools
            and decision.method == "tools/call"
            and (decision.params or {}).get("name") in self.on_session.task_tools
        ):
            return False  # perhaps two requests upstream (SessionCalls.needs_task)
        session = pool.session_now(link.principal, decision.client_capabilities, legacy)
        if session is None or session.profile is None or session.profile.era is not profile.era:
            return False
        plan = self.on_session.plan(link, decision, session)
        if plan.must_wait:
            return False
        msg_id: wire.RequestId = msg["id"]
        if pool.legacy_side is not None:
            log.debug("call", method=decision.method, path=pool.path_for(legacy))
        params, upstream_token = decision.params, None
        if plan.progress_token is not None:
            params, upstream_token = self.on_session.upstream_params(
                link, session, params, plan.progress_token
            )
        shared = plan.lease is Lease.SHARED
        if shared and not session.lease.share_now():
            return False

        def finish() -> None:
            link.call_ended(msg_id)
            if shared:
                session.lease.release_shared()
            if upstream_token is not None:
                session.progress.pop(upstream_token, None)

        def on_reply(reply: wire.Message) -> None:
            finish()
            if decision.shape is routing.Shape.TO_LEGACY and (
                call_plan.is_unsupported_version(reply)
                or mrtr_shapes.reply_is_input_required(reply)
                or task_shapes.is_task(reply.get("result"))
            ):
                # Rare turns that need waiting: a task takes the call from here.
                call = InflightCall(anyio.CancelScope(), decision.log_level)
                link.inflight[msg_id] = call
                assert self._tg is not None

                async def answer(_call: InflightCall) -> wire.Message | None:
                    return await self._after_reply(link, msg, decision, session, reply)

                self._tg.start_soon(self._run, link, msg, call, answer)
                return
            try:
                link.send_nowait(self.on_session.shape(decision, reply, msg_id, session))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                log.debug("client went away before its answer", id=msg_id)

        started = False
        start = session.start_call if traced is None else traced.start_call(session)
        try:
            upstream_id = start(
                decision.method,
                params,
                on_reply,
                timeout=self.config.request_timeout,
                client_id=msg_id,
                owner=link,
                log_level=decision.log_level,
            )
            started = True
        except UpstreamGone:
            return False
        finally:
            if not started:
                finish()  # the lease share and the progress route go on every way out

        def cancel() -> None:
            session.abandon_call(upstream_id, "cancelled by the client")
            finish()

        link.inflight[msg_id] = InflightCall(None, decision.log_level, cancel)
        return True

    # -- in a task ------------------------------------------------------------------
    async def _run(
        self, link: ClientLink, msg: wire.Message, call: InflightCall, answer: Answer | None
    ) -> None:
        msg_id = msg["id"]
        assert call.scope is not None
        CURRENT_REQUEST.set(msg_id)
        try:
            with call.scope:
                if answer is not None:
                    reply = await answer(call)
                else:
                    reply = await self._answer(link, msg, call)
                if reply is not None:
                    await link.send(reply)
            if call.scope.cancelled_caught:
                log.debug("request cancelled by the client", id=msg_id)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            log.debug("client went away before its answer", id=msg_id)
        finally:
            link.call_ended(msg_id)

    async def _answer(
        self, link: ClientLink, msg: wire.Message, call: InflightCall
    ) -> wire.Message | None:
        msg_id = msg["id"]
        legacy = _meets_legacy_side(link, msg)
        try:
            if not (self.pool.settled and self.pool.profile is not None):
                with anyio.fail_after(self.config.startup_timeout):
                    await self.pool.ready(link.principal)
            profile = self.pool.profile_for(legacy)
            assert profile is not None  # ready() returned: the era is settled
        except UpstreamUnauthorized as exc:
            return failure_reply(exc, msg_id)
        except (UpstreamUnavailable, TimeoutError) as exc:
            why = str(exc) if isinstance(exc, UpstreamUnavailable) else self.pool.timeout_reason()
            return wire.gateway_error(
                msg_id,
                wire.INTERNAL_ERROR,
                f"Upstream server unavailable: {why}",
                reason="upstream-unavailable",
            )
        decision = self._route(link, msg, profile)
        assert decision is not None
        if isinstance(decision, routing.Reply):
            return decision.message
        call.log_level = decision.log_level
        log.debug("call", method=decision.method, path=self.pool.path_for(legacy))
        try:
            session = await self.pool.session_for(
                link.principal, decision.client_capabilities, legacy
            )
            if session.profile is not None and session.profile.era is not profile.era:
                # The upstream changed era (a restart re-probed it) while this
                # request waited: route it afresh for the server it will meet.
                decision = self._route(link, msg, session.profile)
                assert decision is not None
                if isinstance(decision, routing.Reply):
                    return decision.message
                session = await self.pool.session_for(
                    link.principal, decision.client_capabilities, legacy
                )
            special = await self._serve_special(link, msg, decision, session)
            if special is not None:
                return special
            reply = await self.on_session.leased_forward(link, decision, session, msg_id)
        except (UpstreamError, TimeoutError) as exc:
            return failure_reply(exc, msg_id)
        return await self._after_reply(link, msg, decision, session, reply)

    async def _serve_special(
        self,
        link: ClientLink,
        msg: wire.Message,
        decision: routing.Forward,
        session: UpstreamSession,
    ) -> wire.Message | None:
        """The answer to a call the gateway serves other than by forwarding it
        as it is, or None for a plain forward."""
        to_modern = decision.shape is routing.Shape.TO_MODERN
        if decision.shape is routing.Shape.TO_LEGACY and decision.method in (
            "resources/subscribe",
            "resources/unsubscribe",
        ):
            # DESIGN §5.2.6: served by the session's upstream listen.
            uri = (decision.params or {}).get("uri")
            listen, add = self.session_listen(link), decision.method == "resources/subscribe"
            limit = self.config.max_listen_uris
            if add and uri not in listen.uris and len(listen.uris) >= limit:
                # Each one more widens the session's upstream listen filter.
                return wire.gateway_error(
                    msg["id"],
                    wire.INTERNAL_ERROR,
                    f"Too many resource subscriptions on this session "
                    f"(at most {limit}, [upstream] max_listen_uris)",
                    reason="subscription-limit",
                )
            await listen.change(session, uri, add)
            return wire.result_response(msg["id"], {})
        if to_modern and decision.method == "subscriptions/listen":
            return await self.listens.listen(link, msg, session)
        if decision.shape is routing.Shape.TO_LEGACY and decision.method in legacy_tasks.METHODS:
            return await self.legacy_tasks.serve(link, msg)
        if (
            decision.shape is routing.Shape.TO_LEGACY
            and decision.method == "tools/call"
            and legacy_tasks.wants_task(msg.get("params"))
            and self.config.tasks_for_legacy_clients
            and session.profile is not None
            and task_shapes.offered_by(session.profile.capabilities)
        ):
            return self.legacy_tasks.call(link, msg, decision, session)
        if to_modern and decision.method in task_shapes.TASK_METHODS:
            return await self.tasks.serve(link, msg)
        if to_modern and self.tasks.takes(link, decision, msg):
            return await self.tasks.call(link, msg, decision, session)
        if to_modern and MrtrBridge.takes(decision, msg):
            return await self.bridge.call(link, msg, decision, session)
        return None

    async def _after_reply(
        self,
        link: ClientLink,
        msg: wire.Message,
        decision: routing.Forward,
        session: UpstreamSession,
        reply: wire.Message,
    ) -> wire.Message | None:
        """The turns a legacy client's reply may take before it is shaped:
        -32022 (re-discover and retry once), and input_required or a task
        (the loop of core/legacy_input.py)."""
        msg_id = msg["id"]
        try:
            if decision.shape is routing.Shape.TO_LEGACY and call_plan.is_unsupported_version(
                reply
            ):
                # DESIGN §5.2.7: the server moved on; learn its versions and retry once.
                profile = await self.pool.rediscover(link.principal)
                redo = self._route(link, msg, profile)
                assert redo is not None
                if isinstance(redo, routing.Reply):
                    return redo.message
                decision = redo
                reply = await self.on_session.leased_forward(link, decision, session, msg_id)
            if decision.shape is routing.Shape.TO_LEGACY and (
                mrtr_shapes.reply_is_input_required(reply)
                or task_shapes.is_task(reply.get("result"))
            ):
                reply = await self.legacy_input.complete(link, decision, session, reply, msg_id)
        except (UpstreamError, TimeoutError) as exc:
            return failure_reply(exc, msg_id)
        return self.on_session.shape(decision, reply, msg_id, session)


def _meets_legacy_side(link: ClientLink, msg: wire.Message) -> bool:
    """Whether the request is a legacy client's, which a dual-era server
    serves on its legacy side (DESIGN §5.3): a request with modern `_meta` is
    served modern, whatever came before on the link."""
    legacy = link.session is not None or msg["method"] == "initialize"
    return legacy and not era.is_modern(msg)
