"""What the hold machine (core/mrtr_hold.py) says itself: its answers to the
client and its refusals to the server, each in one place."""

from __future__ import annotations

from typing import Any

from gateway import wire
from gateway.core import held_call, mrtr_shapes
from gateway.core import mrtr_bridge as core
from gateway.core.fair_share import Share
from gateway.core.request_state import Claims, Sealer, StateRejected

# -- to the client ----------------------------------------------------------------


def invalid(client_id: wire.RequestId, exc: StateRejected) -> wire.Message:
    return wire.gateway_error(
        client_id, wire.INVALID_PARAMS, f"Invalid params: {exc}", reason=exc.reason
    )


def state_gone(client_id: wire.RequestId) -> wire.Message:
    why = (
        "the call this requestState continues is gone "
        "(finished, expired, or parked on another gateway instance)"
    )
    return invalid(client_id, StateRejected(why, reason="state-gone"))


def retry_in_progress(client_id: wire.RequestId) -> wire.Message:
    why = "a retry of this request is already in progress"
    return invalid(client_id, StateRejected(why, reason="retry-in-progress"))


def parked_limit(client_id: wire.RequestId, share: Share, refusal: str) -> wire.Message:
    """No room to park one more call: the gateway's (`total`) or this
    principal's share of it."""
    if refusal == "total":
        message = f"Too many calls waiting for client input (limit {share.total})"
    else:
        message = (
            "Too many calls of this client waiting for its input "
            f"(limit {share.per_principal} per principal)"
        )
    return wire.gateway_error(client_id, wire.INTERNAL_ERROR, message, reason="parked-limit")


def session_busy(client_id: wire.RequestId, *, retrying: bool) -> wire.Message:
    if retrying:
        message = "The upstream session stayed busy; retry with the same requestState"
    else:
        message = "The upstream session stayed busy with another call that needs client input"
    return wire.gateway_error(client_id, wire.INTERNAL_ERROR, message, reason="session-busy")


def url_declined(client_id: wire.RequestId, refusal: str) -> wire.Message:
    message = f"The server requires a URL elicitation that was not completed ({refusal})"
    return wire.gateway_error(
        client_id, wire.INTERNAL_ERROR, message, reason="elicitation-declined"
    )


def rerun_limit(client_id: wire.RequestId, why: str) -> wire.Message:
    message = f"Too many re-run requestStates in use ({why}); retry later"
    return wire.gateway_error(client_id, wire.INTERNAL_ERROR, message, reason="replay-limit")


def too_many_rounds(client_id: wire.RequestId, why: str) -> wire.Message:
    return wire.gateway_error(client_id, wire.INTERNAL_ERROR, why, reason="mrtr-rounds")


def upstream_cancelled(client_id: wire.RequestId) -> wire.Message:
    message = "The upstream call was cancelled"
    return wire.gateway_error(client_id, wire.INTERNAL_ERROR, message, reason="upstream-cancelled")


def upstream_timeout(client_id: wire.RequestId, seconds: float) -> wire.Message:
    message = f"Upstream did not answer within {seconds:g}s"
    return wire.gateway_error(client_id, wire.INTERNAL_ERROR, message, reason="upstream-timeout")


def url_elicitation_required(
    client_id: wire.RequestId,
    error: dict[str, Any],
    call: held_call.HeldCall,
    sealer: Sealer,
    *,
    expires_ms: int,
    nonce: str,
) -> wire.Message:
    """2025-11-25's -32042 becomes an input_required with URL elicitations;
    the retry re-sends the original call (DESIGN §5.1.6)."""
    items = core.url_elicitations(error)
    if items is None or not core.client_supports(
        call.client_caps, "elicitation/create", {"mode": "url"}
    ):
        # -32042 must never reach a modern client (2026-07-28 "Error Codes").
        return wire.error_response(
            client_id,
            wire.MISSING_REQUIRED_CLIENT_CAPABILITY,
            "The server needs a URL elicitation, which the client did not declare",
            {"requiredCapabilities": {"elicitation": {"url": {}}}},
        )
    claims = Claims(
        instance=sealer.instance,
        principal=call.principal,
        method=call.method,
        digest=call.digest,
        round=1,
        expires_ms=expires_ms,
        resend=True,
        nonce=nonce,
    )
    inputs = {
        f"url-{i}": {"method": "elicitation/create", "params": p}
        for i, p in enumerate(items, start=1)
    }
    return wire.result_response(client_id, mrtr_shapes.input_required(inputs, sealer.seal(claims)))


# -- to the server ----------------------------------------------------------------


def no_client_answer(upstream_id: wire.RequestId, reason: str) -> wire.Message:
    return wire.error_response(upstream_id, wire.INTERNAL_ERROR, f"No client answer: {reason}")


def too_many_asks(upstream_id: wire.RequestId, limit: int) -> wire.Message:
    message = f"Too many requests for client input at once (limit {limit})"
    return wire.error_response(upstream_id, wire.INTERNAL_ERROR, message)


def undeclared(upstream_id: wire.RequestId, reason: str) -> wire.Message:
    """The call needs a capability its modern client did not declare."""
    return wire.error_response(upstream_id, wire.METHOD_NOT_FOUND, reason)


def cannot_take(request: wire.Message, why: str) -> wire.Message:
    """A request the client cannot take, in a call that goes on."""
    message = f"{request['method']} refused: {why}"
    return wire.error_response(request["id"], wire.METHOD_NOT_FOUND, message)
