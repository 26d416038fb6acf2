"""The lifecycle of a bridged call in hold mode, as a state machine
(2026-07-28 basic/patterns/mrtr; DESIGN §5.1.6-5.1.7; issue #11 item 1).

A modern client's call on a legacy session runs upstream while the legacy
server may ask for sampling, elicitation or roots. Those requests become an
`input_required` answer, and the upstream call stays parked until the
client's retry brings the answers, or until its state expires (a timer) and
the call is closed: its pending requests refused, and the call cancelled
upstream if the server does not end it within the wind-down.

`HoldTable` answers each event with the commands to carry out, in order:
the call's way through the session, the server's requests, the answer to the
waiting client and the retry. Each call's state is plain data: rounds and
asks in `HeldCall`, the rest in `mrtr_parking.Hold`; parking, expiry and
closing are `mrtr_parking.CallBook`'s, and which retries get through (the
requestState opened, re-run states spent once) `mrtr_retry_door`'s. The
runtime (runtime/mrtr_bridge.py, held_call_runner.py) does the waiting: for
the session, the call's next input requests or end, and timers. Replay mode
and the -32042 re-send use it too: their calls are closed instead of parked.
"""

from __future__ import annotations

from gateway import wire
from gateway.core import held_call, mrtr_retry_door
from gateway.core import mrtr_bridge as core
from gateway.core import mrtr_hold_replies as replies
from gateway.core.engine import CancelTimer, Command, Event, Log, StartTimer, TimerFired
from gateway.core.fair_share import POOL_FULL, SHARE_FULL, ShareCount
from gateway.core.mrtr_hold_events import (
    AcquireSession,
    AnswerServer,
    AwaitOutcome,
    CallArrived,
    CallKey,
    ClientGone,
    Expiry,
    GiveUpSession,
    InputGathered,
    OutcomeDue,
    ReleaseSession,
    ReplyToClient,
    RetryArrived,
    RetryPresented,
    ServerAsked,
    ServerCancelledAsk,
    SessionAcquired,
    SessionBusy,
    SessionDue,
    ShapeReply,
    StartUpstream,
    UpstreamEnded,
    WaitTimedOut,
    Wake,
    WindDown,
)
from gateway.core.mrtr_parking import CallBook, Hold, HoldSettings
from gateway.core.request_state import ConsumedStates, Sealer, StateRejected


