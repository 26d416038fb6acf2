"""The MRTR hold lifecycle as playbooks (2026-07-28 basic/patterns/mrtr; DESIGN
§5.1.6-5.1.8; issue #11 item 1): no sockets, no sleeps, timers fired by the test.
End-to-end wiring stays in test_mrtr_bridge.py."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import wire
from gateway.core import held_call
from gateway.core import mrtr_bridge as core
from gateway.core.engine import CancelTimer, Log, StartTimer, TimerFired
from gateway.core.mrtr_hold import HoldTable
from gateway.core.mrtr_hold_events import (
    AcquireSession,
    AnswerServer,
    AwaitOutcome,
    CallArrived,
    CancelUpstream,
    ClientGone,
    Expiry,
    GiveUpSession,
    InputGathered,
    OutcomeDue,
    RefuseServerAsks,
    ReleaseSession,
    ReplyToClient,
    RerunCall,
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
from gateway.core.mrtr_parking import HoldSettings
from gateway.core.request_state import Claims, Sealer
from tests.playbook import Placeholder, Playbook, later, matching

SEALER = Sealer(b"s" * 32, "gw")


def state_data() -> dict[str, str]:
    """A refused retry's `data`: the gateway's own error, with a reason."""
    return {"source": wire.GATEWAY_SOURCE, "reason": matching("^[a-z-]+$")}


TTL = 60.0
WIND = 1.0
RT = 30.0  # request_timeout
NOW_MS = 1_000_000
ALL: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}}
ELICIT = {"message": "name?", "requestedSchema": {}}
ASK_NAME = wire.request("srv-1", "elicitation/create", ELICIT)
ASK_ROOTS = wire.request("srv-2", "roots/list")
RESULT = wire.result_response(0, {"content": [{"type": "text", "text": "Hello, Ada"}]})


def table(**settings: Any) -> HoldTable:
    base: dict[str, Any] = {
        "state_ttl": TTL,
        "max_parked_calls": 8,
        "request_timeout": 30.0,
        "wind_down": WIND,
    }
    return HoldTable(HoldSettings(**{**base, **settings}), SEALER)


def held(
    caps: dict[str, Any] | None = None,
    rounds: int = 5,
    replay: bool = False,
    handle: str = "h",
    principal: str = "p",
) -> held_call.HeldCall:
    return held_call.HeldCall(
        handle=None if replay else handle,
        principal=principal,
        method="tools/call",
        digest="d",
        client_caps=ALL if caps is None else caps,
        max_rounds=rounds,
        replay_answers={} if replay else None,
    )


def opened(state: Placeholder[str]) -> Claims:
    token = state()
    return SEALER.open(token, principal="p", method="tools/call", digest="d", now_ms=NOW_MS)


def input_required(client_id: int, inputs: dict[str, Any], state: str) -> wire.Message:
    result = {"resultType": "input_required", "inputRequests": inputs, "requestState": state}
    return wire.result_response(client_id, result)


def asked(*requests: wire.Message) -> dict[str, Any]:
    return {
        f"input-{n}": {"method": r["method"], "params": r.get("params", {})}
        for n, r in enumerate(requests, start=1)
    }


def gathered(client_id: int, now: float = 10.0) -> InputGathered:
    return InputGathered(1, client_id, now, NOW_MS, f"nonce-{client_id}")


def retry(client_id: int, state: Placeholder[str], responses: object) -> RetryArrived:
    return RetryArrived(client_id, later(lambda: opened(state)), responses, 20.0)


def running(
    t: HoldTable,
    client_id: int = 1,
    caps: dict[str, Any] | None = None,
    call: held_call.HeldCall | None = None,
    *,
    logs: bool = False,
) -> Playbook:
    """A call that holds the session and runs upstream; its client waits."""
    call = held(caps=caps) if call is None else call
    playbook = Playbook(t, logs=logs) >> CallArrived(1, client_id, call, 0.0)
    playbook << StartTimer(SessionDue(1), 0.0 + RT) << AcquireSession(1, client_id)
    playbook >> SessionAcquired(1, client_id, 2.0) << CancelTimer(SessionDue(1))
    playbook << StartUpstream(1)
    playbook << StartTimer(OutcomeDue(1), 2.0 + RT) << AwaitOutcome(1, client_id)
    assert playbook
    return playbook


def parked(t: HoldTable, *requests: wire.Message) -> tuple[Playbook, Placeholder[str]]:
    """A call that asked for `requests` and is parked for its client's retry."""
    state = Placeholder(str)
    playbook = running(t)
    for request in requests:
        playbook >> ServerAsked(1, request, 5.0) << Wake(1)
    playbook >> gathered(1) << CancelTimer(OutcomeDue(1))
    playbook << ReleaseSession(1) << StartTimer(Expiry(1), 10.0 + TTL)
    playbook << ReplyToClient(input_required(1, asked(*requests), state.match))
    assert playbook
    return playbook, state


def accept(name: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"name": name}}


def test_a_parked_call_is_continued_by_its_retry() -> None:
    """MRTR "Ephemeral Workflow": the input_required answer carries the
    server's request under a gateway key, the retry's answer goes to the
    parked upstream call (never re-sent), and the final reply carries the
    retry's id. Presented again once the call has answered, the state is
    -32602 ("gone") and nothing reaches the server (moved from
    test_mrtr_bridge.py::test_bad_retries_are_rejected_and_leave_the_call_intact)."""
    t = table()
    playbook, state = parked(t, ASK_NAME)
    assert t.parked == {"h": 1}
    assert (
        playbook
        >> retry(2, state, {"input-1": accept("Ada")})
        << CancelTimer(Expiry(1))
        << StartTimer(SessionDue(1), 20.0 + RT)
        << AcquireSession(1, 2)
        >> SessionAcquired(1, 2, 2.0)
        << CancelTimer(SessionDue(1))
        << AnswerServer(1, wire.result_response("srv-1", accept("Ada")))
        << StartTimer(OutcomeDue(1), 2.0 + RT)
        << AwaitOutcome(1, 2)
        >> UpstreamEnded(1, RESULT)
        << ReleaseSession(1)
        << Wake(1)
        >> gathered(2)
        << CancelTimer(OutcomeDue(1))
        << CancelTimer(Expiry(1))
        << ShapeReply(1, 2, RESULT)
    )
    assert not t.parked and not t.calls and t.rounds == 1
    assert (
        playbook
        >> retry(3, state, {"input-1": accept("Ada")})
        << ReplyToClient(
            wire.error_response(3, wire.INVALID_PARAMS, matching("gone"), state_data())
        )
    )


