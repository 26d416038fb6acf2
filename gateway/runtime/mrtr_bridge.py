"""The MRTR bridge at work, modern client → legacy server (DESIGN §5.1.6-5.1.8).

A call that may need client input runs upstream as a task the bridge owns, so
it can outlive the client's request: when the legacy server asks for
sampling, elicitation or roots, the client's request is answered with
`input_required` and the upstream call stays parked (hold mode) until the
retry brings the answers, or until the state expires and the call is
cancelled. Replay mode parks nothing: it cancels the upstream call, seals the
answers so far into the state, and re-runs the call on the retry.
"""

from __future__ import annotations

import math
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

import anyio
import anyio.lowlevel
import structlog
from anyio.abc import TaskGroup

from gateway import era, wire
from gateway.config import Config
from gateway.core import mrtr_bridge as core
from gateway.core.request_state import ConsumedStates, Sealer, StateRejected, params_digest
from gateway.core.routing import Forward
from gateway.runtime.client_link import ClientLink
from gateway.runtime.upstream_session import (
    WIND_DOWN,
    UpstreamGone,
    UpstreamSession,
    UpstreamTimeout,
    failure_reply,
)

log = structlog.get_logger("gateway.mrtr")

STATE_KEY_ENV = "MCP_ERA_GATEWAY_STATE_KEY"
FEATURES = frozenset(era.CLIENT_FEATURE_METHODS.values())
# Server requests one bridged call may have waiting for its client at once.
MAX_ASKS_PER_ROUND = 64
# Honoured re-run states (replay, -32042 re-send) remembered until they expire,
# so that each runs the call once: about 100 bytes each.
REPLAY_STATES_REMEMBERED = 100_000

ForwardFn = Callable[[ClientLink, Forward, UpstreamSession, float], Awaitable[wire.Message]]
ShapeFn = Callable[[Forward, wire.Message, wire.RequestId, UpstreamSession], wire.Message]


@dataclass(eq=False)
class HeldEntry:
    """One bridged call: the pure HeldCall plus what the runtime needs."""

    call: core.HeldCall
    link: ClientLink
    decision: Forward
    session: UpstreamSession
    runner: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    changed: anyio.Event = field(default_factory=anyio.Event)
    finished: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    reply: wire.Message | None = None
    watch: anyio.CancelScope | None = None
    busy: bool = False
    closed: bool = False
    missing: core.MissingCapability | None = None

    def poke(self) -> None:
        self.changed.set()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _invalid(msg_id: wire.RequestId, why: str) -> wire.Message:
    return wire.error_response(msg_id, wire.INVALID_PARAMS, f"Invalid params: {why}")


