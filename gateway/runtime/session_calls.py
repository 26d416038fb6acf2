"""A routed call on an upstream session: the plan it travels by, the lease
it holds, its progress token, the log level set upstream before it, and the
reply shaped for the client (DESIGN §5.1.6). Shared by client calls, the
MRTR bridge and the legacy-input loop."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import structlog

from gateway import era, wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.core import call_plan, legacy_task_tools, routing, task_shapes
from gateway.core import subscriptions as subs_core
from gateway.core.call_plan import Lease
from gateway.core.profile import UpstreamProfile
from gateway.runtime.subscriptions.listens import Listens
from gateway.runtime.upstream_pool import UpstreamPool
from gateway.runtime.upstream_session import UpstreamSession
from gateway.translate import CacheHint

if TYPE_CHECKING:
    from gateway.runtime.tracing import RequestTracing

log = structlog.get_logger("gateway")


class SessionCalls:
    def __init__(
        self,
        config: Config,
        pool: UpstreamPool,
        links: set[ClientLink],
        listens: Listens,
        tracing: RequestTracing | None = None,
    ) -> None:
        self.config = config
        self.tracing = tracing
        self.pool = pool
        self.links = links
        self.listens = listens
        self._hints: dict[tuple[str, bool], CacheHint] = {}
        # The legacy server's tools that may or must run as its own tasks
        # ("optional" / "required"), from its tools/list.
        self.task_tools: dict[str, str] = {}

    def lease_for(
        self, link: ClientLink, decision: routing.Forward, session: UpstreamSession
    ) -> Lease:
        profile = session.profile
        return call_plan.lease_for(
            decision.method,
            profile is not None and profile.era is era.Era.LEGACY,
            link,
            len(self.links) > 1,
        )

    def plan(
        self, link: ClientLink, decision: routing.Forward, session: UpstreamSession
    ) -> call_plan.Plan:
        level, profile = decision.log_level, session.profile
        lease = call_plan.lease_for(  # (lease_for, inlined: every call)
            decision.method,
            profile is not None and profile.era is era.Era.LEGACY,
            link,
            len(self.links) > 1,
        )
        return call_plan.plan(
            decision.method,
            decision.params,
            lease,
            session.lease.can_share_now(),
            level is not None and session.log_level_needed(level) is not None,
        )

    def upstream_params(
        self,
        link: ClientLink,
        session: UpstreamSession,
        params: dict[str, Any] | None,
        token: str | int | None,
    ) -> tuple[dict[str, Any] | None, str | None]:
        """The params as sent upstream, and the upstream progress token whose
        route the caller removes when the call ends."""
        if token is None:
            return params, None
        upstream_token = session.progress_token(link, token)
        return call_plan.with_progress_token(params, upstream_token), upstream_token

    def shape(
        self,
        decision: routing.Forward,
        reply: wire.Message,
        client_id: wire.RequestId,
        session: UpstreamSession,
    ) -> wire.Message:
        profile = session.profile or self.pool.profile
        assert profile is not None
        if decision.method == "tools/list" and decision.shape is routing.Shape.TO_MODERN:
            # Learnt as lists pass: the tools the legacy server runs as tasks.
            self.task_tools.update(legacy_task_tools.task_support(reply.get("result")))
        return routing.shape_reply(
            decision, reply, client_id, profile, self._cache_hint(decision.method, profile)
        )

    def _cache_hint(self, method: str, profile: UpstreamProfile) -> CacheHint | None:
        """Computed once per method: this runs for every reply."""
        if method not in era.CACHEABLE:
            return None
        notified = subs_core.notifies_changes(method, profile.capabilities)
        hint = self._hints.get((method, notified))
        if hint is None:
            hint = self._hints[(method, notified)] = self.config.cache_hint(method, notified)
        return hint

    async def leased_forward(
        self,
        link: ClientLink,
        decision: routing.Forward,
        session: UpstreamSession,
        client_id: wire.RequestId,
        timeout: float | None = None,
    ) -> wire.Message:
        """Forward a call, holding the session's lease when a server request
        during it could need a client (DESIGN §5.1.6). `timeout`: the bound
        on the call (request_timeout when None)."""
        lease, kind = session.lease, self.lease_for(link, decision, session)
        if kind is Lease.NONE:
            return await self.forward(link, decision, session, timeout, client_id)
        with anyio.fail_after(self.config.request_timeout):
            if kind is Lease.EXCLUSIVE:
                await lease.acquire_exclusive(link)
            else:
                await lease.acquire_shared()
        try:
            return await self.forward(link, decision, session, timeout, client_id)
        finally:
            if kind is Lease.EXCLUSIVE:
                lease.release_exclusive(link)
            else:
                lease.release_shared()

    async def forward(
        self,
        link: ClientLink,
        decision: routing.Forward,
        session: UpstreamSession,
        timeout: float | None = None,
        client_id: wire.RequestId | None = None,
    ) -> wire.Message:
        """The reply to `decision` from upstream. `client_id`: the client's id
        for the request, which the answers the gateway gives in the server's
        stead carry (None from the MRTR bridge, whose calls need none)."""
        level = session.log_level_needed(decision.log_level)
        if level is not None:
            await self._set_upstream_level(session, level)
        if decision.method == "logging/setLevel":
            # Served by the level machinery above; the shared session's level
            # is the gateway's, so the client is answered here.
            assert client_id is not None  # a client's setLevel comes with its id
            return wire.result_response(client_id, {})
        params, upstream_token = self.upstream_params(
            link, session, decision.params, call_plan.progress_token(decision.params)
        )
        if decision.method == "subscriptions/listen":
            if self.listens.ending and client_id is not None:
                # Shutdown began while this listen was on its way: it gets the
                # closing result the others got, not a stream cut off later.
                return wire.result_response(client_id, subs_core.closing_result(client_id))
            # A listen lasts until the client cancels it; its bound is a long one.
            timeout = timeout or self.config.listen_timeout
        call = session.call if self.tracing is None else self.tracing.call(session, link)
        if self.needs_task(decision, session):
            return await self._as_task(session, params, timeout, client_id)
        try:
            return await call(
                decision.method,
                params,
                timeout=timeout or self.config.request_timeout,
                owner=link,
                log_level=decision.log_level,
                client_id=client_id,
            )
        finally:
            if upstream_token is not None:
                session.progress.pop(upstream_token, None)

    def needs_task(self, decision: routing.Forward, session: UpstreamSession) -> bool:
        """A modern client's call that its legacy server runs as a task of
        its own (core/legacy_task_tools.py)."""
        if (
            not self.task_tools  # learnt from tools/list: none is the rule
            or decision.method != "tools/call"
            or decision.shape is not routing.Shape.TO_MODERN
        ):
            return False
        name = (decision.params or {}).get("name")
        support = self.task_tools.get(name) if isinstance(name, str) else None
        profile = session.profile
        return (
            legacy_task_tools.runs_as_task(
                support, task_shapes.offered_by(decision.client_capabilities)
            )
            and profile is not None
            and legacy_task_tools.server_runs_tool_tasks(profile.capabilities)
        )

    async def _as_task(
        self,
        session: UpstreamSession,
        params: dict[str, Any] | None,
        timeout: float | None,
        client_id: wire.RequestId | None,
    ) -> wire.Message:
        """The call as a task, and at once its blocking tasks/result: the
        result the call would have had (2025-11-25 "Result Retrieval")."""
        limit = max(timeout or self.config.request_timeout, self.config.tasks_max_wait)
        ttl_ms = int(limit * 1000)
        created = await session.call(
            "tools/call",
            legacy_task_tools.augmented(params, ttl_ms),
            timeout=timeout or self.config.request_timeout,
            client_id=client_id,
        )
        task_id = legacy_task_tools.created_task(created)
        if task_id is None:
            return created  # an error, or the server answered at once after all
        reply = await session.call(
            "tasks/result", {"taskId": task_id}, timeout=limit, client_id=client_id
        )
        return legacy_task_tools.call_reply(reply)

    async def _set_upstream_level(self, session: UpstreamSession, level: str) -> None:
        reply = await session.call(
            "logging/setLevel", {"level": level}, timeout=self.config.request_timeout
        )
        if "error" in reply:
            log.warning("upstream refused logging/setLevel", level=level, error=reply["error"])
        else:
            session.upstream_log_level = level
