"""Where a bridged call waits for its client's retry, and how a call ends early
(2026-07-28 basic/patterns/mrtr; DESIGN §5.1.6-5.1.7; issue #11 item 1).

`CallBook` keeps every bridged call's `Hold`, and the calls parked for a
retry by handle. A parked call gives its session back and runs an Expiry
timer (state_ttl). A call closed early (expired, cancelled by its client,
timed out, re-run in replay mode) first has its server's pending requests
refused, and is cancelled upstream only if it still runs when its WindDown
timer fires. The hold machine (core/mrtr_hold.py) takes these steps; each
returns the commands to carry out, in order.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from gateway import wire
from gateway.core import held_call
from gateway.core import mrtr_bridge as core
from gateway.core import mrtr_hold_replies as replies
from gateway.core.engine import CancelTimer, Command, Log, StartTimer
from gateway.core.fair_share import Share, ShareCount
from gateway.core.mrtr_hold_events import (
    CallKey,
    CancelUpstream,
    Expiry,
    RefuseServerAsks,
    ReleaseSession,
    WindDown,
)
from gateway.core.request_state import Claims


@dataclass(frozen=True, slots=True)
class HoldSettings:
    state_ttl: float
    max_parked_calls: int
    request_timeout: float
    # How long a closed call's server may take to end it by itself before it
    # is cancelled (see upstream_session.WIND_DOWN).
    wind_down: float
    # Server requests one bridged call may have waiting for its client at once.
    max_asks: int = 64
    # Honoured re-run states (replay, -32042 re-send) remembered until they
    # expire, so that each runs the call once: about 100 bytes each.
    rerun_states: int = 100_000
    # Parked calls one principal may hold (0: fair_share.default_share).
    max_parked_per_principal: int = 0

    @property
    def parked_share(self) -> Share:
        return Share.of(self.max_parked_calls, self.max_parked_per_principal)


@dataclass(eq=False, slots=True)
class Hold:
    """One bridged call's state."""

    key: CallKey
    call: held_call.HeldCall
    started: bool = False  # the upstream call runs (or ran)
    waiting: bool = False  # a client request waits for its outcome
    busy: bool = False  # a retry is in progress
    closed: bool = False
    finished: bool = False  # the upstream call returned
    cancel_sent: bool = False
    wind_down: bool = False  # the WindDown timer runs
    overdue: bool = False  # the waiting client request's OutcomeDue timer fired
    acquiring: bool = False  # waiting for the session (its SessionDue timer runs)
    missing: core.MissingCapability | None = None
    reply: wire.Message | None = None
    retry: tuple[Claims, object] | None = None