def test_requests_sent_together_go_out_in_one_input_required() -> None:
    parked(table(), ASK_NAME, ASK_ROOTS)


def test_missing_answers_are_asked_again_and_rounds_count() -> None:
    """MRTR "Error Handling": what was not answered is asked again; keys
    that were never asked are ignored. Each input_required is a round of its
    own, a request the server makes after an answer goes out under the next
    key, and every answer reaches the server as the client gave it (moved from
    test_mrtr_bridge.py::test_several_rounds_missing_and_extra_responses)."""
    t = table()
    playbook, state = parked(t, ASK_NAME)
    again = Placeholder(str)
    assert (
        playbook
        >> retry(2, state, {"bogus": {"x": 1}})
        << CancelTimer(Expiry(1))
        << StartTimer(SessionDue(1), 20.0 + RT)
        << AcquireSession(1, 2)
        >> SessionAcquired(1, 2, 2.0)
        << CancelTimer(SessionDue(1))
        << StartTimer(OutcomeDue(1), 2.0 + RT)
        << AwaitOutcome(1, 2)
        >> gathered(2, now=30.0)
        << CancelTimer(OutcomeDue(1))
        << ReleaseSession(1)
        << StartTimer(Expiry(1), 30.0 + TTL)
        << ReplyToClient(input_required(2, asked(ASK_NAME), again.match))
    )
    assert opened(again).round == 2 and t.rounds == 2
    third = Placeholder(str)
    roots = {"roots": [{"uri": "file:///w"}]}
    assert (
        playbook
        >> retry(3, again, {"input-1": accept("Cy")})
        << CancelTimer(Expiry(1))
        << StartTimer(SessionDue(1), 20.0 + RT)
        << AcquireSession(1, 3)
        >> SessionAcquired(1, 3, 31.0)
        << CancelTimer(SessionDue(1))
        << AnswerServer(1, wire.result_response("srv-1", accept("Cy")))
        << StartTimer(OutcomeDue(1), 31.0 + RT)
        << AwaitOutcome(1, 3)
        >> ServerAsked(1, ASK_ROOTS, 32.0)
        << Wake(1)
        >> gathered(3, now=33.0)
        << CancelTimer(OutcomeDue(1))
        << ReleaseSession(1)
        << StartTimer(Expiry(1), 33.0 + TTL)
        << ReplyToClient(
            input_required(3, {"input-2": asked(ASK_NAME, ASK_ROOTS)["input-2"]}, third.match)
        )
        >> retry(4, third, {"input-2": roots})
        << CancelTimer(Expiry(1))
        << StartTimer(SessionDue(1), 20.0 + RT)
        << AcquireSession(1, 4)
        >> SessionAcquired(1, 4, 34.0)
        << CancelTimer(SessionDue(1))
        << AnswerServer(1, wire.result_response("srv-2", roots))
        << StartTimer(OutcomeDue(1), 34.0 + RT)
        << AwaitOutcome(1, 4)
        >> UpstreamEnded(1, RESULT)
        << ReleaseSession(1)
        << Wake(1)
        >> gathered(4, now=35.0)
        << CancelTimer(OutcomeDue(1))
        << CancelTimer(Expiry(1))
        << ShapeReply(1, 4, RESULT)
    )
    assert opened(third).round == 3 and t.rounds == 3 and not t.calls


def test_bad_retries_are_rejected_and_leave_the_call_parked() -> None:
    """A stale state or a malformed answer is -32602, nothing reaches the
    server, and the call stays parked for a correct retry."""
    t = table()
    playbook, state = parked(t, ASK_NAME)
    repark = [ReleaseSession(1), StartTimer(Expiry(1), 20.0 + TTL)]
    playbook >> retry(2, state, {"input-1": {"action": "perhaps"}}) << CancelTimer(Expiry(1))
    for cmd in repark:
        playbook << cmd
    playbook << ReplyToClient(
        wire.error_response(
            2, wire.INVALID_PARAMS, matching("inputResponses.*action"), state_data()
        )
    )
    playbook >> retry(3, state, ["not", "an", "object"]) << CancelTimer(Expiry(1))
    for cmd in repark:
        playbook << cmd
    playbook << ReplyToClient(
        wire.error_response(3, wire.INVALID_PARAMS, matching("must be an object"), state_data())
    )
    assert playbook
    assert (
        playbook
        >> retry(4, state, {"input-1": accept("Di")})
        << CancelTimer(Expiry(1))
        << StartTimer(SessionDue(1), 20.0 + RT)
        << AcquireSession(1, 4)
    )
    # A second retry while this one waits for the session.
    assert (
        playbook
        >> retry(5, state, {"input-1": accept("Di")})
        << ReplyToClient(
            wire.error_response(5, wire.INVALID_PARAMS, matching("in progress"), state_data())
        )
    )


def test_a_state_already_used_is_rejected() -> None:
    t = table()
    playbook, state = parked(t, ASK_NAME, ASK_ROOTS)
    assert (
        playbook
        >> retry(2, state, {"input-1": accept("Cy")})
        << CancelTimer(Expiry(1))
        << StartTimer(SessionDue(1), 20.0 + RT)
        << AcquireSession(1, 2)
        >> SessionAcquired(1, 2, 2.0)
        << CancelTimer(SessionDue(1))
        << AnswerServer(1, wire.result_response("srv-1", accept("Cy")))
        << StartTimer(OutcomeDue(1), 2.0 + RT)
        << AwaitOutcome(1, 2)
        >> gathered(2, now=30.0)
        << CancelTimer(OutcomeDue(1))
        << ReleaseSession(1)
        << StartTimer(Expiry(1), 30.0 + TTL)
        << ReplyToClient(
            input_required(2, {"input-2": asked(ASK_NAME, ASK_ROOTS)["input-2"]}, matching(""))
        )
        >> retry(3, state, {"input-2": {"roots": []}})
        << CancelTimer(Expiry(1))
        << ReleaseSession(1)
        << StartTimer(Expiry(1), 20.0 + TTL)
        << ReplyToClient(
            wire.error_response(3, wire.INVALID_PARAMS, matching("already used"), state_data())
        )
    )


