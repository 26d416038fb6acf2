"""A client's request on its one path upstream and back (DESIGN §3, "One
path per call"). The core routes it, plans it, says how it is served and
what comes after its reply (core/routing.py, core/call_plan.py). The steps
run at once as far as nothing waits — a plain call goes out from the front's
read and is answered from the upstream reader's callback, with no task — and
a task of the client link's group runs them from the first step that waits.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import anyio
import structlog

from gateway import wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.core import call_plan, routing
from gateway.core.call_plan import Lease, Next, Served
from gateway.core.profile import UpstreamProfile
from gateway.core.upstream_failures import failure_reply, unavailable_reply
from gateway.runtime.client_call import ClientCall, Serve, Step
from gateway.runtime.legacy_input import LegacyInputLoop
from gateway.runtime.legacy_task_runner import LegacyTaskRunner
from gateway.runtime.mrtr_bridge import MrtrBridge
from gateway.runtime.session_calls import SessionCalls
from gateway.runtime.subscriptions.listens import Listens
from gateway.runtime.subscriptions.session_listen import SessionListen
from gateway.runtime.task_runner import TaskRunner
from gateway.runtime.upstream_pool import UpstreamPool
from gateway.runtime.upstream_session import UpstreamSession
from gateway.upstream_errors import (
    UpstreamError,
    UpstreamUnauthorized,
    UpstreamUnavailable,
)

if TYPE_CHECKING:
    from gateway.runtime.tracing import RequestSpan, RequestTracing

log = structlog.get_logger("gateway")
DONE = Next.DONE
after_reply = call_plan.after_reply


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
        self._task_room = self.tasks.has_room
        self._serve_settings = call_plan.ServeSettings(
            config.tasks_for_legacy_clients, config.tasks_for_modern_clients
        )

    def start(self, tg: anyio.abc.TaskGroup) -> None:
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
        """Serve a client request whose shape the front checked, on its one
        path: at once as far as nothing waits, in a task of `tg` (the link's
        own group) from the first step that does. `traced`: its span, when
        tracing is on."""
        call = ClientCall(link, msg, tg, traced)
        link.inflight[call.msg_id] = call
        pool = self.pool
        # (pool.profile_for and pool.settled, inlined: every call)
        settlement = pool.settlement
        profile = (
            settlement.profile_for(call.legacy)
            if settlement.profile is not None and pool.readiness.first_done
            else None
        )
        if profile is None:
            call.wait_in_task(self._until_ready(call))
        elif (step := self._routed(call, profile)) is not None:
            call.wait_in_task(step)

    # -- the steps, in order ------------------------------------------------------
    async def _until_ready(self, call: ClientCall) -> Step | None:
        try:
            if not (self.pool.settled and self.pool.profile is not None):
                with anyio.fail_after(self.config.startup_timeout):
                    await self.pool.ready(call.link.principal)
            profile = self.pool.profile_for(call.legacy)
            assert profile is not None  # ready() returned: the era is settled
        except UpstreamUnauthorized as exc:
            call.answer_now(failure_reply(exc, call.msg_id))
            return None
        except (UpstreamUnavailable, TimeoutError) as exc:
            why = str(exc) if isinstance(exc, UpstreamUnavailable) else self.pool.timeout_reason()
            call.answer_now(unavailable_reply(why, call.msg_id))
            return None
        return self._routed(call, profile)

    def _routed(self, call: ClientCall, profile: UpstreamProfile) -> Step | None:
        decision = self._route(call, profile)
        if isinstance(decision, routing.Reply):
            call.answer_now(decision.message)
            return None
        call.decision = decision
        if self.pool.legacy_side is not None:
            log.debug("call", method=decision.method, path=self.pool.path_for(call.legacy))
        session = self.pool.session_now(
            call.link.principal, decision.client_capabilities, call.legacy
        )
        if session is None or session.profile is None or session.profile.era is not profile.era:
            return self._until_session(call)
        return self._on_session(call, session)

    async def _until_session(self, call: ClientCall) -> Step | None:
        decision = call.decision
        assert decision is not None
        link = call.link
        try:
            session = await self.pool.session_for(
                link.principal, decision.client_capabilities, call.legacy
            )
            if session.profile is not None and session.profile.era is not call.routed_for:
                # The upstream changed era (a restart re-probed it) while this
                # request waited: route it afresh for the server it will meet.
                redo = self._route(call, session.profile)
                if isinstance(redo, routing.Reply):
                    await call.link.send(redo.message)
                    return None
                call.decision = decision = redo
                session = await self.pool.session_for(
                    link.principal, decision.client_capabilities, call.legacy
                )
        except (UpstreamError, TimeoutError) as exc:
            await call.link.send(failure_reply(exc, call.msg_id))
            return None
        return self._on_session(call, session)

    def _on_session(self, call: ClientCall, session: UpstreamSession) -> Step | None:
        decision = call.decision
        assert decision is not None
        link, msg = call.link, call.msg
        profile = session.profile
        served = call_plan.served_by(
            decision,
            msg.get("params"),
            self._serve_settings,
            None if profile is None else profile.capabilities,
            self._task_room,
            link.principal,
        )
        if served is Served.FORWARD:
            on_session = self.on_session
            plan = on_session.plan(link, decision, session)
            tasks = on_session.task_tools and on_session.needs_task(decision, session)
            if plan.must_wait or tasks:
                return self._forward_waiting(call, session)
            if plan.lease is Lease.SHARED:
                lease = session.lease
                taken = lease.share_now()
                assert taken  # the plan found it free, and nothing ran since
                call.share = lease
            return self._send(call, session, plan.progress_token)
        if served is Served.LEGACY_TASK_CALL:
            call.answer_now(self.legacy_tasks.call(link, msg, decision, session))
            return None
        serve: Serve
        if served is Served.SESSION_SUBSCRIPTION:
            serve = partial(
                self.session_listen(link).subscription_call, session, msg, decision.params
            )
        elif served is Served.LISTEN:
            serve = partial(self.listens.listen, link, msg, session)
        elif served is Served.LEGACY_TASK_METHOD:
            serve = partial(self.legacy_tasks.serve, link, msg)
        elif served is Served.TASK_METHOD:
            serve = partial(self.tasks.serve, link, msg)
        elif served is Served.TASK_CALL:
            serve = partial(self.tasks.call, link, msg, decision, session)
        else:
            serve = partial(self.bridge.call, link, msg, decision, session)
        return self._serve(call, serve)

    def _send(
        self, call: ClientCall, session: UpstreamSession, client_token: str | int | None
    ) -> Step | None:
        decision = call.decision
        assert decision is not None
        params = decision.params
        if client_token is not None:
            params, upstream_token = self.on_session.upstream_params(
                call.link, session, params, client_token
            )
            if upstream_token is not None:
                call.progress = (session.progress, upstream_token)
        start = session.start_call if call.traced is None else call.traced.start_call(session)
        shape, may_turn = self.on_session.shape, decision.shape is routing.Shape.TO_LEGACY

        def replied(reply: wire.Message) -> None:
            # (ClientCall.release, inlined for the lease share: every call on
            # a legacy session has one.)
            call.upstream = None
            share = call.share
            if share is not None:
                call.share = None
                share.release_shared()
            if call.progress is not None:
                call.release()
            # (_replied, inlined: after_reply is DONE for every other shape)
            turn = after_reply(True, reply, call.retried) if may_turn else DONE
            if turn is DONE:
                call.answer_now(shape(decision, reply, call.msg_id, session))
            else:
                call.wait_in_task(self._take_turn(call, session, reply, turn))

        sent = False
        try:
            upstream_id = start(
                decision.method,
                params,
                replied,
                timeout=self.config.request_timeout,
                client_id=call.msg_id,
                owner=call.link,
                log_level=decision.log_level,
            )
            sent = True
        except UpstreamError as exc:  # not sent: the client gets the upstream's failure
            call.answer_now(failure_reply(exc, call.msg_id))
            return None
        finally:
            if not sent and not call.ended:
                # A defect in the send itself: it propagates to the front,
                # which answers it; what the call holds goes back first.
                call.end()
        if not call.ended:  # else its reply came as it was sent
            call.upstream = (session, upstream_id)
        return None

    def _replied(
        self, call: ClientCall, session: UpstreamSession, reply: wire.Message
    ) -> Step | None:
        decision = call.decision
        assert decision is not None
        # after_reply is DONE for any shape but TO_LEGACY: that test comes first.
        turn = (
            call_plan.after_reply(True, reply, call.retried)
            if decision.shape is routing.Shape.TO_LEGACY
            else DONE
        )
        if turn is DONE:
            call.answer_now(self.on_session.shape(decision, reply, call.msg_id, session))
            return None
        return self._take_turn(call, session, reply, turn)

    async def _forward_waiting(self, call: ClientCall, session: UpstreamSession) -> Step | None:
        """A call whose sending waits (the session lease, a log level to set
        first, a method that waits, a tool the server runs as a task)."""
        decision = call.decision
        assert decision is not None
        try:
            reply = await self.on_session.leased_forward(call.link, decision, session, call.msg_id)
        except (UpstreamError, TimeoutError) as exc:
            call.answer_now(failure_reply(exc, call.msg_id))
            return None
        return self._replied(call, session, reply)

    async def _take_turn(
        self,
        call: ClientCall,
        session: UpstreamSession,
        reply: wire.Message,
        turn: call_plan.Next,
    ) -> Step | None:
        """The turns a legacy client's reply may take before it is shaped:
        -32022 (re-discover and retry once), and input_required or a task
        (the loop of core/legacy_input.py)."""
        decision = call.decision
        assert decision is not None
        link, msg_id = call.link, call.msg_id
        try:
            if turn is call_plan.Next.REDISCOVER:
                # DESIGN §5.2.7: the server moved on; learn its versions and retry once.
                call.retried = True
                profile = await self.pool.rediscover(link.principal)
                redo = self._route(call, profile)
                if isinstance(redo, routing.Reply):
                    await call.link.send(redo.message)
                    return None
                call.decision = decision = redo
                reply = await self.on_session.leased_forward(link, decision, session, msg_id)
                turn = call_plan.after_reply(
                    decision.shape is routing.Shape.TO_LEGACY, reply, retried=True
                )
            if turn is call_plan.Next.INPUT_LOOP:
                reply = await self.legacy_input.complete(link, decision, session, reply, msg_id)
        except (UpstreamError, TimeoutError) as exc:
            await call.link.send(failure_reply(exc, msg_id))
            return None
        await call.link.send(self.on_session.shape(decision, reply, msg_id, session))
        return None

    async def _serve(self, call: ClientCall, serve: Serve) -> Step | None:
        try:
            reply = await serve()
        except (UpstreamError, TimeoutError) as exc:
            reply = failure_reply(exc, call.msg_id)
        if reply is not None:
            await call.link.send(reply)
        return None

    # -- the choices ----------------------------------------------------------------
    def _route(self, call: ClientCall, profile: UpstreamProfile) -> routing.Decision:
        link = call.link
        call.routed_for = profile.era
        decision = routing.route_request(
            call.msg,
            link.session,
            profile,
            self._discover_hint,
            self.config.passthrough_methods,
            shapes_checked=True,  # the front ran inbound.problem
            tasks_for_legacy=self.config.tasks_for_legacy_clients,
            tasks_for_modern=self.config.tasks_for_modern_clients,
        )
        if isinstance(decision, routing.Reply) and decision.opens_session is not None:
            link.session = decision.opens_session
            log.info(
                "legacy client session opened",
                link=link.id,
                version=decision.opens_session.version,
                client=decision.opens_session.client_info,
            )
        return decision