class CallBook:
    """Every bridged call of one gateway, and which of them are parked."""

    def __init__(self, settings: HoldSettings) -> None:
        self.settings = settings
        self.calls: dict[CallKey, Hold] = {}
        # Parked calls by handle: the ones a retry can continue.
        self.parked: dict[str, CallKey] = {}
        # Parked calls whose upstream failed: their slot is free, and their
        # retry gets this failure (oldest dropped first).
        self.failed: OrderedDict[str, wire.Message] = OrderedDict()
        # What each principal has parked: a share of max_parked_calls.
        self.shares = ShareCount(settings.parked_share)

    # -- what the runtime's waits ask ------------------------------------------
    def ready(self, key: CallKey) -> bool:
        """The call ended or has input requests for its client."""
        hold = self.calls.get(key)
        return hold is None or hold.finished or bool(hold.call.asks)

    def pending_asks(self, key: CallKey) -> int:
        hold = self.calls.get(key)
        return len(hold.call.asks) if hold is not None else 0

    def overdue(self, key: CallKey) -> bool:
        """The waiting client request has waited request_timeout."""
        hold = self.calls.get(key)
        return hold is not None and hold.overdue

    def finished(self, key: CallKey) -> bool:
        hold = self.calls.get(key)
        return hold is None or hold.finished

    # -- parking ---------------------------------------------------------------------
    def is_parked(self, hold: Hold) -> bool:
        """Parked for its client's retry, and no retry is in progress."""
        handle = hold.call.handle
        return handle is not None and self.parked.get(handle) == hold.key and not hold.busy

    def park(self, hold: Hold, now: float) -> list[Command]:
        handle = hold.call.handle
        assert handle is not None
        if self.parked.get(handle) != hold.key:  # parked again after a round: counted once
            self.parked[handle] = hold.key
            self.shares.take(hold.call.principal)
        # While the client gathers input the server waits on us, so nothing on
        # the wire can be this call's: the session is free for other calls
        # until the retry takes it back (a client that never retries must not
        # block everyone until the state expires).
        return [
            ReleaseSession(hold.key),
            StartTimer(Expiry(hold.key), now + self.settings.state_ttl),
        ]

    def forget(self, hold: Hold) -> list[Command]:
        """No retry can continue the call any more."""
        handle = hold.call.handle
        if handle is not None and self.parked.get(handle) == hold.key:
            del self.parked[handle]
            self.shares.release(hold.call.principal)
            return [CancelTimer(Expiry(hold.key))]
        return []

    def fail_parked(self, hold: Hold, failure: wire.Message) -> list[Command]:
        """A parked call's upstream failed. Nobody waits on it and it cannot be
        continued: its slot is free now, not when its state expires, and its
        retry still hears why."""
        handle = hold.call.handle
        assert handle is not None
        self.failed[handle] = failure
        while len(self.failed) > self.settings.max_parked_calls:  # bounded like the slots
            self.failed.popitem(last=False)
        return self.forget(hold)

    def settle(self, hold: Hold) -> None:
        """Drop a call nothing can reach any more."""
        handle = hold.call.handle
        reachable = handle is not None and self.parked.get(handle) == hold.key
        if hold.finished and not reachable and not hold.waiting and not hold.busy:
            self.calls.pop(hold.key, None)

    # -- ending a call early -------------------------------------------------------
    def close(self, hold: Hold, reason: str, now: float) -> list[Command]:
        """End a bridged call early: refuse its pending asks, and cancel it
        upstream if the server does not end it by itself within the wind-down.

        The order matters to real servers (see upstream_session.WIND_DOWN): the
        server first hears that no answer will come, which ends a tool that
        only waited for one, and only a call still running after that gets
        `notifications/cancelled`, after which nothing more is sent for it.
        """
        if hold.closed:
            return []
        hold.closed = True
        cmds: list[Command] = [
            Log("bridged call closed", fields={"reason": reason, "handle": hold.call.handle}),
            *self.forget(hold),
            *self.refuse_asks(hold, reason),
        ]
        if not hold.finished:
            cmds += self.start_wind_down(hold, now)
        return cmds

    def start_wind_down(self, hold: Hold, now: float) -> list[Command]:
        if hold.wind_down or hold.finished:
            return []
        hold.wind_down = True
        return [StartTimer(WindDown(hold.key), now + self.settings.wind_down)]

    def stop_wind_down(self, hold: Hold) -> list[Command]:
        """The call ended by itself: nothing to cancel."""
        if not hold.wind_down:
            return []
        hold.wind_down = False
        return [CancelTimer(WindDown(hold.key))]

    def refuse_asks(self, hold: Hold, reason: str) -> list[Command]:
        asks = list(hold.call.asks.values())
        hold.call.asks.clear()
        if not asks:
            return []
        refusals = tuple(replies.no_client_answer(a.upstream_id, reason) for a in asks)
        return [RefuseServerAsks(hold.key, refusals)]

    # -- its timers ----------------------------------------------------------------
    def expiry_fired(self, hold: Hold, now: float) -> list[Command]:
        if not self.is_parked(hold):
            return []  # retried or forgotten while the timer fired
        cmds = self.close(hold, "expired: the client never retried", now)
        self.settle(hold)
        return cmds

    def wind_down_fired(self, hold: Hold) -> list[Command]:
        if not hold.wind_down:
            return []
        hold.wind_down = False
        if hold.finished:
            return []
        hold.cancel_sent = True
        return [CancelUpstream(hold.key)]