def test_expiry_refuses_the_servers_requests_and_waits_before_cancelling() -> None:
    """Issue defect "100 parked MRTR calls expiring at once kill the mcp 1.30
    upstream": on expiry the server first hears that no answer will come; a
    server that then ends the call is not also sent a cancellation."""
    t = table()
    playbook, state = parked(t, ASK_NAME)
    refusal = wire.error_response(
        "srv-1", wire.INTERNAL_ERROR, "No client answer: expired: the client never retried"
    )
    assert (
        playbook
        >> TimerFired(Expiry(1), 70.0)
        << CancelTimer(Expiry(1))
        << RefuseServerAsks(1, (refusal,))
        << StartTimer(WindDown(1), 70.0 + WIND)
        >> UpstreamEnded(1, RESULT)
        << ReleaseSession(1)
        << Wake(1)
        << CancelTimer(WindDown(1))
        >> retry(2, state, {"input-1": accept("Z")})
        << ReplyToClient(
            wire.error_response(2, wire.INVALID_PARAMS, matching("gone"), state_data())
        )
    )
    assert not t.calls and not t.parked


def test_a_call_still_running_after_the_wind_down_is_cancelled_and_hears_nothing_more() -> None:
    """The refusal first, the cancellation after WIND_DOWN, and nothing for the
    call after the cancellation (not even a refusal of a late request): the
    issue's "100 parked MRTR calls expiring at once" (moved from
    test_mrtr_bridge.py::test_expiry_refuses_first_and_cancels_only_a_call_still_running;
    with a real SDK: test_real_peers_mrtr_expiry.py)."""
    t = table()
    playbook, _ = parked(t, ASK_NAME)
    assert (
        playbook
        >> TimerFired(Expiry(1), 70.0)
        << CancelTimer(Expiry(1))
        << RefuseServerAsks(1, (wire.error_response("srv-1", wire.INTERNAL_ERROR, matching("")),))
        << StartTimer(WindDown(1), 70.0 + WIND)
        >> TimerFired(WindDown(1), 71.0)
        << CancelUpstream(1)
        >> ServerAsked(1, ASK_ROOTS, 71.5)
        >> UpstreamEnded(1, None)
        << ReleaseSession(1)
        << Wake(1)
    )
    assert not t.calls


def test_a_cancelled_retry_closes_the_call() -> None:
    """2026-07-28 "Cancellation": the call's work stops."""
    t = table()
    playbook, state = parked(t, ASK_NAME)
    assert (
        playbook
        >> retry(2, state, {"input-1": accept("Q")})
        << CancelTimer(Expiry(1))
        << StartTimer(SessionDue(1), 20.0 + RT)
        << AcquireSession(1, 2)
        >> SessionAcquired(1, 2, 2.0)
        << CancelTimer(SessionDue(1))
        << AnswerServer(1, wire.result_response("srv-1", accept("Q")))
        << StartTimer(OutcomeDue(1), 2.0 + RT)
        << AwaitOutcome(1, 2)
        >> ClientGone(1, "the retry was cancelled", 25.0)
        << CancelTimer(OutcomeDue(1))
        << CancelTimer(Expiry(1))
        << StartTimer(WindDown(1), 25.0 + WIND)
        >> TimerFired(WindDown(1), 26.0)
        << CancelUpstream(1)
    )
    assert not t.parked


def test_a_parked_call_whose_server_died_frees_its_slot_and_its_retry_hears_why() -> None:
    """The slot is free at once, not at state_ttl, and the retry gets the failure
    with its own id (end to end: test_upstream_slots.py)."""
    t = table()
    playbook, state = parked(t, ASK_NAME)
    failure = wire.gateway_error(0, wire.INTERNAL_ERROR, "gone", reason="upstream-failed")
    assert (
        playbook
        >> UpstreamEnded(1, failure, failed=True)
        << CancelTimer(Expiry(1))
        << ReleaseSession(1)
        << Wake(1)
        << RefuseServerAsks(
            1, (wire.error_response("srv-1", wire.INTERNAL_ERROR, matching("ended")),)
        )
    )
    assert not t.parked and not t.calls
    assert (
        playbook >> retry(2, state, {"input-1": accept("Y")}) << ReplyToClient({**failure, "id": 2})
    )


def test_an_undeclared_capability_is_32021_and_the_call_is_wound_down() -> None:
    """2026-07-28 "Per-request protocol fields": a server MUST answer -32021
    when processing needs a capability the client did not declare; the gateway
    answers so for the legacy server, whose request is refused. A server that
    then ends the call itself is not also sent a cancellation (the issue's
    expiry defect: the two together break mcp 1.30). Moved from
    test_mrtr_bridge.py::test_a_call_needing_an_undeclared_capability_gets_32021
    (a client that declared some features: the bridge's)."""
    t = table()
    needed: dict[str, Any] = {"requiredCapabilities": {"elicitation": {"form": {}}}}
    assert (
        Playbook(t)
        >> CallArrived(1, 7, held(caps={"sampling": {}}), 0.0)
        << StartTimer(SessionDue(1), 0.0 + RT)
        << AcquireSession(1, 7)
        >> SessionAcquired(1, 7, 2.0)
        << CancelTimer(SessionDue(1))
        << StartUpstream(1)
        << StartTimer(OutcomeDue(1), 2.0 + RT)
        << AwaitOutcome(1, 7)
        >> ServerAsked(1, ASK_NAME, 5.0)
        << AnswerServer(
            1, wire.error_response("srv-1", wire.METHOD_NOT_FOUND, matching("elicitation"))
        )
        << StartTimer(WindDown(1), 5.0 + WIND)
        >> UpstreamEnded(1, RESULT)
        << ReleaseSession(1)
        << Wake(1)
        << CancelTimer(WindDown(1))
        >> gathered(7)
        << CancelTimer(OutcomeDue(1))
        << ReplyToClient(
            wire.error_response(
                7, wire.MISSING_REQUIRED_CLIENT_CAPABILITY, matching("capability"), needed
            )
        )
    )
    assert not t.calls


