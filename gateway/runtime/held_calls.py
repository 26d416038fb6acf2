"""The MRTR bridge at work, modern client → legacy server (DESIGN §5.1.6-5.1.8).

A call that may need client input runs upstream as a task the bridge owns, so
it can outlive the client's request: when the legacy server asks for
sampling, elicitation or roots, the client's request is answered with
`input_required` and the upstream call stays parked (hold mode) until the
retry brings the answers, or until the state expires and the call is
cancelled. Replay mode parks nothing: it cancels the upstream call, seals the
answers so far into the state, and re-runs the call on the retry.

Every decision about a call is `core.mrtr_hold.HoldTable`'s; this module
carries out its commands (the session, the upstream task, timers, replies)
and turns what it waited for into the table's events.
"""

from __future__ import annotations

import itertools
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

import anyio
import anyio.lowlevel
import structlog
from anyio.abc import TaskGroup

from gateway import era, wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.core import mrtr_bridge as core
from gateway.core import mrtr_hold_events as hold
from gateway.core import mrtr_hold_replies as replies
from gateway.core import mrtr_shapes
from gateway.core.engine import CancelTimer, Command, Event, Log, StartTimer, TimerFired
from gateway.core.mrtr_hold import HoldTable
from gateway.core.mrtr_parking import HoldSettings
from gateway.core.request_state import ConsumedStates, Sealer, StateRejected, params_digest
from gateway.core.routing import Forward
from gateway.runtime.engine_timers import EngineTimers
from gateway.runtime.upstream_session import WIND_DOWN, UpstreamSession, failure_reply
from gateway.upstream_errors import UpstreamError

log = structlog.get_logger("gateway.mrtr")

STATE_KEY_ENV = "MCP_ERA_GATEWAY_STATE_KEY"
# Honoured re-run states (replay, -32042 re-send) remembered until they expire,
# so that each runs the call once: about 100 bytes each.
REPLAY_STATES_REMEMBERED = 100_000

ForwardFn = Callable[[ClientLink, Forward, UpstreamSession, float], Awaitable[wire.Message]]
ShapeFn = Callable[[Forward, wire.Message, wire.RequestId, UpstreamSession], wire.Message]
Timer = hold.Expiry | hold.WindDown | hold.OutcomeDue | hold.SessionDue


@dataclass(eq=False)
class HeldEntry:
    """What the runtime keeps for one bridged call (its state is the table's)."""

    key: hold.CallKey
    call: core.HeldCall
    link: ClientLink
    decision: Forward
    session: UpstreamSession
    runner: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    acquiring: anyio.CancelScope | None = None  # while waiting for the session
    changed: anyio.Event = field(default_factory=anyio.Event)
    finished: anyio.Event = field(default_factory=anyio.Event)