class HoldTable:
    """Every bridged call of one gateway, parked or running."""

    def __init__(self, settings: HoldSettings, sealer: Sealer) -> None:
        self.settings = settings
        self.sealer = sealer
        self.book = CallBook(settings)
        self.spent = ConsumedStates(settings.rerun_states)  # re-run states honoured
        self.rounds = 0  # input_required answers given

    @property
    def calls(self) -> dict[CallKey, Hold]:
        return self.book.calls

    @property
    def parked(self) -> dict[str, CallKey]:
        """Parked calls by handle: the ones a retry can continue."""
        return self.book.parked

    @property
    def shares(self) -> ShareCount:
        """What each principal has parked."""
        return self.book.shares

    # -- events -----------------------------------------------------------------
    def handle(self, event: Event) -> list[Command]:  # noqa: PLR0911 - the dispatch on the event's type
        # Dispatch on the event's type; each handler returns the commands in order.
        if isinstance(event, TimerFired):
            return self._timer_fired(event)
        if isinstance(event, CallArrived):
            return self._call_arrived(event)
        if isinstance(event, RetryPresented):
            admitted = mrtr_retry_door.admit(event, self.sealer, self.spent)
            return self._retry_arrived(admitted) if isinstance(admitted, RetryArrived) else admitted
        if isinstance(event, RetryArrived):
            return self._retry_arrived(event)
        hold = self._hold_of(event)
        if hold is None:
            return self._unknown(event)
        if isinstance(event, SessionAcquired):
            return self._session_acquired(hold, event)
        if isinstance(event, SessionBusy):
            return self._session_busy(hold, event)
        if isinstance(event, ServerAsked):
            return self._server_asked(hold, event)
        if isinstance(event, ServerCancelledAsk):
            hold.call.drop_ask(event.upstream_id)
            return []
        if isinstance(event, UpstreamEnded):
            return self._upstream_ended(hold, event)
        if isinstance(event, InputGathered):
            return self._input_gathered(hold, event)
        if isinstance(event, WaitTimedOut):
            return self._wait_timed_out(hold, event)
        if isinstance(event, ClientGone):
            return self._client_gone(hold, event)
        raise TypeError(f"not an event of the hold machine: {event!r}")

    def _hold_of(self, event: Event) -> Hold | None:
        key = getattr(event, "key", None)
        return self.calls.get(key) if isinstance(key, int) else None

    def _unknown(self, event: Event) -> list[Command]:
        """An event for a call the table no longer has: it ended."""
        if isinstance(event, ServerAsked):
            ended = replies.no_client_answer(event.request["id"], "the call has ended")
            return [AnswerServer(event.key, ended)]
        return []

    def _call_arrived(self, event: CallArrived) -> list[Command]:
        # Checked as a call arrives: what one principal may park past its
        # share is its calls in flight at that moment (a bound of their own).
        refusal = self.shares.refusal(event.call.principal)
        if refusal is not None:
            share = self.settings.parked_share
            full = Log(
                SHARE_FULL if refusal == "share" else POOL_FULL,
                level="warning",
                fields={
                    "pool": "parked calls",
                    "principal": event.call.principal,
                    "limit": share.total,
                    "share": share.per_principal,
                },
                rate_limited=True,
            )
            return [full, ReplyToClient(replies.parked_limit(event.client_id, share, refusal))]
        hold = self.calls[event.key] = Hold(event.key, event.call)
        return self._acquire(hold, event.client_id, event.now)

    def _acquire(self, hold: Hold, client_id: wire.RequestId, now: float) -> list[Command]:
        hold.acquiring = True
        due = StartTimer(SessionDue(hold.key), now + self.settings.request_timeout)
        return [due, AcquireSession(hold.key, client_id)]

    def _stop_acquiring(self, hold: Hold) -> list[Command]:
        was_acquiring = hold.acquiring
        hold.acquiring = False
        return [CancelTimer(SessionDue(hold.key))] if was_acquiring else []

    def _session_acquired(self, hold: Hold, event: SessionAcquired) -> list[Command]:
        cmds = self._stop_acquiring(hold)
        if not hold.started:
            hold.started = True
            return [*cmds, StartUpstream(hold.key), *self._await(hold, event.client_id, event.now)]
        if hold.finished:
            # The call ended upstream while its retry waited for the session:
            # nothing on the wire is this call's any more, so the session goes
            # straight back (nothing else would ever release it).
            cmds.append(ReleaseSession(hold.key))
        return [*cmds, *self._continue(hold, event.client_id, event.now)]

    def _session_busy(self, hold: Hold, event: SessionBusy) -> list[Command]:
        hold.acquiring = False  # its timer fired: that is how it was given up
        if not hold.started:
            del self.calls[hold.key]
            return [ReplyToClient(replies.session_busy(event.client_id, retrying=False))]
        cmds = self.book.park(hold, event.now)
        hold.busy = False
        hold.retry = None
        return [*cmds, ReplyToClient(replies.session_busy(event.client_id, retrying=True))]

    # -- server requests during the call ---------------------------------------
    def _server_asked(self, hold: Hold, event: ServerAsked) -> list[Command]:
        msg = event.request
        if hold.closed or hold.missing is not None or hold.finished:
            # No client will answer any more (the call ended, or is ending,
            # before this request could be served). Once the call is being
            # cancelled upstream the reply is left out: the server drops the
            # request with the call, and a reply racing that teardown is what
            # breaks it.
            ended = replies.no_client_answer(msg["id"], "the call has ended")
            return [] if hold.cancel_sent else [AnswerServer(hold.key, ended)]
        limit = self.settings.max_asks
        if len(hold.call.asks) >= limit:
            # One input_required carries them all: a server that asks without
            # end must not grow it without end.
            return [AnswerServer(hold.key, replies.too_many_asks(msg["id"], limit))]
        outcome = hold.call.add_ask(msg)
        if isinstance(outcome, core.Prefilled):
            return [AnswerServer(hold.key, wire.result_response(msg["id"], outcome.result))]
        if isinstance(outcome, core.MissingCapability):
            # The call needs what the client never declared: a modern server
            # would have answered -32021, so the client hears that, and the
            # legacy server's call is cancelled.
            hold.missing = outcome
            return [
                Log("call needs an undeclared client capability", fields={"why": outcome.reason}),
                AnswerServer(hold.key, replies.undeclared(msg["id"], outcome.reason)),
                *self.book.start_wind_down(hold, event.now),
            ]
        if isinstance(outcome, str):
            why = {"method": msg["method"], "why": outcome}
            return [
                Log("server request the client cannot take refused", fields=why),
                AnswerServer(hold.key, replies.cannot_take(msg, outcome)),
            ]
        return [Wake(hold.key)]

    def _upstream_ended(self, hold: Hold, event: UpstreamEnded) -> list[Command]:
        hold.reply = event.reply
        cmds: list[Command] = []
        if event.failed and event.reply is not None and self.book.is_parked(hold):
            cmds += self.book.fail_parked(hold, event.reply)
        hold.finished = True
        cmds += [ReleaseSession(hold.key), Wake(hold.key), *self.book.stop_wind_down(hold)]
        if hold.cancel_sent:
            # The server was told to cancel the call: a reply to one of its
            # requests now could meet the request being torn down (see
            # CallBook.close).
            hold.call.asks.clear()
        else:
            cmds += self.book.refuse_asks(hold, "the call it belonged to has ended")
        self.book.settle(hold)
        return cmds

    # -- answering the waiting client -----------------------------------------
    def _input_gathered(self, hold: Hold, event: InputGathered) -> list[Command]:
        stopped = self._stop_waiting(hold)
        hold.busy = False
        if hold.finished:
            cmds = self.book.forget(hold)
            self.book.settle(hold)
            return [*stopped, *cmds, self._final(hold, event)]
        try:
            result = hold.call.input_required(
                self.sealer,
                now_ms=event.now_ms,
                ttl_ms=int(self.settings.state_ttl * 1000),
                nonce=event.nonce,
            )
        except held_call.TooManyRounds as exc:
            error = replies.too_many_rounds(event.client_id, str(exc))
            return [*stopped, *self.book.close(hold, str(exc), event.now), ReplyToClient(error)]
        self.rounds += 1
        if hold.call.replay:
            # Replay mode keeps nothing: stop the run; the retry starts it afresh.
            cmds = self.book.close(hold, "replay mode: re-run on retry", event.now)
        else:
            cmds = self.book.park(hold, event.now)
        fields = {
            "keys": list(result["inputRequests"]),
            "round": hold.call.round,
            "mode": "replay" if hold.call.replay else "hold",
        }
        return [
            *stopped,
            *cmds,
            Log("asking the client for input", fields=fields),
            ReplyToClient(wire.result_response(event.client_id, result)),
        ]

    def _final(self, hold: Hold, event: InputGathered) -> Command:
        client_id = event.client_id
        if hold.missing is not None:
            return ReplyToClient(hold.missing.error(client_id))
        if hold.reply is None:
            return ReplyToClient(replies.upstream_cancelled(client_id))
        error = hold.reply.get("error")
        if isinstance(error, dict) and error.get("code") == wire.URL_ELICITATION_REQUIRED:
            expires_ms = event.now_ms + int(self.settings.state_ttl * 1000)
            return ReplyToClient(
                replies.url_elicitation_required(
                    client_id,
                    error,
                    hold.call,
                    self.sealer,
                    expires_ms=expires_ms,
                    nonce=event.nonce,
                )
            )
        return ShapeReply(hold.key, client_id, hold.reply)

    def _wait_timed_out(self, hold: Hold, event: WaitTimedOut) -> list[Command]:
        why = "no result and no input request within its time"
        cmds = [*self._stop_waiting(hold), *self.book.close(hold, why, event.now)]
        hold.busy = False
        self.book.settle(hold)
        limit = hold.call.wait_limit or self.settings.request_timeout
        error = replies.upstream_timeout(event.client_id, limit)
        return [*cmds, ReplyToClient(error)]

    def _client_gone(self, hold: Hold, event: ClientGone) -> list[Command]:
        if not hold.started:
            # Gone while waiting for the session: nothing ran.
            del self.calls[hold.key]
            return self._stop_acquiring(hold)
        # The call's work stops, and the session it holds is free again
        # (2026-07-28 "Cancellation").
        cmds = [
            *self._stop_acquiring(hold),
            *self._stop_waiting(hold),
            *self.book.close(hold, event.reason, event.now),
        ]
        hold.busy = False
        hold.retry = None
        self.book.settle(hold)
        return cmds

    # -- the client's retry ------------------------------------------------------
    def _retry_arrived(self, event: RetryArrived) -> list[Command]:
        handle = event.claims.handle
        assert handle is not None, "replay and re-send states run a new call"
        key = self.parked.get(handle)
        hold = self.calls.get(key) if key is not None else None
        failed = self.book.failed.pop(handle, None) if hold is None else None
        if failed is not None:
            return [ReplyToClient({**failed, "id": event.client_id})]
        if hold is None or hold.closed:
            return [ReplyToClient(replies.state_gone(event.client_id))]
        if hold.busy:
            return [ReplyToClient(replies.retry_in_progress(event.client_id))]
        hold.busy = True
        cmds: list[Command] = [CancelTimer(Expiry(hold.key))]
        try:
            # Check before waiting for the session: a bad retry must not queue
            # behind other calls, and must leave the call as it was.
            hold.call.check_retry(event.claims, event.input_responses)
        except StateRejected as exc:
            hold.busy = False
            return [
                *cmds,
                Log("retry rejected", fields={"why": str(exc)}),
                *self.book.park(hold, event.now),  # the call stays parked for a correct retry
                ReplyToClient(replies.invalid(event.client_id, exc)),
            ]
        hold.retry = (event.claims, event.input_responses)
        if hold.finished:
            return [*cmds, *self._continue(hold, event.client_id, event.now)]
        return [*cmds, *self._acquire(hold, event.client_id, event.now)]

    def _continue(self, hold: Hold, client_id: wire.RequestId, now: float) -> list[Command]:
        assert hold.retry is not None
        claims, responses = hold.retry
        hold.retry = None
        outcome = hold.call.accept_retry(claims, responses)
        cmds: list[Command] = [
            AnswerServer(hold.key, wire.result_response(ask.upstream_id, result))
            for ask, result in outcome.answers
        ]
        return [*cmds, *self._await(hold, client_id, now)]

    def _await(self, hold: Hold, client_id: wire.RequestId, now: float) -> list[Command]:
        hold.waiting = True
        limit = hold.call.wait_limit or self.settings.request_timeout
        due = StartTimer(OutcomeDue(hold.key), now + limit)
        return [due, AwaitOutcome(hold.key, client_id)]

    def _stop_waiting(self, hold: Hold) -> list[Command]:
        was_waiting = hold.waiting
        hold.waiting = hold.overdue = False
        return [CancelTimer(OutcomeDue(hold.key))] if was_waiting else []

    # -- timers -----------------------------------------------------------------
    def _timer_fired(self, event: TimerFired) -> list[Command]:
        timer = event.timer
        timers = Expiry | WindDown | OutcomeDue | SessionDue
        hold = self.calls.get(timer.key) if isinstance(timer, timers) else None
        if hold is None:
            return []
        if isinstance(timer, SessionDue):
            return [GiveUpSession(hold.key)] if hold.acquiring else []
        if isinstance(timer, OutcomeDue):
            if not hold.waiting or hold.overdue:
                return []
            hold.overdue = True
            return [Wake(hold.key)]
        if isinstance(timer, Expiry):
            return self.book.expiry_fired(hold, event.now)
        return self.book.wind_down_fired(hold)