def test_an_undeclared_capability_in_a_call_the_server_keeps_running() -> None:
    """2026-07-28 "Per-request protocol fields": -32021 with requiredCapabilities.
    The -32021 path bounds the upstream call as an expiry does: the server's
    request is refused first, and a call still running when the wind-down
    ends is cancelled, after which nothing more is sent for it (moved from
    test_mrtr_bridge.py::test_a_32021_call_the_server_keeps_running_is_cancelled_after_the_refusal;
    the client that declared no feature at all is the service's and stays there)."""
    t = table()
    needed: dict[str, Any] = {"requiredCapabilities": {"elicitation": {"form": {}}}}
    assert (
        running(t, 7, caps={"sampling": {}})
        >> ServerAsked(1, ASK_NAME, 5.0)
        << AnswerServer(
            1, wire.error_response("srv-1", wire.METHOD_NOT_FOUND, matching("elicitation"))
        )
        << StartTimer(WindDown(1), 5.0 + WIND)
        >> TimerFired(WindDown(1), 6.0)
        << CancelUpstream(1)
        >> ServerAsked(1, ASK_ROOTS, 6.5)  # nothing for the call after its cancellation
        >> UpstreamEnded(1, None)
        << ReleaseSession(1)
        << Wake(1)
        >> gathered(7)
        << CancelTimer(OutcomeDue(1))
        << ReplyToClient(
            wire.error_response(
                7, wire.MISSING_REQUIRED_CLIENT_CAPABILITY, matching("capability"), needed
            )
        )
    )
    assert not t.calls


def test_a_request_the_server_cancels_is_not_put_to_the_client() -> None:
    """2026-07-28 "Cancellation": a request the server cancelled is dropped
    from the input_required; with none left, the client is not answered with
    an empty one, and its request waits for the call."""
    t = table()
    playbook = running(t)
    assert (
        playbook
        >> ServerAsked(1, ASK_NAME, 5.0)
        << Wake(1)
        >> ServerAsked(1, ASK_ROOTS, 5.0)
        << Wake(1)
        >> ServerCancelledAsk(1, "srv-1")
        >> ServerCancelledAsk(1, "srv-9")  # not one of its requests: nothing changes
    )
    assert t.book.pending_asks(1) == 1 and t.book.ready(1)
    assert (
        playbook
        >> gathered(1)
        << CancelTimer(OutcomeDue(1))
        << ReleaseSession(1)
        << StartTimer(Expiry(1), 10.0 + TTL)
        << ReplyToClient(
            input_required(1, {"input-2": asked(ASK_NAME, ASK_ROOTS)["input-2"]}, matching(""))
        )
    )
    t = table()
    assert running(t) >> ServerAsked(1, ASK_NAME, 5.0) << Wake(1) >> ServerCancelledAsk(1, "srv-1")
    assert not t.book.ready(1) and t.book.pending_asks(1) == 0


def test_a_client_gone_while_waiting_for_the_session_leaves_nothing() -> None:
    """2026-07-28 "Cancellation": a call whose client went away before it took
    the session never runs."""
    t = table()
    assert (
        Playbook(t)
        >> CallArrived(1, 1, held(), 0.0)
        << StartTimer(SessionDue(1), 0.0 + RT)
        << AcquireSession(1, 1)
        >> ClientGone(1, "cancelled by the client", 1.0)
        << CancelTimer(SessionDue(1))
        >> TimerFired(SessionDue(1), 30.0)  # already cancelled: nothing to give up
    )
    assert not t.calls and not t.parked


def test_a_client_gone_during_its_call_closes_it() -> None:
    """2026-07-28 "Cancellation": the call's work stops. Its server's pending
    request is refused first, the call is cancelled only if it still runs after
    the wind-down, and nothing is parked for a retry."""
    t = table()
    refusal = wire.error_response(
        "srv-1", wire.INTERNAL_ERROR, "No client answer: cancelled by the client"
    )
    assert (
        running(t)
        >> ServerAsked(1, ASK_NAME, 5.0)
        << Wake(1)
        >> ClientGone(1, "cancelled by the client", 6.0)
        << CancelTimer(OutcomeDue(1))
        << RefuseServerAsks(1, (refusal,))
        << StartTimer(WindDown(1), 6.0 + WIND)
        >> UpstreamEnded(1, RESULT)  # the refusal ended it: no cancellation
        << ReleaseSession(1)
        << Wake(1)
        << CancelTimer(WindDown(1))
    )
    assert not t.calls and not t.parked


def test_an_expiry_that_fires_as_the_retry_arrives_changes_nothing() -> None:
    """A state_ttl timer already firing when the retry cancelled it does not
    close the call the retry continues."""
    t = table()
    playbook, state = parked(t, ASK_NAME)
    assert (
        playbook
        >> retry(2, state, {"input-1": accept("Ada")})
        << CancelTimer(Expiry(1))
        << StartTimer(SessionDue(1), 20.0 + RT)
        << AcquireSession(1, 2)
        >> TimerFired(Expiry(1), 70.0)
        >> SessionAcquired(1, 2, 71.0)
        << CancelTimer(SessionDue(1))
        << AnswerServer(1, wire.result_response("srv-1", accept("Ada")))
        << StartTimer(OutcomeDue(1), 71.0 + RT)
        << AwaitOutcome(1, 2)
    )


def test_an_expired_call_frees_its_parked_slot() -> None:
    """max_parked_calls counts the calls a retry can still continue: once one
    expires, a new call is taken."""
    t = table(max_parked_calls=1)
    playbook, _ = parked(t, ASK_NAME)
    assert (
        playbook
        >> CallArrived(2, 9, held(), 1.0)
        << ReplyToClient(
            wire.gateway_error(9, wire.INTERNAL_ERROR, matching("limit 1"), reason="parked-limit")
        )
        >> TimerFired(Expiry(1), 70.0)
        << CancelTimer(Expiry(1))
        << RefuseServerAsks(1, (wire.error_response("srv-1", wire.INTERNAL_ERROR, matching("")),))
        << StartTimer(WindDown(1), 70.0 + WIND)
        >> CallArrived(2, 10, held(handle="h2"), 71.0)
        << StartTimer(SessionDue(2), 71.0 + RT)
        << AcquireSession(2, 10)
    )