def _now_ms() -> int:
    return int(time.time() * 1000)


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
        settings = HoldSettings(
            state_ttl=config.state_ttl,
            max_parked_calls=config.max_parked_calls,
            request_timeout=config.request_timeout,
            wind_down=WIND_DOWN,
        )
        self.table = HoldTable(settings, self.sealer)
        self.entries: dict[hold.CallKey, HeldEntry] = {}
        self._keys = itertools.count(1)
        self.timers = EngineTimers(self._timer_fired)
        self.consumed = ConsumedStates(REPLAY_STATES_REMEMBERED)

    def start(self, tg: TaskGroup) -> None:
        self._tg = tg
        tg.start_soon(self.timers.run, tg)

    @property
    def held(self) -> dict[str, HeldEntry]:
        """The parked calls, by handle."""
        return {h: self.entries[k] for h, k in self.table.parked.items() if k in self.entries}

    @property
    def rounds(self) -> int:
        return self.table.rounds

    # -- which calls the bridge takes ------------------------------------------------
    @staticmethod
    def takes(decision: Forward, msg: wire.Message) -> bool:
        """Calls of MRTR methods from a client that can be asked for input, and
        retries (which carry requestState)."""
        if decision.method not in era.MRTR_METHODS:
            return False
        params = msg.get("params") or {}
        return mrtr_shapes.is_retry(params) or bool(
            era.CLIENT_FEATURES & decision.client_capabilities.keys()
        )

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
        upstream_params = mrtr_shapes.without_retry_params(decision.params)
        decision = Forward(
            decision.method,
            upstream_params,
            decision.shape,
            decision.client_era,
            decision.client_capabilities,
            decision.log_level,
        )
        if mrtr_shapes.is_retry(params):
            return await self._retry(link, msg, decision, session)
        if self._replay_mode(decision):
            call = self._new_call(link, msg, decision, replay={}, replay_round=0)
        else:
            call = self._new_call(link, msg, decision)
        return await self._run(msg_id, call, link, decision, session)

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

    # -- carrying out the table's commands -------------------------------------------
    async def _step(self, entry: HeldEntry | None, event: Event) -> wire.Message | None:
        """Tell the table `event`, carry out its commands in order; the client's
        answer if one of them gives it."""
        reply = await self._execute(entry, self.table.handle(event))
        if entry is not None and entry.key not in self.table.calls:
            self.entries.pop(entry.key, None)
        return reply

    async def _execute(self, entry: HeldEntry | None, cmds: list[Command]) -> wire.Message | None:
        reply: wire.Message | None = None
        for cmd in cmds:
            if isinstance(cmd, hold.ReplyToClient):
                reply = cmd.reply
            elif isinstance(cmd, Log):
                getattr(log, cmd.level)(cmd.message, **cmd.fields)
            elif isinstance(cmd, StartTimer):
                self.timers.start(cmd.timer, cmd.deadline)
            elif isinstance(cmd, CancelTimer):
                self.timers.cancel(cmd.timer)
            else:
                assert entry is not None, f"{cmd!r} names a call the runtime does not have"
                reply = await self._execute_for(entry, cmd) or reply
        return reply

    async def _execute_for(self, entry: HeldEntry, cmd: Command) -> wire.Message | None:
        if isinstance(cmd, hold.AnswerServer):
            await entry.session.respond(cmd.reply)
        elif isinstance(cmd, hold.RefuseServerAsks):
            await self._refuse(entry, cmd.replies)
        elif isinstance(cmd, hold.ReleaseSession):
            entry.session.lease.release_exclusive(entry)
        elif isinstance(cmd, hold.Wake):
            entry.changed.set()
        elif isinstance(cmd, hold.CancelUpstream):
            entry.runner.cancel()
        elif isinstance(cmd, hold.StartUpstream):
            assert self._tg is not None
            self._tg.start_soon(self._run_upstream, entry)
        elif isinstance(cmd, hold.GiveUpSession):
            if entry.acquiring is not None:
                entry.acquiring.cancel()
        elif isinstance(cmd, hold.AcquireSession):
            return await self._acquire(entry, cmd.client_id)
        elif isinstance(cmd, hold.AwaitOutcome):
            return await self._await_outcome(entry, cmd.client_id)
        elif isinstance(cmd, hold.ShapeReply):
            return self._shape(entry.decision, cmd.reply, cmd.client_id, entry.session)
        else:
            raise TypeError(f"not a command of the hold machine: {cmd!r}")
        return None

    async def _timer_fired(self, timer: Hashable) -> None:
        assert isinstance(timer, Timer)
        await self._step(self.entries.get(timer.key), TimerFired(timer, anyio.current_time()))

    def fire_timer(self, timer: Timer) -> None:
        """Let a running timer fire now (tests fire the state_ttl this way)."""
        self.timers.fire_now(timer)

    async def _acquire(self, entry: HeldEntry, client_id: wire.RequestId) -> wire.Message | None:
        scope = entry.acquiring = anyio.CancelScope()  # cancelled by GiveUpSession
        try:
            with scope:
                await entry.session.lease.acquire_exclusive(entry)
        finally:
            entry.acquiring = None
        if scope.cancelled_caught:
            busy = hold.SessionBusy(entry.key, client_id, anyio.current_time())
            return await self._step(entry, busy)
        acquired = hold.SessionAcquired(entry.key, client_id, anyio.current_time())
        return await self._step(entry, acquired)

    async def _refuse(self, entry: HeldEntry, refusals: tuple[wire.Message, ...]) -> None:
        # respond() itself drops an answer to a server that went away.
        with anyio.CancelScope(shield=True), anyio.move_on_after(1):
            for reply in refusals:
                await entry.session.respond(reply)

    # -- a run of the upstream call -----------------------------------------------
    async def _run(
        self,
        msg_id: wire.RequestId,
        call: core.HeldCall,
        link: ClientLink,
        decision: Forward,
        session: UpstreamSession,
    ) -> wire.Message:
        entry = HeldEntry(next(self._keys), call, link, decision, session)
        self.entries[entry.key] = entry
        try:
            arrived = hold.CallArrived(entry.key, msg_id, call, anyio.current_time())
            reply = await self._step(entry, arrived)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                gone = hold.ClientGone(entry.key, "cancelled by the client", anyio.current_time())
                await self._step(entry, gone)
            raise
        assert reply is not None, "the hold machine answers every call"
        return reply

    async def _run_upstream(self, entry: HeldEntry) -> None:
        # A parked call may wait for its client for state_ttl per round; this is
        # the hard ceiling on the whole upstream call.
        ceiling = self.config.request_timeout + self.config.state_ttl * self.config.max_rounds
        reply: wire.Message | None = None
        failed = False
        try:
            with entry.runner:
                try:
                    reply = await self._forward(entry.link, entry.decision, entry.session, ceiling)
                except UpstreamError as exc:
                    reply = failure_reply(exc)
                    failed = True
        finally:
            entry.finished.set()
            await self._step(entry, hold.UpstreamEnded(entry.key, reply, failed))

    async def _await_outcome(
        self, entry: HeldEntry, client_id: wire.RequestId
    ) -> wire.Message | None:
        """Wait for the call's result or its next input requests, or for its
        OutcomeDue timer."""
        key = entry.key
        while not self.table.ready(key) and not self.table.overdue(key):  # each pass waits
            await entry.changed.wait()  # for a Wake: an ask, the end, or the timer
            entry.changed = anyio.Event()
        if not self.table.finished(key) and not self.table.overdue(key):
            await self._gather_more(key)
        if self.table.overdue(key):
            return await self._step(entry, hold.WaitTimedOut(key, client_id, anyio.current_time()))
        gathered = hold.InputGathered(
            key, client_id, anyio.current_time(), _now_ms(), secrets.token_urlsafe(12)
        )
        return await self._step(entry, gathered)

    async def _gather_more(self, key: hold.CallKey) -> None:
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
        while (
            count != self.table.pending_asks(key)
            and not self.table.finished(key)
            and not self.table.overdue(key)
        ):
            count = self.table.pending_asks(key)
            await anyio.sleep(window)

    # -- server requests during a bridged call ------------------------------------
    async def on_server_request(self, entry: HeldEntry, msg: wire.Message) -> None:
        """A legacy server's request while `entry` holds its session."""
        await self._step(entry, hold.ServerAsked(entry.key, msg, anyio.current_time()))

    def on_server_cancel(self, entry: HeldEntry, upstream_id: object) -> None:
        if wire.is_request_id(upstream_id):
            self.table.handle(hold.ServerCancelledAsk(entry.key, upstream_id))  # type: ignore[arg-type]

    # -- the client's retry ------------------------------------------------------------
    async def _retry(
        self, link: ClientLink, msg: wire.Message, decision: Forward, session: UpstreamSession
    ) -> wire.Message:
        msg_id = msg["id"]
        params = msg.get("params") or {}
        try:
            claims = self.sealer.open(
                params.get(mrtr_shapes.REQUEST_STATE),
                principal=link.principal,
                method=decision.method,
                digest=params_digest(params),
                now_ms=_now_ms(),
            )
        except StateRejected as exc:
            log.info("retry rejected", why=str(exc))
            return replies.invalid(msg_id, str(exc))
        if claims.resend:
            refusal = core.url_refusal(params.get(mrtr_shapes.INPUT_RESPONSES))
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
            return await self._run(msg_id, fresh, link, decision, session)
        if claims.handle is None:
            try:
                answers = core.merge_replay_answers(claims, params.get(mrtr_shapes.INPUT_RESPONSES))
            except StateRejected as exc:
                return replies.invalid(msg_id, str(exc))
            used = self._consume(msg_id, claims)
            if used is not None:
                return used
            call = self._new_call(link, msg, decision, replay=answers, replay_round=claims.round)
            return await self._run(msg_id, call, link, decision, session)
        key = self.table.parked.get(claims.handle)
        entry = self.entries.get(key) if key is not None else None
        arrived = hold.RetryArrived(
            msg_id, claims, params.get(mrtr_shapes.INPUT_RESPONSES), anyio.current_time()
        )
        cmds = self.table.handle(arrived)
        taken = any(isinstance(c, hold.AcquireSession | hold.AwaitOutcome) for c in cmds)
        if entry is None or not taken:
            reply = await self._execute(entry, cmds)
        else:
            entry.link = link
            try:
                reply = await self._execute(entry, cmds)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    gone = hold.ClientGone(
                        entry.key, "the retry was cancelled", anyio.current_time()
                    )
                    await self._step(entry, gone)
                raise
        if entry is not None and entry.key not in self.table.calls:
            self.entries.pop(entry.key, None)
        assert reply is not None, "the hold machine answers every retry"
        return reply

    def _consume(self, msg_id: wire.RequestId, claims: core.Claims) -> wire.Message | None:
        """Spend a state whose retry re-runs the call: None if it may run, else
        the client's answer. Checked last, so a retry refused for another
        reason leaves the state usable."""
        try:
            self.consumed.consume(claims, _now_ms())
        except StateRejected as exc:
            log.info("retry rejected", why=str(exc))
            return replies.invalid(msg_id, str(exc))
        except ConsumedStates.Full as exc:
            log.info("retry refused", why=str(exc))
            return wire.gateway_error(
                msg_id,
                wire.INTERNAL_ERROR,
                f"Too many re-run requestStates in use ({exc}); retry later",
                reason="replay-limit",
            )
        return None
