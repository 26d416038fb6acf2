"""A modern server's input_required answered by a legacy client, as playbooks
(DESIGN §5.2.5; 2026-07-28 basic/patterns/mrtr "Client Behavior"; issue #11
item 1): no sockets, no sleeps. End-to-end rounds with real peers stay in the
compat matrix and tests/test_real_peers*.py."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import era, wire
from gateway.core import legacy_input
from gateway.core.engine import Command
from gateway.core.legacy_input import (
    AskClient,
    ClientAnswered,
    ClientRefused,
    ClientTimedOut,
    Finish,
    LegacyInputCall,
    RetryUpstream,
    UpstreamReplied,
)
from gateway.core.routing import Forward, Shape
from tests.gateway_error_finish import gateway_error
from tests.playbook import Placeholder, Playbook

ELICIT = {"method": "elicitation/create", "params": {"message": "name?", "requestedSchema": {}}}
SAMPLE = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
CAPS: dict[str, Any] = {"elicitation": {}, "sampling": {}}
CALL = Forward("tools/call", {"name": "greet", "_meta": {"k": 1}}, Shape.TO_MODERN, era.Era.LEGACY)


def input_required(requests: dict[str, Any], state: str | None = "s1") -> wire.Message:
    result: dict[str, Any] = {"resultType": "input_required", "inputRequests": requests}
    if state is not None:
        result["requestState"] = state
    return wire.result_response(90, result)


DONE = wire.result_response(91, {"resultType": "complete", "content": []})


def loop(max_rounds: int = 3, caps: dict[str, Any] | None = None) -> LegacyInputCall:
    ids = itertools.count(1)
    return LegacyInputCall(
        CALL,
        "client-1",
        CAPS if caps is None else caps,
        "2025-11-25",
        max_rounds,
        new_elicitation_id=lambda: f"e{next(ids)}",
    )


def test_a_round_asks_the_client_and_retries_with_its_answers_and_the_state() -> None:
    """ "Client Behavior" 3: the retry is the original request with
    `inputResponses` and the exact `requestState`; unknown params and `_meta`
    ride along untouched."""
    answers = {"name": {"action": "accept", "content": {"n": "Ada"}}}
    retry = Forward(
        "tools/call",
        {"name": "greet", "_meta": {"k": 1}, "inputResponses": answers, "requestState": "s1"},
        Shape.TO_MODERN,
        era.Era.LEGACY,
    )
    assert (
        Playbook(loop())
        >> UpstreamReplied(input_required({"name": ELICIT}))
        << AskClient({"name": ELICIT})
        >> ClientAnswered(answers)
        << RetryUpstream(retry)
        >> UpstreamReplied(DONE)
        << Finish(DONE)
    )


def test_a_round_without_state_retries_without_one() -> None:
    """requestState is optional: none sent, none echoed."""
    call = loop()
    call.handle(UpstreamReplied(input_required({"s": SAMPLE}, state=None)))
    [retry] = call.handle(ClientAnswered({"s": {"role": "assistant"}}))
    assert isinstance(retry, RetryUpstream)
    assert retry.forward.params is not None and "requestState" not in retry.forward.params


def test_rounds_are_bounded() -> None:
    """DESIGN §5.2.5: a server that asks without end gets no more than
    max_rounds rounds; the client gets a clear error naming the limit."""
    again = input_required({"name": ELICIT})
    playbook = Playbook(loop(max_rounds=2))
    for _ in range(2):
        playbook = (
            playbook
            >> UpstreamReplied(again)
            << AskClient(Placeholder(dict).match)
            >> ClientAnswered({"name": {"action": "decline"}})
            << RetryUpstream(Placeholder(Forward).match)
        )
    assert playbook >> UpstreamReplied(again) << gateway_error("mrtr-rounds", "more than 2 times")


def test_a_client_without_the_capability_is_not_asked() -> None:
    """A legacy client MUST declare sampling to be asked for it: the call
    fails with the reason, the client sees no request."""
    assert (
        Playbook(loop(caps={}))
        >> UpstreamReplied(input_required({"s": SAMPLE}))
        << gateway_error("input-unavailable", "cannot get")
    )


def test_a_malformed_input_required_is_a_clear_error() -> None:
    """A hostile server's input_required without inputRequests is refused, not
    passed on."""
    bad = wire.result_response(90, {"resultType": "input_required", "inputRequests": 5})
    assert (
        Playbook(loop())
        >> UpstreamReplied(bad)
        << gateway_error("upstream-malformed", "malformed reply")
    )


def test_a_refusal_or_silence_ends_the_call_with_its_reason() -> None:
    assert (
        Playbook(loop())
        >> UpstreamReplied(input_required({"name": ELICIT}))
        << AskClient(Placeholder(dict).match)
        >> ClientRefused("The client refused the server's elicitation/create request: -1 no")
        << gateway_error("client-refused", "-1 no")
    )
    assert (
        Playbook(loop())
        >> UpstreamReplied(input_required({"name": ELICIT}))
        << AskClient(Placeholder(dict).match)
        >> ClientTimedOut(30.0)
        << gateway_error("client-timeout", "within 30s")
    )


def test_what_counts_as_a_refusal() -> None:
    assert legacy_input.refusal("x", wire.result_response("g", {})) is None
    assert "-32000 nope" in str(legacy_input.refusal("x", wire.error_response("g", -32000, "nope")))
    assert legacy_input.refusal("x", {"jsonrpc": "2.0", "id": "g", "error": "str"}) is not None


def test_url_elicitations_get_an_id_minted_outside_the_core() -> None:
    """2025-11-25 elicitation: URL mode needs an elicitationId; the core takes
    the id from its caller (no uuid inside the core)."""
    url = {
        "method": "elicitation/create",
        "params": {"mode": "url", "message": "go", "url": "https://x.example/"},
    }
    call = loop(caps={"elicitation": {"form": {}, "url": {}}})
    [ask] = call.handle(UpstreamReplied(input_required({"u": url})))
    assert isinstance(ask, AskClient)
    assert ask.requests["u"]["params"]["elicitationId"] == "e1"


@settings(max_examples=200, deadline=None)
@given(
    replies=st.lists(st.booleans(), min_size=1, max_size=8),
    max_rounds=st.integers(0, 4),
)
def test_every_call_finishes_within_max_rounds(replies: list[bool], max_rounds: int) -> None:
    """Whatever the server answers, the loop asks the client at most
    max_rounds times and ends with exactly one Finish."""
    call = loop(max_rounds=max_rounds)
    commands: list[Command] = []
    for wants_input in replies:
        reply = input_required({"name": ELICIT}) if wants_input else DONE
        [command] = call.handle(UpstreamReplied(reply))
        commands.append(command)
        if isinstance(command, Finish):
            break
        [command] = call.handle(ClientAnswered({"name": {"action": "decline"}}))
        commands.append(command)
    asks = [c for c in commands if isinstance(c, AskClient)]
    assert len(asks) <= max_rounds
    assert [c for c in commands if isinstance(c, Finish)] in ([], [commands[-1]])