def test_one_principal_parks_at_most_its_share_and_others_still_park() -> None:
    """Issue #29 class 4: a principal that parks calls and walks away fills
    its share of max_parked_calls, not the pool; another principal's call is
    still taken, and a slot freed by expiry is the first principal's again."""
    t = table(max_parked_calls=4, max_parked_per_principal=1)
    playbook, _ = parked(t, ASK_NAME)
    assert (
        playbook
        >> CallArrived(2, 9, held(handle="h2"), 11.0)
        << ReplyToClient(
            wire.gateway_error(
                9, wire.INTERNAL_ERROR, matching("limit 1 per principal"), reason="parked-limit"
            )
        )
        >> CallArrived(3, 10, held(handle="h3", principal="q"), 12.0)
        << StartTimer(SessionDue(3), 12.0 + RT)
        << AcquireSession(3, 10)
        >> TimerFired(Expiry(1), 70.0)
        << CancelTimer(Expiry(1))
        << RefuseServerAsks(1, (wire.error_response("srv-1", wire.INTERNAL_ERROR, matching("")),))
        << StartTimer(WindDown(1), 70.0 + WIND)
        >> CallArrived(4, 11, held(handle="h4"), 71.0)
        << StartTimer(SessionDue(4), 71.0 + RT)
        << AcquireSession(4, 11)
    )
    assert t.shares.by_principal == {}  # nothing parked: no entry left behind


def test_the_default_share_is_most_of_the_pool_but_not_all() -> None:
    t = table(max_parked_calls=8)
    assert t.settings.parked_share.per_principal == 6


def test_limits_parked_calls_rounds_and_asks() -> None:
    t = table(max_parked_calls=1, max_asks=1)
    playbook, _ = parked(t, ASK_NAME)
    assert (
        playbook
        >> CallArrived(2, 9, held(), 0.0)
        << ReplyToClient(
            wire.gateway_error(9, wire.INTERNAL_ERROR, matching("limit 1"), reason="parked-limit")
        )
    )
    t = table(max_asks=1)
    assert (
        running(t, call=held(rounds=1))
        >> ServerAsked(1, ASK_NAME, 5.0)
        << Wake(1)
        >> ServerAsked(1, ASK_ROOTS, 5.0)
        << AnswerServer(1, wire.error_response("srv-2", wire.INTERNAL_ERROR, matching("limit 1")))
        >> ServerCancelledAsk(1, "srv-1")
        >> ServerAsked(1, ASK_ROOTS, 6.0)
        << Wake(1)
    )
    # max_rounds=1: the first input_required is the last one.
    t.calls[1].call.round = 1
    assert (
        Playbook(t)
        >> gathered(1, now=8.0)
        << CancelTimer(OutcomeDue(1))
        << RefuseServerAsks(
            1, (wire.error_response("srv-2", wire.INTERNAL_ERROR, matching("more than 1")),)
        )
        << StartTimer(WindDown(1), 8.0 + WIND)
        << ReplyToClient(
            wire.gateway_error(
                1, wire.INTERNAL_ERROR, matching("more than 1"), reason="mrtr-rounds"
            )
        )
    )


def test_busy_sessions_and_silent_servers() -> None:
    t = table()
    assert (
        Playbook(t)
        >> CallArrived(1, 1, held(), 0.0)
        << StartTimer(SessionDue(1), 0.0 + RT)
        << AcquireSession(1, 1)
        >> TimerFired(SessionDue(1), 3.0)
        << GiveUpSession(1)
        >> SessionBusy(1, 1, 3.0)
        << ReplyToClient(
            wire.gateway_error(1, wire.INTERNAL_ERROR, matching("busy"), reason="session-busy")
        )
    )
    assert not t.calls
    t = table()
    playbook, state = parked(t, ASK_NAME)
    assert (
        playbook
        >> retry(2, state, {"input-1": accept("B")})
        << CancelTimer(Expiry(1))
        << StartTimer(SessionDue(1), 20.0 + RT)
        << AcquireSession(1, 2)
        >> TimerFired(SessionDue(1), 50.0)
        << GiveUpSession(1)
        >> SessionBusy(1, 2, 50.0)
        << ReleaseSession(1)
        << StartTimer(Expiry(1), 50.0 + TTL)
        << ReplyToClient(
            wire.gateway_error(
                2, wire.INTERNAL_ERROR, matching("same requestState"), reason="session-busy"
            )
        )
        >> retry(3, state, {"input-1": accept("B")})
        << CancelTimer(Expiry(1))
        << StartTimer(SessionDue(1), 20.0 + RT)
        << AcquireSession(1, 3)
        >> SessionAcquired(1, 3, 2.0)
        << CancelTimer(SessionDue(1))
        << AnswerServer(1, wire.result_response("srv-1", accept("B")))
        << StartTimer(OutcomeDue(1), 2.0 + RT)
        << AwaitOutcome(1, 3)
        >> TimerFired(OutcomeDue(1), 2.0 + RT)  # request_timeout: the waiter is woken
        << Wake(1)
        >> TimerFired(OutcomeDue(1), 2.0 + RT)  # fired once only
        >> WaitTimedOut(1, 3, 90.0)
        << CancelTimer(OutcomeDue(1))
        << CancelTimer(Expiry(1))
        << StartTimer(WindDown(1), 90.0 + WIND)
        << ReplyToClient(
            wire.gateway_error(
                3,
                wire.INTERNAL_ERROR,
                "Upstream did not answer within 30s",
                reason="upstream-timeout",
            )
        )
    )


