"""The shapes of a multi round-trip request (2026-07-28 basic/utilities/mrtr),
written once: what an `input_required` result looks like, and the params a
retry carries (`inputResponses`, `requestState`) that only the two ends of
one round read. Pure functions over plain dicts."""

from __future__ import annotations

from typing import Any, TypeGuard

from gateway import wire

INPUT_REQUIRED = "input_required"
# What the server asks for, by input key.
INPUT_REQUESTS = "inputRequests"
# The params a retry adds to the original request ("Client Behavior"): the
# client's answers and the server's state, echoed exactly.
INPUT_RESPONSES = "inputResponses"
REQUEST_STATE = "requestState"
RETRY_PARAMS = (INPUT_RESPONSES, REQUEST_STATE)


def is_input_required(result: object) -> TypeGuard[dict[str, Any]]:
    """An InputRequiredResult: `resultType` "input_required"."""
    return isinstance(result, dict) and result.get("resultType") == INPUT_REQUIRED


def reply_is_input_required(reply: wire.Message) -> bool:
    """A reply whose result is an InputRequiredResult."""
    return is_input_required(reply.get("result"))


def is_retry(params: dict[str, Any] | None) -> bool:
    """A request that continues an earlier round: it carries a `requestState`."""
    return params is not None and REQUEST_STATE in params


def without_retry_params(params: dict[str, Any] | None) -> dict[str, Any]:
    """The request's own params, without a retry's `inputResponses` and
    `requestState` (a copy; everything else, `_meta` included, stays)."""
    return {k: v for k, v in (params or {}).items() if k not in RETRY_PARAMS}


def retry_params(
    original: dict[str, Any] | None, responses: dict[str, Any], state: object
) -> dict[str, Any]:
    """The retry of the original request ("Client Behavior" 3): the same
    params, the answers, and the server's exact `requestState` if it sent one."""
    params = without_retry_params(original)
    params[INPUT_RESPONSES] = responses
    if isinstance(state, str):
        params[REQUEST_STATE] = state
    return params


def input_required(
    input_requests: dict[str, Any] | None, request_state: str | None
) -> dict[str, Any]:
    """An InputRequiredResult with the requests the client must answer and
    the state its retry must echo (either may be absent, not both)."""
    result: dict[str, Any] = {"resultType": INPUT_REQUIRED}
    if input_requests is not None:
        result[INPUT_REQUESTS] = input_requests
    if request_state is not None:
        result[REQUEST_STATE] = request_state
    return result
