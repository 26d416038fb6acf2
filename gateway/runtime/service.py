"""The gateway at work: reads each client's messages, asks the core where they
go, carries the answer back, and routes what the upstream sends on its own.
This is the one layer that awaits; every wait in it has a bound."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from gateway import era, inbound, wire
from gateway.client_link import (
    CURRENT_REQUEST,
    ClientLink,
    ForwardedServerRequest,
    InflightCall,
)
from gateway.config import Config
from gateway.core import mrtr_bridge as mrtr_core
from gateway.core import mrtr_shapes, routing, upstream_checks
from gateway.core import subscriptions as subs_core
from gateway.core.profile import UpstreamProfile
from gateway.fronts.port import GatewaySnapshot, Readiness
from gateway.log_limit import LogLimiter
from gateway.runtime.held_calls import HeldEntry, MrtrBridge
from gateway.runtime.legacy_input import LegacyInputLoop
from gateway.runtime.listens import Listens, upstream_subscription
from gateway.runtime.session_listen import SessionListen
from gateway.runtime.upstream_pool import MODERN_KEY, Connector, UpstreamPool
from gateway.runtime.upstream_session import (
    PendingCall,
    ProgressRoute,
    UpstreamSession,
    failure_reply,
)
from gateway.translate import CacheHint
from gateway.upstream_errors import (
    UpstreamError,
    UpstreamGone,
    UpstreamUnauthorized,
    UpstreamUnavailable,
)

log = structlog.get_logger("gateway")

# Methods the fast path leaves to the task path: they wait on more than a reply.
_TASK_ONLY = frozenset(
    {"logging/setLevel", "subscriptions/listen", "resources/subscribe", "resources/unsubscribe"}
)

# Methods during which a legacy server has no reason to ask its client anything:
# they skip the session lease, so listing never waits behind a parked call.
_NO_SERVER_REQUESTS = frozenset(
    {
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "completion/complete",
        "logging/setLevel",
        "ping",
    }
)


class GatewayService:
    def __init__(
        self,
        config: Config,
        tap: Callable[[str, wire.Message], None] | None = None,
        connect: Connector | None = None,
    ) -> None:
        self.config = config
        self.pool = UpstreamPool(config, self._on_server_message, tap, connect, corker=self)
        self.bridge = MrtrBridge(config, self._forward, self._shape)
        self.listens = Listens(config)
        self.pool.on_session_lost = self._session_lost
        self.pool.in_use = self.listens.holds
        self.legacy_input = LegacyInputLoop(config, self._forward)
        self.links: set[ClientLink] = set()
        self._discover_hint = config.cache_hint("server/discover")
        self._hints: dict[tuple[str, bool], CacheHint] = {}
        # What a misbehaving server sends can repeat without end: one line a minute.
        self._junk_log = LogLimiter(log)
        self._refusals_log = LogLimiter(log)

    # -- client side -----------------------------------------------------
    async def handle_client_message(
        self,
        link: ClientLink,
        msg: wire.Message,
        tg: anyio.abc.TaskGroup,
        *,
        checked: bool = False,
    ) -> None:
        """Take one message from a client. Requests run as tasks in `tg` (the
        link's own task group), so a slow call never holds up the next line.
        `checked`: the front already ran `inbound.problem` on it."""
        kind = wire.kind_of(msg)
        if not checked and kind in (wire.Kind.REQUEST, wire.Kind.NOTIFICATION):
            wrong = inbound.problem(msg)
            if wrong is not None:
                await self._refuse(link, msg, wrong)
                return
        if kind is wire.Kind.REQUEST:
            msg_id = msg["id"]
            if msg_id in link.inflight:
                await link.send(
                    wire.error_response(
                        msg_id,
                        wire.INVALID_REQUEST,
                        "Invalid Request: a request with this id is still in progress",
                    )
                )
                return
            if len(link.inflight) >= self.config.max_inflight_per_client:
                await link.send(
                    wire.gateway_error(
                        msg_id,
                        wire.INTERNAL_ERROR,
                        "Too many requests in flight"
                        f" (limit {self.config.max_inflight_per_client})",
                        reason="inflight-limit",
                    )
                )
                return
            if self._try_fast(link, msg):
                return
            call = InflightCall(anyio.CancelScope())
            link.inflight[msg_id] = call
            tg.start_soon(self._run_request, link, msg, call)
        elif kind is wire.Kind.NOTIFICATION:
            await self._handle_client_notification(link, msg)
        else:
            self.handle_client_reply(link, msg)

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

    # -- the fast path --------------------------------------------------------
    def _try_fast(self, link: ClientLink, msg: wire.Message) -> bool:
        """Serve a request without a task when nothing in it can wait: a local
        answer, or a plain forward on a live session whose reply the upstream
        reader shapes and writes back. False leaves it to the task path (the
        MRTR bridge, lease waits, session start-up, level changes, retries on
        -32022 or input_required are all handled there)."""
        pool = self.pool
        # A legacy client of a dual-era server meets its legacy side (DESIGN §5.3).
        legacy = link.session is not None or msg["method"] == "initialize"
        if legacy and pool.legacy_side is not None and era.is_modern(msg):
            legacy = False  # modern `_meta`: served modern whatever came before
        profile = pool.legacy_side if legacy and pool.legacy_side is not None else pool.profile
        if profile is None or not pool.settled:
            return False
        decision = routing.route_request(
            msg,
            link.session,
            profile,
            self._discover_hint,
            self.config.passthrough_methods,
            shapes_checked=True,  # handle_client_message ran inbound.problem
        )
        if isinstance(decision, routing.Reply):
            if decision.opens_session is not None:
                return False  # rare, and worth its log line
            link.send_nowait(decision.message)
            return True
        if decision.method in _TASK_ONLY:
            return False
        if decision.shape is routing.Shape.TO_MODERN and MrtrBridge.takes(decision, msg):
            return False
        session = pool.session_now(link.principal, decision.client_capabilities, legacy)
        if session is None or session.profile is None or session.profile.era is not profile.era:
            return False
        if session.log_level_needed(decision.log_level) is not None:
            return False
        shared = self._lease_needed(link, decision, session)
        if shared is None:
            return False
        msg_id: wire.RequestId = msg["id"]
        if pool.legacy_side is not None:
            log.debug("call", method=decision.method, path=pool.path_for(legacy))
        params: dict[str, Any] | None = decision.params
        token = _progress_token(params)
        upstream_token = None
        if token is not None:
            upstream_token = session.progress_token(link, token)
            params = _with_progress_token(params, upstream_token)
        if shared:
            session.lease.readers += 1

        def finish() -> None:
            link.call_ended(msg_id)
            if shared:
                session.lease.release_shared()
            if upstream_token is not None:
                session.progress.pop(upstream_token, None)

        def on_reply(reply: wire.Message) -> None:
            finish()
            if decision.shape is routing.Shape.TO_LEGACY and (
                _is_unsupported_version(reply) or mrtr_shapes.reply_is_input_required(reply)
            ):
                # Rare turns that need waiting: a task takes the call from here.
                call = InflightCall(anyio.CancelScope(), decision.log_level)
                link.inflight[msg_id] = call
                assert self._tg is not None
                self._tg.start_soon(self._continue, link, msg, call, decision, session, reply)
                return
            try:
                link.send_nowait(self._shape(decision, reply, msg_id, session))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                log.debug("client went away before its answer", id=msg_id)

        started = False
        try:
            upstream_id = session.start_call(
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

    def _lease_kind(
        self, link: ClientLink, decision: routing.Forward, session: UpstreamSession
    ) -> str:
        """How a call holds a legacy session (DESIGN §5.1.6): "none" where no
        server request can need a client, "exclusive" for a legacy client that
        declared client features while another client could claim a server
        request, else "shared"."""
        profile = session.profile
        if profile is None or profile.era is not era.Era.LEGACY:
            return "none"
        if decision.method in _NO_SERVER_REQUESTS:
            return "none"
        if (
            link.session is not None
            and len(self.links) > 1
            and any(map(link.declared, era.CLIENT_FEATURES))
        ):
            return "exclusive"
        return "shared"

    def _lease_needed(
        self, link: ClientLink, decision: routing.Forward, session: UpstreamSession
    ) -> bool | None:
        """For the fast path: True to hold the lease shared, False for no
        lease, None when the call must wait for it (the task path does that)."""
        kind = self._lease_kind(link, decision, session)
        if kind == "none":
            return False
        if kind == "exclusive" or not session.lease.can_share_now():
            return None
        return True

    async def _continue(
        self,
        link: ClientLink,
        msg: wire.Message,
        call: InflightCall,
        decision: routing.Forward,
        session: UpstreamSession,
        reply: wire.Message,
    ) -> None:
        """A fast-path call whose reply needs more work: -32022 (re-discover and
        retry once) or input_required for a legacy client (the MRTR loop)."""

        async def answer(_call: InflightCall) -> wire.Message | None:
            return await self._after_reply(link, msg, decision, session, reply)

        await self._run_request(link, msg, call, answer)

    # -- the task path ---------------------------------------------------------
    async def _run_request(
        self,
        link: ClientLink,
        msg: wire.Message,
        call: InflightCall,
        answer: Callable[[InflightCall], Awaitable[wire.Message | None]] | None = None,
    ) -> None:
        msg_id = msg["id"]
        assert call.scope is not None
        CURRENT_REQUEST.set(msg_id)
        try:
            with call.scope:
                if answer is None:
                    reply = await self._answer(link, msg, call)
                else:
                    reply = await answer(call)
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
        legacy = (link.session is not None or msg["method"] == "initialize") and not era.is_modern(
            msg
        )
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
                profile = session.profile
                decision = self._route(link, msg, profile)
                if isinstance(decision, routing.Reply):
                    return decision.message
                session = await self.pool.session_for(
                    link.principal, decision.client_capabilities, legacy
                )
            if decision.shape is routing.Shape.TO_LEGACY and decision.method in (
                "resources/subscribe",
                "resources/unsubscribe",
            ):
                # DESIGN §5.2.6: served by the session's upstream listen.
                uri = (decision.params or {}).get("uri")
                await self._session_listen(link).change(
                    session, uri, decision.method == "resources/subscribe"
                )
                return wire.result_response(msg_id, {})
            if (
                decision.method == "subscriptions/listen"
                and decision.shape is routing.Shape.TO_MODERN
            ):
                return await self.listens.listen(link, msg, session)
            if decision.shape is routing.Shape.TO_MODERN and MrtrBridge.takes(decision, msg):
                return await self.bridge.call(link, msg, decision, session)
            reply = await self._leased_forward(link, decision, session, msg_id)
        except (UpstreamError, TimeoutError) as exc:
            return failure_reply(exc, msg_id)
        return await self._after_reply(link, msg, decision, session, reply)

    async def _after_reply(
        self,
        link: ClientLink,
        msg: wire.Message,
        decision: routing.Forward,
        session: UpstreamSession,
        reply: wire.Message,
    ) -> wire.Message | None:
        msg_id = msg["id"]
        try:
            if decision.shape is routing.Shape.TO_LEGACY and _is_unsupported_version(reply):
                # DESIGN §5.2.7: the server moved on; learn its versions and retry once.
                profile = await self.pool.rediscover(link.principal)
                redo = self._route(link, msg, profile)
                if isinstance(redo, routing.Reply):
                    return redo.message
                decision = redo
                reply = await self._leased_forward(link, decision, session, msg_id)
            if decision.shape is routing.Shape.TO_LEGACY and mrtr_shapes.reply_is_input_required(
                reply
            ):
                reply = await self.legacy_input.complete(link, decision, session, reply, msg_id)
        except (UpstreamError, TimeoutError) as exc:
            return failure_reply(exc, msg_id)
        return self._shape(decision, reply, msg_id, session)

    def _route(
        self, link: ClientLink, msg: wire.Message, profile: UpstreamProfile
    ) -> routing.Decision:
        decision = routing.route_request(
            msg,
            link.session,
            profile,
            self._discover_hint,
            self.config.passthrough_methods,
            shapes_checked=True,  # handle_client_message ran inbound.problem
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

    async def _leased_forward(
        self,
        link: ClientLink,
        decision: routing.Forward,
        session: UpstreamSession,
        client_id: wire.RequestId,
    ) -> wire.Message:
        """Forward a call, holding the session's lease when a server request
        during it could need a client (DESIGN §5.1.6)."""
        lease = session.lease
        kind = self._lease_kind(link, decision, session)
        if kind == "none":
            return await self._forward(link, decision, session, client_id=client_id)
        exclusive = kind == "exclusive"
        with anyio.fail_after(self.config.request_timeout):
            if exclusive:
                await lease.acquire_exclusive(link)
            else:
                await lease.acquire_shared()
        try:
            return await self._forward(link, decision, session, client_id=client_id)
        finally:
            if exclusive:
                lease.release_exclusive(link)
            else:
                lease.release_shared()

    def _shape(
        self,
        decision: routing.Forward,
        reply: wire.Message,
        client_id: wire.RequestId,
        session: UpstreamSession,
    ) -> wire.Message:
        profile = session.profile or self.pool.profile
        assert profile is not None
        return routing.shape_reply(
            decision,
            reply,
            client_id,
            profile,
            self._cache_hint(decision.method, profile),
        )

    def _cache_hint(self, method: str, profile: UpstreamProfile) -> CacheHint | None:
        """The cache hints for a translated result of `method` (None for a
        method whose results carry none), computed once per method: this runs
        for every reply."""
        if method not in era.CACHEABLE:
            return None
        notified = subs_core.notifies_changes(method, profile.capabilities)
        hint = self._hints.get((method, notified))
        if hint is None:
            hint = self._hints[(method, notified)] = self.config.cache_hint(method, notified)
        return hint

    async def _forward(
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
        params: dict[str, Any] | None = decision.params
        token = _progress_token(params)
        upstream_token = None
        if token is not None:
            upstream_token = session.progress_token(link, token)
            params = _with_progress_token(params, upstream_token)
        if decision.method == "subscriptions/listen":
            if self.listens.ending and client_id is not None:
                # Shutdown began while this listen was on its way: it gets the
                # closing result the others got, not a stream cut off later.
                return wire.result_response(client_id, subs_core.closing_result(client_id))
            # A listen lasts until the client cancels it; its bound is a long one.
            timeout = timeout or self.config.listen_timeout
        try:
            return await session.call(
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

    async def _set_upstream_level(self, session: UpstreamSession, level: str) -> None:
        reply = await session.call(
            "logging/setLevel", {"level": level}, timeout=self.config.request_timeout
        )
        if "error" in reply:
            log.warning("upstream refused logging/setLevel", level=level, error=reply["error"])
        else:
            session.upstream_log_level = level

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
            self._tg.start_soon(self._open_session_listen, link)
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
        if call.cancel is not None:
            call.cancel()
        elif call.scope is not None:
            call.scope.cancel()

    def drop_link(self, link: ClientLink) -> None:
        """A client connection or session is over: cancel what it still runs."""
        for msg_id in list(link.inflight):
            self.cancel_request(link, msg_id)
        for forwarded in link.server_requests.values():
            forwarded.done.set()
        if link.session_listen is not None:
            link.session_listen.close()
        self.links.discard(link)

    def handle_client_reply(self, link: ClientLink, msg: wire.Message) -> None:
        msg_id = msg.get("id")
        forwarded = link.server_requests.get(msg_id) if isinstance(msg_id, str) else None
        if forwarded is None:
            log.warning("client answered no request of ours", id=msg_id, link=link.id)
            return
        forwarded.reply = msg
        forwarded.done.set()

    # -- server side -----------------------------------------------------
    async def _on_server_message(self, session: UpstreamSession, msg: wire.Message) -> None:
        """Runs on the upstream reader: never blocks for long."""
        if "id" in msg:
            refusal = upstream_checks.server_request_problem(msg)
            if refusal is not None:
                self._junk_log.warning(
                    "server request with bad params refused",
                    method=msg["method"][:100],
                    error=refusal["error"]["message"],
                    session=session.label,
                )
                await session.respond(refusal)
                return
            if msg["method"] == "ping" and not session.key.dual_legacy:
                # DESIGN §5.1.5: the gateway answers the legacy server's ping itself.
                await session.respond(wire.result_response(msg["id"], {}))
                return
            limit = self.config.max_inflight_per_client
            if session.serving >= limit:
                # Each one waits for a client for up to request_timeout: a
                # server that asks without end must not pile them up.
                self._junk_log.warning(
                    "server requests over the limit refused", limit=limit, session=session.label
                )
                await session.respond(
                    wire.error_response(
                        msg["id"],
                        wire.INTERNAL_ERROR,
                        f"Too many requests in progress (limit {limit})",
                    )
                )
                return
            assert self._tg is not None
            # Who a request can belong to is read now, in wire order: by the
            # time its task runs, the reader may have delivered the reply
            # that ended the call it came during.
            claim = _Claim.at_arrival(session, self._sole_owner(session))
            session.serving += 1
            self._tg.start_soon(self._serve_server_request, session, msg, claim)
            return
        problem = upstream_checks.notification_problem(msg)
        if problem is not None:
            self._junk_log.warning(
                "malformed server notification dropped",
                method=msg["method"][:100],
                why=problem,
                session=session.label,
            )
            return
        await self._route_server_notification(session, msg)

    async def _serve_server_request(
        self, session: UpstreamSession, msg: wire.Message, claim: _Claim
    ) -> None:
        try:
            await self._serve_claimed(session, msg, claim)
        finally:
            session.serving -= 1

    async def _serve_claimed(
        self, session: UpstreamSession, msg: wire.Message, claim: _Claim
    ) -> None:
        msg_id = msg["id"]
        method = msg["method"]
        feature = era.CLIENT_FEATURE_METHODS.get(method)
        holder = claim.holder
        if method == "ping":
            # A dual-era server's legacy session is the client's own, kept
            # whole (DESIGN §5.3): its ping reaches the one legacy client it
            # can belong to; with none, the gateway answers as on other paths.
            owner = holder if isinstance(holder, ClientLink) else claim.sole_owner
            if owner is not None and owner.session is not None:
                reply: wire.Message | None = await self._ask_legacy_client(owner, session, msg)
            else:
                reply = wire.result_response(msg_id, {})
        elif feature is None:
            reply = wire.error_response(
                msg_id, wire.METHOD_NOT_FOUND, f"Method not found: {method}"
            )
        elif isinstance(holder, HeldEntry):
            # DESIGN §5.1.6: the call holding the session owns the request.
            await self.bridge.on_server_request(holder, msg)
            return
        else:
            owner = holder if isinstance(holder, ClientLink) else claim.sole_owner
            reply = await self._serve_for(owner, session, msg, feature, claim)
        if reply is not None:
            await session.respond(reply)

    def _sole_owner(self, session: UpstreamSession) -> ClientLink | None:
        """The one client a server request can belong to, if there is one.

        With no call in progress, a lone client of the session's principal is
        still unambiguous: a legacy server may ask for roots right after
        initialized, as server-everything does. Never another principal's.
        """
        owners: set[ClientLink] = session.owners()
        if not owners and session.key != MODERN_KEY:
            owners = {link for link in self.links if link.principal == session.key.principal}
        owner = next(iter(owners)) if len(owners) == 1 else None
        return owner if isinstance(owner, ClientLink) else None

    async def _serve_for(
        self,
        owner: ClientLink | None,
        session: UpstreamSession,
        msg: wire.Message,
        feature: str,
        claim: _Claim,
    ) -> wire.Message | None:
        msg_id = msg["id"]
        method = msg["method"]
        if (
            method == "roots/list"
            and self.config.static_roots
            and not (owner is not None and owner.declared("roots"))
        ):
            # DESIGN §5.1.6: roots the client cannot give may come from configuration.
            if owner is None:
                why = "no single client it can belong to"
            elif owner.session is not None:
                why = "the client did not declare the roots capability"
            else:
                why = "no call of the modern client that can carry it is in progress"
            self._refusals_log.info("roots/list answered from the configured roots", why=why)
            return wire.result_response(msg_id, {"roots": list(self.config.static_roots)})
        if owner is not None and owner.session is not None:
            if owner.declared(feature):
                return await self._ask_legacy_client(owner, session, msg)
            why = f"the client did not declare the {feature} capability"
        elif owner is None:
            why = "no single client call it can belong to"
        else:
            calls = claim.calls.get(owner, [])
            missing = mrtr_core.check_capability({}, method, msg.get("params"))
            # Roots are the session's, not a call's: a legacy server asks for
            # them at session start and on list_changed (server-everything
            # 350 ms after initialized, whatever call is then in flight), so
            # a call of a client that declared none is not failed for it; the
            # server's refusal lets a tool that needed them fail on its own
            # terms. Sampling and elicitation asked during a call are its own.
            sessionwide = method == "roots/list" and feature in session.key.features
            # A request from the HTTP GET stream names no call (2025-11-25: it
            # SHOULD be unrelated to running ones; server-everything asks for
            # roots there after initialized), so it fails none. Nor does one
            # that arrives while the only call is one whose result cannot be
            # input_required (a tools/list, 2026-07-28): a server asks that at
            # session start, as server-filesystem asks roots/list right after
            # initialized, and the call is not the one that needs it.
            could_carry = len(calls) == 1 and calls[0][1] in era.MRTR_METHODS
            if (
                could_carry
                and missing is not None
                and not session.outside_calls(msg_id)
                and not sessionwide
            ):
                # The one call of a modern client that declared no client
                # features needs one: answer it -32021, as a modern server would.
                await session.respond(
                    wire.error_response(msg_id, wire.METHOD_NOT_FOUND, missing.reason)
                )
                target = session.pending.get(calls[0][0])
                if target is not None and target.client_id is not None:
                    session.fail_call(calls[0][0], missing.error(target.client_id))
                return None
            in_progress = ", ".join(sorted({m[:100] for _, m in calls}))[:300] or "none"
            why = (
                f"roots belong to the session, and the only call in progress ({in_progress})"
                " is of a client that did not declare them"
                if sessionwide and could_carry
                else f"no call of the modern client that can carry it is in progress"
                f" (in progress: {in_progress})"
            )
        self._refusals_log.info("server request refused", method=method[:100], why=why)
        # Every refusal is -32601 with the reason in the message: servers take
        # any error from roots/list as "no roots from the client" and keep
        # their own configuration (server-filesystem keeps the directories on
        # its command line and asks again on roots/list_changed); the mcp SDKs
        # raise it in the tool that asked, which fails on its own terms.
        return wire.error_response(msg_id, wire.METHOD_NOT_FOUND, f"{method} refused: {why}")

    async def _ask_legacy_client(
        self, link: ClientLink, session: UpstreamSession, msg: wire.Message
    ) -> wire.Message | None:
        """Pass a legacy server's request to a legacy client under a gateway id.

        None means the server cancelled it meanwhile and wants no answer.
        """
        gateway_id = link.next_server_request_id()
        forwarded = ForwardedServerRequest(session, msg["id"])
        link.server_requests[gateway_id] = forwarded
        try:
            await link.send(wire.request(gateway_id, msg["method"], msg.get("params")))
            with anyio.fail_after(self.config.request_timeout):
                await forwarded.done.wait()
        except TimeoutError:
            return wire.error_response(
                msg["id"], wire.INTERNAL_ERROR, "the client did not answer in time"
            )
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return wire.error_response(msg["id"], wire.INTERNAL_ERROR, "the client went away")
        finally:
            link.server_requests.pop(gateway_id, None)
        if forwarded.cancelled:
            return None
        if forwarded.reply is None:
            # The client went away (drop_link) without answering: the server
            # still needs an answer, or it waits for one forever.
            return wire.error_response(msg["id"], wire.INTERNAL_ERROR, "the client went away")
        answer = dict(forwarded.reply)
        answer["id"] = msg["id"]
        return answer

    async def _route_server_notification(self, session: UpstreamSession, msg: wire.Message) -> None:
        method = msg["method"]
        params: dict[str, Any] = msg.get("params") or {}
        if method == "notifications/progress":
            route = session.progress.get(str(params.get("progressToken")))
            if route is not None:
                await self._send_progress(route, msg)
            return
        if method == "notifications/message":
            level = params.get("level")
            if level not in era.LOG_RANK:
                return
            for link in self._legacy_links_of(session):
                if _legacy_client_wants_log(link, session, level):
                    await _send_quietly(link, msg)
            owner = _log_owner(session, msg, level)
            if owner is not None:
                await _send_quietly(owner, msg)
            return
        if method == "notifications/cancelled":
            # The server gave up on a request it sent; tell the client we passed it to.
            target = params.get("requestId")
            if isinstance(session.lease.holder, HeldEntry):
                self.bridge.on_server_cancel(session.lease.holder, target)
            for link in list(self.links):
                for gateway_id, forwarded in list(link.server_requests.items()):
                    if forwarded.session is session and forwarded.upstream_id == target:
                        forwarded.cancelled = True
                        forwarded.done.set()
                        await _send_quietly(
                            link,
                            wire.notification(
                                "notifications/cancelled",
                                {**params, "requestId": gateway_id},
                            ),
                        )
            return
        subscription = upstream_subscription(msg)
        if subscription is not None and isinstance(subscription, int):
            # A modern server's listen stream: back under the client's own id.
            listen = session.pending.get(subscription)
            if isinstance(listen, PendingCall) and listen.tag is not None:
                await listen.tag.on_notification(msg)
                return
            if (
                isinstance(listen, PendingCall)
                and isinstance(listen.owner, ClientLink)
                and listen.client_id is not None
            ):
                await _send_quietly(listen.owner, subs_core.tagged(msg, listen.client_id))
            return
        if session.profile is not None and session.profile.era is era.Era.LEGACY:
            await self.listens.deliver(session, msg)
            # Same-era passthrough for legacy clients (list_changed, resources/updated, …).
            for link in self._legacy_links_of(session):
                await _send_quietly(link, msg)
            return
        log.debug("server notification with no listener dropped", method=method)

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

    async def _send_progress(self, route: ProgressRoute, msg: wire.Message) -> None:
        params = dict(msg.get("params") or {})
        params["progressToken"] = route.client_token
        link = route.owner
        if isinstance(link, ClientLink):
            await _send_quietly(link, wire.notification("notifications/progress", params))

    # -- batching ----------------------------------------------------------
    def cork(self) -> None:
        for link in self.links:
            link.cork()

    def uncork(self) -> None:
        for link in list(self.links):
            try:
                link.uncork()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                log.debug("client output closed", link=link.id)

    def _session_listen(self, link: ClientLink) -> SessionListen:
        if link.session_listen is None:
            assert self._tg is not None

            async def session_for() -> UpstreamSession:
                return await self.pool.session_for(link.principal, {})

            link.session_listen = SessionListen(self.config, link, self._tg, session_for)
        listen: SessionListen = link.session_listen
        return listen

    async def _open_session_listen(self, link: ClientLink) -> None:
        """A legacy session of a modern server hears list_changed from the start."""
        try:
            session = await self.pool.session_for(link.principal, {})
            await self._session_listen(link).reopen(session)
        except (UpstreamError, TimeoutError) as exc:
            log.warning("cannot open the session's upstream listen", error=str(exc))

    async def _session_lost(self, session: UpstreamSession) -> None:
        principal = session.key.principal

        async def replace() -> UpstreamSession:
            return await self.pool.session_for(principal if principal != "*" else "local", {})

        assert self._tg is not None
        self._tg.start_soon(self.listens.session_lost, session, replace)

    def end_subscriptions(self) -> None:
        """Shutdown begins: listens end with their graceful closing result
        (2026-07-28 subscriptions "Graceful Closure"): those the gateway serves
        on a legacy server, and a modern client's listens passed through to a
        modern server, which the server is told to drop."""
        self.listens.end_all()
        for session in list(self.pool.sessions.values()):
            for upstream_id, pending in list(session.pending.items()):
                if (
                    pending.method == "subscriptions/listen"
                    and isinstance(pending.owner, ClientLink)
                    and pending.client_id is not None
                    and pending.tag is None  # not a legacy session's own listen
                ):
                    session.abandon_call(upstream_id, "the gateway is shutting down")
                    closing = subs_core.closing_result(pending.client_id)
                    pending.settle(wire.result_response(pending.client_id, closing))

    # -- lifecycle -------------------------------------------------------
    _tg: anyio.abc.TaskGroup | None = None

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self.bridge.start(tg)
        await self.pool.start(tg)

    async def aclose(self) -> None:
        await self.pool.aclose()

    # -- what the fronts read (gateway.fronts.port.GatewayPort) ----------
    def remember_credential(self, principal: str, credential: str) -> None:
        self.pool.remember_credential(principal, credential)

    def path_for(self, legacy_client: bool) -> str:
        return self.pool.path_for(legacy_client)

    def readiness(self) -> Readiness:
        pool, profile = self.pool, self.pool.profile
        if not pool.settled or profile is None:
            return Readiness(
                False, awaiting_credentials=pool.awaiting_credentials, failure=pool.failure
            )
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
            upstream_restarts=pool.restarts,
            upstream_ready=pool.settled and pool.profile is not None,
        )


@dataclass(frozen=True, slots=True)
class _Claim:
    """Who could own a server request when it arrived: the session's lease
    holder, the one client with calls on it (if only one), and their calls."""

    holder: object | None
    sole_owner: ClientLink | None
    # The owner's calls in progress: upstream id and method.
    calls: dict[object, list[tuple[int, str]]]

    @classmethod
    def at_arrival(cls, session: UpstreamSession, sole_owner: ClientLink | None) -> _Claim:
        owner = session.lease.holder
        if not isinstance(owner, ClientLink):
            owner = sole_owner
        calls: dict[object, list[tuple[int, str]]] = {}
        if owner is not None:
            calls[owner] = [(i, session.pending[i].method) for i in session.calls_of(owner)]
        return cls(session.lease.holder, sole_owner, calls)


def _legacy_client_wants_log(link: ClientLink, session: UpstreamSession, level: str) -> bool:
    """DESIGN §5.1.5: a legacy client asked once for its session, with
    logging/setLevel, and sees the messages at or above that level."""
    assert link.session is not None
    asked = link.session.log_level
    if asked is None:
        # Legacy default: the server decides what to send; pass it on for
        # a legacy server, and a modern one sends nothing unasked.
        return session.profile is not None and session.profile.era is era.Era.LEGACY
    return era.LOG_RANK[asked] <= era.LOG_RANK[level]


def _log_owner(session: UpstreamSession, msg: wire.Message, level: str) -> ClientLink | None:
    """The modern client call a log message provably belongs to, if any.

    A modern client asks per request (`io.modelcontextprotocol/logLevel`), and
    a server MUST NOT send log messages for a request without it (2026-07-28
    logging). A legacy server's messages name no call, so the gateway does not
    guess: a message goes to a call only when it is the one client call it can
    be about (the call whose HTTP stream carried it, or over stdio the only
    client call in progress on the session) and that call asked for this
    level. When calls overlap on a legacy stdio session, nobody gets it.
    """
    calls = session.calls_a_notification_may_belong_to(msg)
    if len(calls) != 1:
        return None
    call = calls[0]
    if call.log_level is None or era.LOG_RANK[call.log_level] > era.LOG_RANK[level]:
        return None
    owner = call.owner
    if not isinstance(owner, ClientLink) or owner.session is not None:
        return None  # a legacy client's messages follow its session's level
    return owner


async def _send_quietly(link: ClientLink, msg: wire.Message) -> None:
    try:
        await link.send(msg)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        log.debug("notification to a departed client dropped", link=link.id)


def _progress_token(params: dict[str, Any] | None) -> str | int | None:
    meta = (params or {}).get("_meta")
    if isinstance(meta, dict):
        token = meta.get("progressToken")
        if wire.is_request_id(token):
            return token
    return None


def _with_progress_token(params: dict[str, Any] | None, token: str) -> dict[str, Any]:
    out = dict(params or {})
    out["_meta"] = {**out.get("_meta", {}), "progressToken": token}
    return out


def _is_unsupported_version(reply: wire.Message) -> bool:
    error = reply.get("error")
    return isinstance(error, dict) and error.get("code") == wire.UNSUPPORTED_PROTOCOL_VERSION


__all__ = ["GatewayService", "UpstreamProfile"]