def test_replay_mode_parks_nothing() -> None:
    """DESIGN §5.1.8: the run is closed after its input_required; the key is
    the request's digest, so a re-run meets the same key."""
    t = table()
    key = core.replay_key("elicitation/create", ELICIT)
    assert (
        running(t, call=held(replay=True), logs=True)
        >> ServerAsked(1, ASK_NAME, 5.0)
        << Wake(1)
        >> gathered(1)
        << CancelTimer(OutcomeDue(1))
        << Log(
            "bridged call closed", fields={"reason": "replay mode: re-run on retry", "handle": None}
        )
        << RefuseServerAsks(
            1, (wire.error_response("srv-1", wire.INTERNAL_ERROR, matching("replay")),)
        )
        << StartTimer(WindDown(1), 10.0 + WIND)
        << Log("asking the client for input", fields={"keys": [key], "round": 1, "mode": "replay"})
        << ReplyToClient(
            input_required(
                1, {key: {"method": "elicitation/create", "params": ELICIT}}, matching("")
            )
        )
    )
    assert not t.parked


def test_log_lines_of_a_hold_round() -> None:
    """The operator's lines are the machine's (runtime/mrtr_bridge.py prints them)."""
    t = table()
    state = Placeholder(str)
    assert (
        running(t, logs=True)
        >> ServerAsked(1, ASK_NAME, 5.0)
        << Wake(1)
        >> gathered(1)
        << CancelTimer(OutcomeDue(1))
        << ReleaseSession(1)
        << StartTimer(Expiry(1), 10.0 + TTL)
        << Log(
            "asking the client for input", fields={"keys": ["input-1"], "round": 1, "mode": "hold"}
        )
        << ReplyToClient(input_required(1, asked(ASK_NAME), state.match))
        >> retry(2, state, {"input-1": {"action": "perhaps"}})
        << CancelTimer(Expiry(1))
        << Log("retry rejected", fields={"why": matching("action")})
        << ReleaseSession(1)
        << StartTimer(Expiry(1), 20.0 + TTL)
        << ReplyToClient(
            wire.error_response(2, wire.INVALID_PARAMS, matching("action"), state_data())
        )
    )


# -- which retries get through (core/mrtr_retry_door.py) ---------------------------


def presented(
    client_id: int,
    state: object,
    responses: object,
    principal: str = "p",
    digest: str = "d",
) -> RetryPresented:
    """A retry as the client sent it; `state` may be a Placeholder (read when run)."""
    token = later(state) if isinstance(state, Placeholder) else state
    return RetryPresented(
        client_id, principal, "tools/call", digest, token, responses, 20.0, NOW_MS
    )


def tampered(token: str) -> str:
    return token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB")


def test_forged_states_are_rejected_and_leave_the_call_parked() -> None:
    """2026-07-28 MRTR "Error Handling": a requestState that does not verify,
    comes from another gateway instance or principal, is not a string, or is
    presented with other params is -32602 with a clear reason, nothing reaches
    the server, and the parked call still takes a correct retry (moved from
    test_mrtr_bridge.py::test_bad_retries_are_rejected_and_leave_the_call_intact and
    ::test_state_of_another_principal_is_rejected, which stay end to end for
    the wiring)."""
    t = table()
    playbook, state = parked(t, ASK_NAME)
    other = Sealer(b"s" * 32, "gw-2").seal(
        Claims("gw-2", "p", "tools/call", "d", 1, 2**62, handle="h")
    )
    answer = {"input-1": accept("x")}
    cases: list[tuple[RetryPresented, str]] = [
        (presented(10, later(lambda: tampered(state())), answer), "verification"),
        (presented(11, other, answer), "another gateway instance"),
        (presented(12, 42, answer), "must be a string"),
        (presented(13, state, answer, digest="other"), "other params"),
        (presented(14, state, answer, principal="mallory"), "another principal"),
    ]
    for event, why in cases:
        (
            playbook
            >> event
            << ReplyToClient(
                wire.error_response(
                    event.client_id, wire.INVALID_PARAMS, matching(why), state_data()
                )
            )
        )
    assert playbook
    assert t.parked == {"h": 1}
    assert (
        playbook
        >> presented(20, state, {"input-1": accept("Di")})
        << CancelTimer(Expiry(1))
        << StartTimer(SessionDue(1), 20.0 + RT)
        << AcquireSession(1, 20)
    )


def replay_asked(t: HoldTable) -> tuple[Playbook, Placeholder[str], str]:
    """A replay-mode call that asked for a name: its run closed, its state out."""
    state = Placeholder(str)
    key = core.replay_key("elicitation/create", ELICIT)
    playbook = running(t, call=held(replay=True))
    assert (
        playbook
        >> ServerAsked(1, ASK_NAME, 5.0)
        << Wake(1)
        >> gathered(1)
        << CancelTimer(OutcomeDue(1))
        << RefuseServerAsks(1, (wire.error_response("srv-1", wire.INTERNAL_ERROR, matching("")),))
        << StartTimer(WindDown(1), 10.0 + WIND)
        << ReplyToClient(
            input_required(
                1, {key: {"method": "elicitation/create", "params": ELICIT}}, state.match
            )
        )
    )
    return playbook, state, key


def test_a_replay_state_is_honoured_once() -> None:
    """Issue defect: "In replay mode one state can be presented any number of
    times, and the tool runs each time." A state is single-use within its
    lifetime: presented again, even with other answers, it is -32602 and
    nothing is re-run (moved from
    test_mrtr_bridge.py::test_a_replay_state_is_honoured_once)."""
    t = table()
    playbook, state, key = replay_asked(t)
    assert (
        playbook
        >> presented(2, state, {key: accept("Ed")})
        << RerunCall(2, {key: accept("Ed")}, 1)
        >> presented(3, state, {key: accept("Ed")})
        << ReplyToClient(
            wire.error_response(3, wire.INVALID_PARAMS, matching("already used"), state_data())
        )
        >> presented(4, state, {key: accept("Mallory")})
        << ReplyToClient(
            wire.error_response(4, wire.INVALID_PARAMS, matching("already used"), state_data())
        )
    )


def test_a_refused_replay_retry_leaves_the_state_usable() -> None:
    """A retry refused before it runs (a malformed `inputResponses`) does not
    spend the state: 2026-07-28 MRTR "Error Handling" lets the client correct it
    (moved from test_mrtr_bridge.py::test_a_refused_replay_retry_leaves_the_state_usable)."""
    t = table()
    playbook, state, key = replay_asked(t)
    assert (
        playbook
        >> presented(2, state, [])
        << ReplyToClient(
            wire.error_response(2, wire.INVALID_PARAMS, matching("object"), state_data())
        )
        >> presented(3, state, {key: accept("Ed")})
        << RerunCall(3, {key: accept("Ed")}, 1)
    )