class MrtrBridge:
    def __init__(self, config: Config, forward: ForwardFn, shape: ShapeFn) -> None:
        self.config = config
        self._forward = forward
        self._shape = shape
        self._tg: TaskGroup | None = None
        key = config.state_key or os.environ.get(STATE_KEY_ENV)
        if key is None:
            log.warning(
                "no requestState key configured; using a random one for this process "
                f"(set [mrtr] state_key or {STATE_KEY_ENV} to share it between replicas)"
            )
            raw = secrets.token_bytes(32)
        else:
            raw = key.encode()
        self.sealer = Sealer(raw, config.instance_id or secrets.token_hex(6))
        self.held: dict[str, HeldEntry] = {}
        # Parked calls whose upstream failed: their slot is free, and their
        # retry gets this failure (oldest dropped first).
        self._failed: OrderedDict[str, wire.Message] = OrderedDict()
        self.consumed = ConsumedStates(REPLAY_STATES_REMEMBERED)
        self.rounds = 0

    def start(self, tg: TaskGroup) -> None:
        self._tg = tg

    # -- which calls the bridge takes ------------------------------------------------
    @staticmethod
    def takes(decision: Forward, msg: wire.Message) -> bool:
        """Calls of MRTR methods from a client that can be asked for input, and
        retries (which carry requestState)."""
        if decision.method not in era.MRTR_METHODS:
            return False
        params = msg.get("params") or {}
        return "requestState" in params or bool(FEATURES & decision.client_capabilities.keys())

    def _replay_mode(self, decision: Forward) -> bool:
        if decision.method != "tools/call" or not self.config.replay_tools:
            return False
        name = (decision.params or {}).get("name")
        return isinstance(name, str) and any(
            fnmatchcase(name, pattern) for pattern in self.config.replay_tools
        )

    async def call(
        self, link: ClientLink, msg: wire.Message, decision: Forward, session: UpstreamSession
    ) -> wire.Message:
        msg_id = msg["id"]
        params = msg.get("params") or {}
        # MRTR plumbing is the gateway's business: a legacy server never sees it.
        upstream_params = {
            k: v
            for k, v in (decision.params or {}).items()
            if k not in ("inputResponses", "requestState")
        }
        decision = Forward(
            decision.method,
            upstream_params,
            decision.shape,
            decision.client_era,
            decision.client_capabilities,
            decision.log_level,
        )
        if "requestState" in params:
            return await self._retry(link, msg, decision, session)
        if self._replay_mode(decision):
            call = self._new_call(link, msg, decision, replay={}, replay_round=0)
        else:
            call = self._new_call(link, msg, decision)
        return await self._run(msg_id, HeldEntry(call, link, decision, session))

    def _new_call(
        self,
        link: ClientLink,
        msg: wire.Message,
        decision: Forward,
        replay: dict[str, Any] | None = None,
        replay_round: int = 0,
    ) -> core.HeldCall:
        return core.HeldCall(
            handle=None if replay is not None else secrets.token_urlsafe(12),
            principal=link.principal,
            method=decision.method,
            digest=params_digest(msg.get("params")),
            client_caps=decision.client_capabilities,
            max_rounds=self.config.max_rounds,
            replay_answers=replay,
            replay_round=replay_round,
        )

    # -- a run of the upstream call -----------------------------------------------
    async def _run(self, msg_id: wire.RequestId, entry: HeldEntry) -> wire.Message:
        if len(self.held) >= self.config.max_parked_calls:
            return wire.gateway_error(
                msg_id,
                wire.INTERNAL_ERROR,
                f"Too many calls waiting for client input (limit {self.config.max_parked_calls})",
                reason="parked-limit",
            )
        try:
            with anyio.fail_after(self.config.request_timeout):
                await entry.session.lease.acquire_exclusive(entry)
        except TimeoutError:
            return wire.gateway_error(
                msg_id,
                wire.INTERNAL_ERROR,
                "The upstream session stayed busy with another call that needs client input",
                reason="session-busy",
            )
        assert self._tg is not None
        self._tg.start_soon(self._run_upstream, entry)
        try:
            return await self._wait(msg_id, entry)
        except anyio.get_cancelled_exc_class():
            # The client cancelled (or went away): the call's work stops, and
            # the session it holds is free again (2026-07-28 "Cancellation").
            with anyio.CancelScope(shield=True):
                await self._close(entry, "cancelled by the client")
            raise

    async def _run_upstream(self, entry: HeldEntry) -> None:
        # A parked call may wait for its client for state_ttl per round; this is
        # the hard ceiling on the whole upstream call.
        ceiling = self.config.request_timeout + self.config.state_ttl * self.config.max_rounds
        try:
            with entry.runner:
                try:
                    entry.reply = await self._forward(
                        entry.link, entry.decision, entry.session, ceiling
                    )
                except (UpstreamGone, UpstreamTimeout) as exc:
                    entry.reply = failure_reply(exc)
                    if self._parked(entry):
                        # Nobody waits on it and it cannot be continued: free
                        # its slot now, not when its state expires; its retry
                        # still hears why.
                        self._remember_failure(entry, entry.reply)
                        self._forget(entry)
        finally:
            entry.session.lease.release_exclusive(entry)
            entry.finished.set()
            entry.poke()
            if entry.runner.cancel_called:
                # The server was told to cancel the call: a reply to one of its
                # requests now could meet the request being torn down (see _close).
                entry.call.asks.clear()
            else:
                await self._refuse_asks(entry, "the call it belonged to has ended")

    async def _wait(self, msg_id: wire.RequestId, entry: HeldEntry) -> wire.Message:
        """Wait for the call's result or its next input requests."""
        try:
            with anyio.fail_after(self.config.request_timeout):
                while not entry.finished.is_set() and not entry.call.asks:  # each pass waits
                    await entry.changed.wait()
                    entry.changed = anyio.Event()
                if not entry.finished.is_set():
                    await self._gather_more(entry)
        except TimeoutError:
            await self._close(entry, "no result and no input request within request_timeout")
            return wire.gateway_error(
                msg_id,
                wire.INTERNAL_ERROR,
                f"Upstream did not answer within {self.config.request_timeout:g}s",
                reason="upstream-timeout",
            )
        if entry.finished.is_set():
            self._forget(entry)
            return self._final(msg_id, entry)
        try:
            result = entry.call.input_required(
                self.sealer,
                now_ms=_now_ms(),
                ttl_ms=int(self.config.state_ttl * 1000),
                nonce=secrets.token_urlsafe(12),
            )
        except core.TooManyRounds as exc:
            await self._close(entry, str(exc))
            return wire.gateway_error(msg_id, wire.INTERNAL_ERROR, str(exc), reason="mrtr-rounds")
        self.rounds += 1
        if entry.call.replay:
            # Replay mode keeps nothing: stop the run; the retry starts it afresh.
            await self._close(entry, "replay mode: re-run on retry")
        else:
            self._park(entry)
        log.info(
            "asking the client for input",
            keys=list(result["inputRequests"]),
            round=entry.call.round,
            mode="replay" if entry.call.replay else "hold",
        )
        return wire.result_response(msg_id, result)

    async def _gather_more(self, entry: HeldEntry) -> None:
        """Let requests the server sent together arrive before answering, so that
        they go out in one input_required.

        Requests that came in one read are registered by tasks the reader started
        before this one woke, so yielding a few times collects them at no cost.
        A server that writes them far apart can be given `input_batch_window`:
        each arrival within it extends the wait (off by default, because every
        round trip pays it)."""
        for _ in range(3):
            await anyio.lowlevel.checkpoint()
        window = self.config.input_batch_window
        if window <= 0:
            return
        count = -1
        while count != len(entry.call.asks) and not entry.finished.is_set():
            count = len(entry.call.asks)
            await anyio.sleep(window)

    def _final(self, msg_id: wire.RequestId, entry: HeldEntry) -> wire.Message:
        if entry.missing is not None:
            return entry.missing.error(msg_id)
        reply = entry.reply
        if reply is None:
            return wire.gateway_error(
                msg_id,
                wire.INTERNAL_ERROR,
                "The upstream call was cancelled",
                reason="upstream-cancelled",
            )
        error = reply.get("error")
        if isinstance(error, dict) and error.get("code") == wire.URL_ELICITATION_REQUIRED:
            return self._url_elicitation_required(msg_id, entry, error)
        return self._shape(entry.decision, reply, msg_id, entry.session)

    def _url_elicitation_required(
        self, msg_id: wire.RequestId, entry: HeldEntry, error: dict[str, Any]
    ) -> wire.Message:
        """2025-11-25's -32042 becomes an input_required with URL elicitations;
        the retry re-sends the original call (DESIGN §5.1.6)."""
        items = core.url_elicitations(error)
        caps = entry.decision.client_capabilities
        if items is None or not core.client_supports(caps, "elicitation/create", {"mode": "url"}):
            # -32042 must never reach a modern client (2026-07-28 "Error Codes").
            return wire.error_response(
                msg_id,
                wire.MISSING_REQUIRED_CLIENT_CAPABILITY,
                "The server needs a URL elicitation, which the client did not declare",
                {"requiredCapabilities": {"elicitation": {"url": {}}}},
            )
        token = self.sealer.seal(
            core.Claims(
                instance=self.sealer.instance,
                principal=entry.call.principal,
                method=entry.call.method,
                digest=entry.call.digest,
                round=1,
                expires_ms=_now_ms() + int(self.config.state_ttl * 1000),
                resend=True,
                nonce=secrets.token_urlsafe(12),
            )
        )
        inputs = {
            f"url-{i}": {"method": "elicitation/create", "params": p}
            for i, p in enumerate(items, start=1)
        }
        return wire.result_response(
            msg_id,
            {
                "resultType": "input_required",
                "inputRequests": inputs,
                "requestState": token,
            },
        )

    # -- server requests during a bridged call ------------------------------------
    async def on_server_request(self, entry: HeldEntry, msg: wire.Message) -> None:
        """A legacy server's request while `entry` holds its session."""
        if entry.closed or entry.missing is not None or entry.finished.is_set():
            # No client will answer any more (the call ended, or is ending,
            # before this request could be served). Once the call is being
            # cancelled upstream the reply is left out: the server drops the
            # request with the call, and a reply racing that teardown is what
            # breaks it.
            if not entry.runner.cancel_called:
                await entry.session.respond(
                    wire.error_response(
                        msg["id"], wire.INTERNAL_ERROR, "No client answer: the call has ended"
                    )
                )
            return
        if len(entry.call.asks) >= MAX_ASKS_PER_ROUND:
            # One input_required carries them all: a server that asks without
            # end must not grow it without end.
            await entry.session.respond(
                wire.error_response(
                    msg["id"],
                    wire.INTERNAL_ERROR,
                    f"Too many requests for client input at once (limit {MAX_ASKS_PER_ROUND})",
                )
            )
            return
        outcome = entry.call.add_ask(msg)
        if isinstance(outcome, core.Prefilled):
            await entry.session.respond(wire.result_response(msg["id"], outcome.result))
        elif isinstance(outcome, core.MissingCapability):
            # The call needs what the client never declared: a modern server
            # would have answered -32021, so the client hears that, and the
            # legacy server's call is cancelled.
            log.info("call needs an undeclared client capability", why=outcome.reason)
            await entry.session.respond(
                wire.error_response(msg["id"], wire.METHOD_NOT_FOUND, outcome.reason)
            )
            entry.missing = outcome
            assert self._tg is not None
            self._tg.start_soon(self._cancel_unless_done, entry)
        elif isinstance(outcome, str):
            log.info(
                "server request the client cannot take refused", method=msg["method"], why=outcome
            )
            await entry.session.respond(
                wire.error_response(
                    msg["id"], wire.METHOD_NOT_FOUND, f"{msg['method']} refused: {outcome}"
                )
            )
        else:
            entry.poke()

    def on_server_cancel(self, entry: HeldEntry, upstream_id: object) -> None:
        if wire.is_request_id(upstream_id):
            entry.call.drop_ask(upstream_id)  # type: ignore[arg-type]

    # -- the client's retry ------------------------------------------------------------
    async def _retry(
        self, link: ClientLink, msg: wire.Message, decision: Forward, session: UpstreamSession
    ) -> wire.Message:
        msg_id = msg["id"]
        params = msg.get("params") or {}
        try:
            claims = self.sealer.open(
                params.get("requestState"),
                principal=link.principal,
                method=decision.method,
                digest=params_digest(params),
                now_ms=_now_ms(),
            )
        except StateRejected as exc:
            log.info("retry rejected", why=str(exc))
            return _invalid(msg_id, str(exc))
        if claims.resend:
            refusal = core.url_refusal(params.get("inputResponses"))
            if refusal is not None:
                # The user would not open the link the server requires: re-sending
                # would only meet the same -32042, so the call ends here.
                return wire.gateway_error(
                    msg_id,
                    wire.INTERNAL_ERROR,
                    f"The server requires a URL elicitation that was not completed ({refusal})",
                    reason="elicitation-declined",
                )
            used = self._consume(msg_id, claims)
            if used is not None:
                return used
            fresh = self._new_call(link, msg, decision)
            return await self._run(msg_id, HeldEntry(fresh, link, decision, session))
        if claims.handle is None:
            try:
                answers = core.merge_replay_answers(claims, params.get("inputResponses"))
            except StateRejected as exc:
                return _invalid(msg_id, str(exc))
            used = self._consume(msg_id, claims)
            if used is not None:
                return used
            call = self._new_call(link, msg, decision, replay=answers, replay_round=claims.round)
            return await self._run(msg_id, HeldEntry(call, link, decision, session))
        entry = self.held.get(claims.handle)
        failed = self._failed.pop(claims.handle, None) if entry is None else None
        if failed is not None:
            return {**failed, "id": msg_id}
        if entry is None or entry.closed:
            return _invalid(
                msg_id,
                "the call this requestState continues is gone "
                "(finished, expired, or parked on another gateway instance)",
            )
        if entry.busy:
            return _invalid(msg_id, "a retry of this request is already in progress")
        entry.busy = True
        self._hold_watch(entry)
        try:
            try:
                # Check before waiting for the session: a bad retry must not
                # queue behind other calls, and must leave the call as it was.
                entry.call.check_retry(claims, params.get("inputResponses"))
            except StateRejected as exc:
                log.info("retry rejected", why=str(exc))
                self._park(entry)  # the call stays parked for a correct retry
                return _invalid(msg_id, str(exc))
            if not entry.finished.is_set():
                try:
                    with anyio.fail_after(self.config.request_timeout):
                        await entry.session.lease.acquire_exclusive(entry)
                except TimeoutError:
                    self._park(entry)
                    return wire.gateway_error(
                        msg_id,
                        wire.INTERNAL_ERROR,
                        "The upstream session stayed busy; retry with the same requestState",
                        reason="session-busy",
                    )
            outcome = entry.call.accept_retry(claims, params.get("inputResponses"))
            entry.link = link
            for ask, result in outcome.answers:
                await entry.session.respond(wire.result_response(ask.upstream_id, result))
            return await self._wait(msg_id, entry)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._close(entry, "the retry was cancelled")
            raise
        finally:
            entry.busy = False

    def _consume(self, msg_id: wire.RequestId, claims: core.Claims) -> wire.Message | None:
        """Spend a state whose retry re-runs the call: None if it may run, else
        the client's answer. Checked last, so a retry refused for another
        reason leaves the state usable."""
        try:
            self.consumed.consume(claims, _now_ms())
        except StateRejected as exc:
            log.info("retry rejected", why=str(exc))
            return _invalid(msg_id, str(exc))
        except ConsumedStates.Full as exc:
            log.info("retry refused", why=str(exc))
            return wire.gateway_error(
                msg_id,
                wire.INTERNAL_ERROR,
                f"Too many re-run requestStates in use ({exc}); retry later",
                reason="replay-limit",
            )
        return None

    # -- parking, expiry, cleanup ---------------------------------------------------
    def _park(self, entry: HeldEntry) -> None:
        assert entry.call.handle is not None
        self.held[entry.call.handle] = entry
        # While the client gathers input the server waits on us, so nothing on
        # the wire can be this call's: the session is free for other calls
        # until the retry takes it back (a client that never retries must not
        # block everyone until the state expires).
        entry.session.lease.release_exclusive(entry)
        deadline = anyio.current_time() + self.config.state_ttl
        if entry.watch is None:
            assert self._tg is not None
            self._tg.start_soon(self._watch, entry, deadline)
        else:
            entry.watch.deadline = deadline

    def _remember_failure(self, entry: HeldEntry, reply: wire.Message) -> None:
        assert entry.call.handle is not None
        self._failed[entry.call.handle] = reply
        while len(self._failed) > self.config.max_parked_calls:  # bounded like the slots
            self._failed.popitem(last=False)

    def _parked(self, entry: HeldEntry) -> bool:
        """Parked for its client's retry, and no retry is in progress."""
        handle = entry.call.handle
        return handle is not None and self.held.get(handle) is entry and not entry.busy

    def _hold_watch(self, entry: HeldEntry) -> None:
        if entry.watch is not None:
            entry.watch.deadline = math.inf

    async def _watch(self, entry: HeldEntry, deadline: float) -> None:
        with anyio.CancelScope(deadline=deadline) as scope:
            entry.watch = scope
            await entry.done.wait()
        if not entry.done.is_set():
            await self._close(entry, "expired: the client never retried")

    def _forget(self, entry: HeldEntry) -> None:
        if entry.call.handle is not None:
            self.held.pop(entry.call.handle, None)
        entry.done.set()

    async def _close(self, entry: HeldEntry, reason: str) -> None:
        """End a bridged call early: refuse its pending asks, and cancel it
        upstream if the server does not end it by itself within WIND_DOWN.

        The order matters to real servers (see WIND_DOWN): the server first
        hears that no answer will come, which ends a tool that only waited for
        one, and only a call still running after that gets
        `notifications/cancelled`, after which nothing more is sent for it.
        """
        if entry.closed:
            return
        entry.closed = True
        log.info("bridged call closed", reason=reason, handle=entry.call.handle)
        self._forget(entry)
        await self._refuse_asks(entry, reason)
        if entry.finished.is_set():
            return
        assert self._tg is not None
        self._tg.start_soon(self._cancel_unless_done, entry)

    async def _cancel_unless_done(self, entry: HeldEntry) -> None:
        with anyio.move_on_after(WIND_DOWN):
            await entry.finished.wait()
        entry.runner.cancel()

    async def _refuse_asks(self, entry: HeldEntry, reason: str) -> None:
        asks = list(entry.call.asks.values())
        entry.call.asks.clear()
        with anyio.CancelScope(shield=True), anyio.move_on_after(1):
            for ask in asks:
                try:
                    await entry.session.respond(
                        wire.error_response(
                            ask.upstream_id, wire.INTERNAL_ERROR, f"No client answer: {reason}"
                        )
                    )
                except Exception as exc:  # the session may be gone; nothing left to tell it
                    log.debug("could not refuse a server request", error=str(exc))
