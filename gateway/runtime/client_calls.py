"""A client's request on its way upstream and its answer on the way back,
on one path.

The core routes the request (core/routing.py), plans how it travels and
says what comes after its reply (core/call_plan.py). The steps run at once
as far as nothing waits: a request whose plan waits for nothing goes out
from the front's own read, and the upstream reader hands the reply back
through a callback — no task, the speed of a bare relay. A task in the
client link's group takes over at the first step that waits (start-up, a
new session, the session lease, a log level to set first, the MRTR bridge,
a listen, a turn after the reply), every wait bounded; from there it runs
the same steps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio
import structlog

from gateway import wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.core import call_plan, legacy_tasks, routing, task_shapes
from gateway.core.call_plan import Lease
from gateway.core.profile import UpstreamProfile
from gateway.core.upstream_failures import failure_reply
from gateway.runtime.client_call import ClientCall, Step
from gateway.runtime.legacy_input import LegacyInputLoop
from gateway.runtime.legacy_task_runner import LegacyTaskRunner
from gateway.runtime.listens import Listens
from gateway.runtime.mrtr_bridge import MrtrBridge
from gateway.runtime.session_calls import SessionCalls
from gateway.runtime.session_listen import SessionListen
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

Serve = Callable[[], Awaitable[wire.Message | None]]


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
        profile = pool.profile_for(call.legacy) if pool.settled else None
        if profile is None:
            call.wait_in_task(self._until_ready(call))
        else:
            self._go(call, self._routed(call, profile))

    def _go(self, call: ClientCall, step: Step | None) -> None:
        if step is not None:
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
            await call.link.send(failure_reply(exc, call.msg_id))
            return None
        except (UpstreamUnavailable, TimeoutError) as exc:
            why = str(exc) if isinstance(exc, UpstreamUnavailable) else self.pool.timeout_reason()
            await call.link.send(
                wire.gateway_error(
                    call.msg_id,
                    wire.INTERNAL_ERROR,
                    f"Upstream server unavailable: {why}",
                    reason="upstream-unavailable",
                )
            )
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
        if self._runs_as_legacy_task(call, decision, session):
            call.answer_now(self.legacy_tasks.call(call.link, call.msg, decision, session))
            return None
        serve = self._served_otherwise(call, decision, session)
        if serve is not None:
            return self._serve(call, serve)
        plan = self.on_session.plan(call.link, decision, session)
        if plan.must_wait or self.on_session.needs_task(decision, session):
            return self._forward_waiting(call, session)
        if plan.lease is Lease.SHARED:
            lease = session.lease
            taken = lease.share_now()
            assert taken  # the plan found it free, and nothing ran since
            call.holds(lease.release_shared)
        return self._send(call, session, plan.progress_token)

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
                progress, token = session.progress, upstream_token
                call.holds(lambda: progress.pop(token, None))
        start = session.start_call if call.traced is None else call.traced.start_call(session)

        def replied(reply: wire.Message) -> None:
            call.got_reply()
            step = self._replied(call, session, reply)
            if step is not None:
                call.wait_in_task(step)

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
        except UpstreamError as exc:  # not sent
            call.answer_now(failure_reply(exc, call.msg_id))
            return None
        except BaseException:
            call.end()  # the lease share and the progress route go on every way out
            raise
        call.sent(session, upstream_id)
        return None

    def _replied(
        self, call: ClientCall, session: UpstreamSession, reply: wire.Message
    ) -> Step | None:
        decision = call.decision
        assert decision is not None
        turn = call_plan.after_reply(decision.shape is routing.Shape.TO_LEGACY, reply, call.retried)
        if turn is call_plan.Next.DONE:
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
            await call.link.send(failure_reply(exc, call.msg_id))
            return None
        turn = call_plan.after_reply(decision.shape is routing.Shape.TO_LEGACY, reply, call.retried)
        if turn is call_plan.Next.DONE:
            await call.link.send(self.on_session.shape(decision, reply, call.msg_id, session))
            return None
        return self._take_turn(call, session, reply, turn)

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

    def _served_otherwise(
        self, call: ClientCall, decision: routing.Forward, session: UpstreamSession
    ) -> Serve | None:
        """How the gateway serves a call other than by forwarding it as it
        is, or None for a plain forward (each of these waits)."""
        link, msg = call.link, call.msg
        to_modern = decision.shape is routing.Shape.TO_MODERN
        to_legacy = decision.shape is routing.Shape.TO_LEGACY
        method = decision.method
        if to_legacy and method in ("resources/subscribe", "resources/unsubscribe"):
            return lambda: self._change_subscription(link, msg, decision, session)
        if to_modern and method == "subscriptions/listen":
            return lambda: self.listens.listen(link, msg, session)
        if to_legacy and method in legacy_tasks.METHODS:
            return lambda: self.legacy_tasks.serve(link, msg)
        if to_modern and method in task_shapes.TASK_METHODS:
            return lambda: self.tasks.serve(link, msg)
        if to_modern and self.tasks.takes(link, decision, msg):
            return lambda: self.tasks.call(link, msg, decision, session)
        if to_modern and MrtrBridge.takes(decision, msg):
            return lambda: self.bridge.call(link, msg, decision, session)
        return None

    def _runs_as_legacy_task(
        self, call: ClientCall, decision: routing.Forward, session: UpstreamSession
    ) -> bool:
        """A legacy client's tools/call asking to run as a 2025-11-25 task,
        which the gateway runs on a modern server's tasks."""
        return (
            decision.shape is routing.Shape.TO_LEGACY
            and decision.method == "tools/call"
            and legacy_tasks.wants_task(call.msg.get("params"))
            and self.config.tasks_for_legacy_clients
            and session.profile is not None
            and task_shapes.offered_by(session.profile.capabilities)
        )

    async def _change_subscription(
        self,
        link: ClientLink,
        msg: wire.Message,
        decision: routing.Forward,
        session: UpstreamSession,
    ) -> wire.Message:
        """DESIGN §5.2.6: a legacy client's subscription, served by the
        session's upstream listen."""
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