def test_rerun_states_in_use_are_bounded() -> None:
    """Honoured re-run states are remembered until they expire, and at the
    limit a new one is refused (a clear replay-limit error) rather than an old
    one forgotten, which would let that state run twice."""
    t = table(rerun_states=1)
    playbook, state, key = replay_asked(t)
    assert (
        playbook >> presented(2, state, {key: accept("Ed")}) << RerunCall(2, {key: accept("Ed")}, 1)
    )
    # Another call's replay state, still unexpired, while the first is remembered.
    other = SEALER.seal(Claims("gw", "p", "tools/call", "d", 1, NOW_MS + 60_000, nonce="n-2"))
    assert (
        playbook
        >> presented(3, other, {key: accept("Al")})
        << ReplyToClient(
            wire.gateway_error(3, wire.INTERNAL_ERROR, matching("re-run"), reason="replay-limit")
        )
    )


def test_a_url_required_resend_state_is_honoured_once_and_only_when_accepted() -> None:
    """2025-11-25's -32042 becomes URL elicitations whose state re-sends the
    call (DESIGN §5.1.6): a declined link ends the call (elicitation-declined,
    nothing re-sent), an accepted one re-sends it once, and the state is then
    spent like a replay state (issue: "one state can be presented any number
    of times, and the tool runs each time"). Moved from
    test_mrtr_bridge.py::test_a_url_required_resend_state_is_honoured_once."""
    t = table()
    state = Placeholder(str)
    link = {"mode": "url", "elicitationId": "e", "url": "https://x/a", "message": "m"}
    needs_url = wire.error_response(
        0, wire.URL_ELICITATION_REQUIRED, "auth", {"elicitations": [link]}
    )
    url_params = {"mode": "url", "url": "https://x/a", "message": "m"}
    accepted = {"url-1": {"action": "accept"}}
    assert (
        running(t)
        >> UpstreamEnded(1, needs_url)
        << ReleaseSession(1)
        << Wake(1)
        >> gathered(1)
        << CancelTimer(OutcomeDue(1))
        << ReplyToClient(
            input_required(
                1, {"url-1": {"method": "elicitation/create", "params": url_params}}, state.match
            )
        )
        >> presented(2, state, {"url-1": {"action": "decline"}})
        << ReplyToClient(
            wire.gateway_error(
                2, wire.INTERNAL_ERROR, matching("chose decline"), reason="elicitation-declined"
            )
        )
        >> presented(3, state, accepted)
        << RerunCall(3, None, 0)
        >> presented(4, state, accepted)
        << ReplyToClient(
            wire.error_response(4, wire.INVALID_PARAMS, matching("already used"), state_data())
        )
    )


# -- any order of events ------------------------------------------------------------


class Driver:
    """Feeds the table events in any order the runtime can produce, and checks
    what must hold whatever the order."""

    def __init__(self) -> None:
        self.t = table()
        self.state: str | None = None
        self.acquiring: int | None = None  # client id waiting for the session
        self.awaiting: int | None = None  # client id waiting for the outcome
        self.gave_up = False  # the session wait was given up (SessionDue fired)
        self.holds_session = False
        self.ended = False  # the upstream call returned
        self.answered: set[int] = set()
        self.running = False
        self.cancelled = False
        self.timers: set[Hashable] = set()
        self.asks: list[str] = []
        self.next_id = 1
        self.now = 0.0

    def feed(self, event: Any) -> None:
        self.now += 1.0
        if isinstance(event, SessionAcquired):
            self.holds_session = True
        for cmd in self.t.handle(event):
            self.check(cmd)
        # A call that ended upstream holds no session (else nothing frees it).
        assert not (self.ended and self.holds_session)

    def check(self, cmd: Any) -> None:
        if isinstance(cmd, ReplyToClient):
            client_id = cmd.reply["id"]
            # Replies carry the client's id from the start, once per request.
            assert client_id not in self.answered and isinstance(client_id, int)
            self.answered.add(client_id)
            if client_id == self.acquiring:
                self.acquiring = None
            if client_id == self.awaiting:
                self.awaiting = None
            state = cmd.reply.get("result", {}).get("requestState")
            self.state = state if isinstance(state, str) else self.state
        elif isinstance(cmd, AcquireSession):
            assert isinstance(cmd.client_id, int)
            self.acquiring, self.gave_up = cmd.client_id, False
        elif isinstance(cmd, GiveUpSession):
            assert self.acquiring is not None
            self.gave_up = True
        elif isinstance(cmd, AwaitOutcome):
            assert isinstance(cmd.client_id, int)
            self.acquiring, self.awaiting = None, cmd.client_id
        elif isinstance(cmd, StartUpstream):
            self.running = True
        elif isinstance(cmd, ReleaseSession):
            self.holds_session = False
        elif isinstance(cmd, AnswerServer | RefuseServerAsks):
            # The expiry defect: nothing for a call once it is cancelled.
            assert not self.cancelled, cmd
        elif isinstance(cmd, CancelUpstream):
            assert self.running and not self.cancelled
            self.cancelled = True
        elif isinstance(cmd, StartTimer):
            assert isinstance(cmd.timer, Expiry | WindDown | OutcomeDue | SessionDue)
            self.timers.add(cmd.timer)
        elif isinstance(cmd, CancelTimer):
            self.timers.discard(cmd.timer)

    def step(self, data: Any) -> None:  # noqa: PLR0912 - the rule machine's choice of step
        choices = ["retry"] if self.state else []
        if self.acquiring is not None:
            choices += ["acquired", "gone"] + (["busy"] if self.gave_up else [])
        if self.awaiting is not None:
            choices += ["gone"] + (["gathered"] if self.t.book.ready(1) else [])
            choices += ["timed_out"] if self.t.book.overdue(1) else []
        if self.running:
            choices += ["server_cancel", "ends"]
            # The server's requests reach the call only while it holds the session.
            choices += ["ask", "ask"] if self.holds_session else []
        choices += ["timer"] if self.timers else []
        if not choices:
            return
        choice = data.draw(st.sampled_from(choices))
        client = self.acquiring or self.awaiting or 0  # client ids start at 1
        if choice == "acquired":
            self.feed(SessionAcquired(1, client, self.now))
        elif choice == "busy":
            self.feed(SessionBusy(1, client, self.now))
        elif choice == "gone":
            self.feed(ClientGone(1, "cancelled by the client", self.now))
            self.acquiring = self.awaiting = None
        elif choice == "timed_out":
            self.feed(WaitTimedOut(1, client, self.now))
        elif choice == "gathered":
            self.feed(InputGathered(1, client, self.now, NOW_MS, f"n{self.now}"))
        elif choice == "ask":
            srv = f"srv-{self.now}"
            self.asks.append(srv)
            method = data.draw(st.sampled_from(["elicitation/create", "roots/list"]))
            self.feed(ServerAsked(1, wire.request(srv, method, ELICIT), self.now))
        elif choice == "server_cancel" and self.asks:
            self.feed(ServerCancelledAsk(1, data.draw(st.sampled_from(self.asks))))
        elif choice == "ends":
            self.running, self.ended = False, True
            failed = data.draw(st.booleans())
            reply = None if self.cancelled else RESULT
            self.feed(UpstreamEnded(1, reply, failed=failed and reply is not None))
        elif choice == "timer":
            timer = data.draw(st.sampled_from(sorted(self.timers, key=repr)))
            self.timers.discard(timer)
            self.feed(TimerFired(timer, self.now))
        elif choice == "retry":
            assert self.state is not None
            claims = SEALER.open(
                self.state, principal="p", method="tools/call", digest="d", now_ms=NOW_MS
            )
            responses = data.draw(
                st.sampled_from([{}, None, [], {f"input-{n}": {"roots": []} for n in range(1, 9)}])
            )
            client_id = self.next_id = self.next_id + 1
            if self.acquiring is None and self.awaiting is None:
                self.feed(RetryArrived(client_id, claims, responses, self.now))
            else:  # a concurrent retry only ever hears "in progress" or "gone"
                cmds = self.t.handle(RetryArrived(client_id, claims, responses, self.now))
                assert [type(c) for c in cmds] == [ReplyToClient], cmds


