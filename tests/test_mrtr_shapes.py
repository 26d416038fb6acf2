"""The MRTR result shapes and retry params, written once (issue #11 item 3:
`input_required` was detected in three places, the retry params stripped in
three)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core import mrtr_shapes

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
PARAMS = st.dictionaries(
    st.sampled_from(["name", "arguments", "_meta", "uri", "inputResponses", "requestState", "x"]),
    JSON,
)


def test_input_required_is_read_from_result_type_only() -> None:
    """2026-07-28 MRTR "Server Behavior": an InputRequiredResult is the
    result whose `resultType` is "input_required"; anything else is not."""
    assert mrtr_shapes.is_input_required({"resultType": "input_required"})
    assert mrtr_shapes.is_input_required({"resultType": "input_required", "inputRequests": {}})
    assert not mrtr_shapes.is_input_required({"resultType": "complete"})
    assert not mrtr_shapes.is_input_required({"inputRequests": {}})
    assert not mrtr_shapes.is_input_required(["input_required"])
    assert not mrtr_shapes.is_input_required(None)
    assert mrtr_shapes.reply_is_input_required(
        {"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required"}}
    )
    assert not mrtr_shapes.reply_is_input_required(
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "input_required"}}
    )


def test_a_retry_is_a_request_with_request_state() -> None:
    """2026-07-28 MRTR "Client Behavior": the retry echoes `requestState`."""
    assert mrtr_shapes.is_retry({"name": "t", "requestState": "s"})
    assert not mrtr_shapes.is_retry({"name": "t", "inputResponses": {}})
    assert not mrtr_shapes.is_retry(None)


@settings(deadline=None)  # a loaded machine must not fail a pure test
@given(PARAMS)
def test_stripping_retry_params_keeps_everything_else(params: dict[str, Any]) -> None:
    """Unknown fields and `_meta` pass through untouched: only the two retry
    params go, and the caller's dict is not changed."""
    before = dict(params)
    out = mrtr_shapes.without_retry_params(params)
    assert params == before
    assert out == {k: v for k, v in params.items() if k not in ("inputResponses", "requestState")}
    assert mrtr_shapes.without_retry_params(None) == {}


@settings(deadline=None)
@given(PARAMS, st.dictionaries(st.text(max_size=4), JSON, max_size=3), JSON)
def test_retry_params_replace_the_previous_round(
    original: dict[str, Any], responses: dict[str, Any], state: object
) -> None:
    """2026-07-28 MRTR "Client Behavior" 3: a retry carries the original
    params, this round's answers, and the server's exact `requestState` (a
    string) — never the previous round's."""
    out = mrtr_shapes.retry_params(original, responses, state)
    assert out["inputResponses"] is responses
    if isinstance(state, str):
        assert out["requestState"] == state
    else:
        assert "requestState" not in out
    rest = {k: v for k, v in out.items() if k not in ("inputResponses", "requestState")}
    assert rest == mrtr_shapes.without_retry_params(original)


def test_input_required_construction() -> None:
    """2026-07-28 MRTR: an InputRequiredResult has `inputRequests` and/or
    `requestState`; the helper writes only what it is given."""
    asks = {"input-1": {"method": "roots/list"}}
    assert mrtr_shapes.input_required(asks, "g1.x") == {
        "resultType": "input_required",
        "inputRequests": asks,
        "requestState": "g1.x",
    }
    assert mrtr_shapes.input_required(None, "s") == {
        "resultType": "input_required",
        "requestState": "s",
    }
    built = mrtr_shapes.input_required(asks, None)
    assert mrtr_shapes.is_input_required(built) and "requestState" not in built
