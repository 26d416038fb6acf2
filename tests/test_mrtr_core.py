"""The MRTR bridge's pure logic (2026-07-28 basic/patterns/mrtr: "InputRequests",
"InputResponses", "Client Requirements", "Error Handling"; DESIGN §5.1.6-5.2.5)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import wire
from gateway.core import held_call, mrtr_shapes
from gateway.core import mrtr_bridge as mb
from gateway.core.request_state import Sealer, StateRejected

SEALER = Sealer(b"s" * 32, "gw")
ELICIT = wire.request(0, "elicitation/create", {"message": "name?", "requestedSchema": {}})
SAMPLE = wire.request(1, "sampling/createMessage", {"messages": [], "maxTokens": 5})
ROOTS = wire.request(2, "roots/list")
URL = wire.request(
    3,
    "elicitation/create",
    {"mode": "url", "message": "go", "url": "https://x", "elicitationId": "e-1"},
)
ALL_CAPS: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}}


def held(caps: dict[str, Any] | None = None, rounds: int = 5) -> held_call.HeldCall:
    return held_call.HeldCall(
        handle="h",
        principal="p",
        method="tools/call",
        digest="d",
        client_caps=ALL_CAPS if caps is None else caps,
        max_rounds=rounds,
    )


def open_(token: str, now_ms: int = 1) -> Any:
    return SEALER.open(token, principal="p", method="tools/call", digest="d", now_ms=now_ms)


@pytest.mark.parametrize(
    ("caps", "msg", "ok"),
    [
        ({"elicitation": {}}, ELICIT, True),  # {} means form (2025-11-25)
        ({"elicitation": {}}, URL, False),
        ({"elicitation": {"url": {}}}, ELICIT, False),
        ({"elicitation": {"url": {}}}, URL, True),
        ({"sampling": {}}, SAMPLE, True),
        ({}, SAMPLE, False),
        ({"roots": {}}, ROOTS, True),
        ({"roots": True}, ROOTS, False),
    ],
)
def test_capability_checks(caps: dict[str, Any], msg: wire.Message, ok: bool) -> None:
    assert mb.client_supports(caps, msg["method"], msg.get("params")) is ok


def test_asks_become_one_input_required_with_gateway_keys() -> None:
    call = held()
    for msg in (ELICIT, SAMPLE, URL):
        assert isinstance(call.add_ask(msg), mb.Ask)
    result = call.input_required(SEALER, now_ms=0, ttl_ms=1000)
    assert result["resultType"] == "input_required"
    assert list(result["inputRequests"]) == ["input-1", "input-2", "input-3"]
    # URL mode's elicitationId is removed on the way out (2026-07-28 changelog, minor 11).
    assert result["inputRequests"]["input-3"]["params"] == {
        "mode": "url",
        "message": "go",
        "url": "https://x",
    }
    assert call.asks["input-3"].elicitation_id == "e-1"
    assert open_(result["requestState"]).handle == "h"


def test_undeclared_capability_names_what_is_missing() -> None:
    missing = held({"sampling": {}}).add_ask(ELICIT)
    assert isinstance(missing, mb.MissingCapability)
    assert missing.required == {"elicitation": {"form": {}}}
    err = missing.error(7)["error"]
    assert err["code"] == wire.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert err["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}
    url = held({"elicitation": {}}).add_ask(URL)
    assert isinstance(url, mb.MissingCapability)
    assert url.required == {"elicitation": {"url": {}}}


def test_retry_answers_and_missing_entries_are_asked_again() -> None:
    call = held()
    call.add_ask(ELICIT)
    call.add_ask(SAMPLE)
    state = call.input_required(SEALER, now_ms=0, ttl_ms=1000)["requestState"]
    outcome = call.accept_retry(
        open_(state),
        {
            "input-1": {"action": "accept", "content": {"name": "Ada"}},
            "unrelated": {"x": 1},  # extra entries are ignored
        },
    )
    assert [(a.upstream_id, r["action"]) for a, r in outcome.answers] == [(0, "accept")]
    assert outcome.missing == ["input-2"]
    again = call.input_required(SEALER, now_ms=0, ttl_ms=1000)
    assert list(again["inputRequests"]) == ["input-2"]


def test_replayed_and_stale_state_is_rejected_without_changing_anything() -> None:
    call = held()
    call.add_ask(ELICIT)
    first = call.input_required(SEALER, now_ms=0, ttl_ms=1000)["requestState"]
    with pytest.raises(StateRejected, match="action"):
        call.accept_retry(open_(first), {"input-1": {"action": "maybe"}})
    assert "input-1" in call.asks  # the bad retry left the call intact
    call.accept_retry(open_(first), {"input-1": {"action": "decline"}})
    with pytest.raises(StateRejected, match="already used"):
        call.accept_retry(open_(first), {"input-1": {"action": "decline"}})


def test_rounds_are_bounded() -> None:
    call = held(rounds=1)
    call.add_ask(ELICIT)
    call.input_required(SEALER, now_ms=0, ttl_ms=1000)
    with pytest.raises(held_call.TooManyRounds):
        call.input_required(SEALER, now_ms=0, ttl_ms=1000)


@pytest.mark.parametrize(
    ("method", "response", "ok"),
    [
        ("elicitation/create", {"action": "accept", "content": {"a": 1}}, True),
        ("elicitation/create", {"action": "cancel"}, True),
        ("elicitation/create", {"action": "accept", "content": "x"}, False),
        ("elicitation/create", [], False),
        (
            "sampling/createMessage",
            {"role": "assistant", "content": {"type": "text", "text": "t"}, "model": "m"},
            True,
        ),
        ("sampling/createMessage", {"content": {}}, False),
        ("roots/list", {"roots": [{"uri": "file:///x"}]}, True),
        ("roots/list", {"roots": "x"}, False),
    ],
)
def test_response_validation(method: str, response: object, ok: bool) -> None:
    assert (mb.response_problem(method, response) is None) is ok


def test_requests_for_legacy_clients_mint_elicitation_ids_and_respect_versions() -> None:
    inputs = {
        "a": {
            "method": "elicitation/create",
            "params": {"mode": "url", "url": "u", "message": "m"},
        },
        "b": {"method": "roots/list"},
    }
    out = mb.requests_for_legacy_client(inputs, ALL_CAPS, "2025-11-25", lambda: "e-1")
    assert isinstance(out, dict)
    assert out["a"]["params"]["elicitationId"] == "e-1"  # minted by the caller
    assert out["b"] == {"method": "roots/list", "params": {}}
    old = mb.requests_for_legacy_client(inputs, ALL_CAPS, "2025-06-18", lambda: "e-1")
    assert isinstance(old, str) and "URL elicitation" in old
    assert isinstance(
        mb.requests_for_legacy_client(inputs, {"roots": {}}, "2025-11-25", lambda: "e-1"), str
    )
    assert isinstance(mb.requests_for_legacy_client([], ALL_CAPS, "2025-11-25", lambda: "e-1"), str)
    assert isinstance(
        mb.requests_for_legacy_client(
            {"x": {"method": "tools/call"}}, ALL_CAPS, "2025-11-25", lambda: "e-1"
        ),
        str,
    )


def test_retry_params_echo_state_exactly_and_only_if_sent() -> None:
    original = {"name": "t", "arguments": {}, "inputResponses": {"old": 1}, "requestState": "o"}
    assert mrtr_shapes.retry_params(original, {"k": {}}, "S") == {
        "name": "t",
        "arguments": {},
        "inputResponses": {"k": {}},
        "requestState": "S",
    }
    assert "requestState" not in mrtr_shapes.retry_params(original, {}, None)


def test_url_elicitation_required_error() -> None:
    err = {
        "code": -32042,
        "message": "need",
        "data": {
            "elicitations": [
                {"mode": "url", "elicitationId": "e", "url": "https://a", "message": "m"}
            ]
        },
    }
    assert mb.url_elicitations(err) == [{"mode": "url", "url": "https://a", "message": "m"}]
    assert mb.url_elicitations({"code": -32042, "message": "x"}) is None


# orjson (like the wire) carries 64-bit integers; larger ones never reach the bridge.
@given(
    st.text(max_size=10),
    st.dictionaries(st.text(max_size=5), st.integers(-(2**63), 2**63 - 1), max_size=4),
)
def test_replay_keys_are_stable_and_order_independent(method: str, params: dict[str, int]) -> None:
    shuffled = dict(reversed(list(params.items())))
    assert mb.replay_key(method, params) == mb.replay_key(method, shuffled)