@given(st.data())
@settings(max_examples=500, deadline=None, derandomize=True)
def test_any_order_of_events_keeps_the_rules(data: Any) -> None:
    """Whatever the order: every client request is answered once with its own
    id; nothing reaches the server for a call after its cancellation (issue
    defect "100 parked MRTR calls expiring at once kill the mcp 1.30
    upstream"); a call nothing can reach is dropped from the table."""
    d = Driver()
    d.feed(CallArrived(1, 1, held(caps=ALL, rounds=3), 0.0))
    for _ in range(40):
        d.step(data)
        # The principal's share counts exactly the calls parked (class 4).
        assert d.t.shares.total == len(d.t.parked) == d.t.shares.held("p")
    if not d.running and d.acquiring is None and d.awaiting is None and not d.t.parked:
        assert not d.t.calls


def test_url_elicitation_required_becomes_input_required_and_never_reaches_the_client() -> None:
    """2025-11-25's -32042 becomes URL elicitations whose state re-sends the call
    (DESIGN §5.1.6); a client without URL elicitation gets -32021, since -32042
    must never reach a modern client (2026-07-28 "Error Codes")."""
    link = {"mode": "url", "elicitationId": "e-9", "url": "https://x/auth", "message": "Sign in"}
    needs_url = wire.error_response(
        0, wire.URL_ELICITATION_REQUIRED, "auth needed", {"elicitations": [link]}
    )
    for caps, answer in (
        (ALL, None),
        ({"elicitation": {}}, wire.MISSING_REQUIRED_CLIENT_CAPABILITY),
    ):
        t = table()
        state = Placeholder(str)
        url_params = {"mode": "url", "url": "https://x/auth", "message": "Sign in"}
        expected = (
            input_required(
                1, {"url-1": {"method": "elicitation/create", "params": url_params}}, state.match
            )
            if answer is None
            else wire.error_response(
                1, answer, matching("URL"), {"requiredCapabilities": {"elicitation": {"url": {}}}}
            )
        )
        assert (
            running(t, call=held(caps=caps))
            >> UpstreamEnded(1, needs_url)
            << ReleaseSession(1)
            << Wake(1)
            >> gathered(1)
            << CancelTimer(OutcomeDue(1))
            << ReplyToClient(expected)
        )
        if answer is None:
            claims = opened(state)
            assert claims.resend and claims.handle is None and claims.nonce == "nonce-1"
        assert not t.calls


def test_a_call_that_ended_while_its_retry_waited_for_the_session_gives_it_back() -> None:
    """On main a retry that waited for the session while its parked call ended
    upstream took the session for good (nothing released it again): every
    later call on that session failed session-busy. End to end:
    test_mrtr_bridge.py::test_a_retry_that_waited_for_the_session_while_its_call_ended_frees_the_session."""
    t = table()
    playbook, state = parked(t, ASK_NAME)
    done = wire.result_response(0, {"content": [{"type": "text", "text": "gave up asking"}]})
    refusal = wire.error_response("srv-1", wire.INTERNAL_ERROR, matching("ended"))
    assert (
        playbook
        >> retry(2, state, {"input-1": accept("Q")})
        << CancelTimer(Expiry(1))
        << StartTimer(SessionDue(1), 20.0 + RT)
        << AcquireSession(1, 2)
        >> UpstreamEnded(1, done)  # the server ended the call by itself
        << ReleaseSession(1)
        << Wake(1)
        << RefuseServerAsks(1, (refusal,))
        >> SessionAcquired(1, 2, 25.0)
        << CancelTimer(SessionDue(1))
        << ReleaseSession(1)  # given straight back
        << StartTimer(OutcomeDue(1), 25.0 + RT)
        << AwaitOutcome(1, 2)
        >> gathered(2, now=26.0)
        << CancelTimer(OutcomeDue(1))
        << CancelTimer(Expiry(1))
        << ShapeReply(1, 2, done)
    )
    assert not t.calls and not t.parked
