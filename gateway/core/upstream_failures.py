"""The one place an upstream failure becomes the client's JSON-RPC error."""

from __future__ import annotations

from gateway import wire
from gateway.upstream_errors import (
    UpstreamBusy,
    UpstreamError,
    UpstreamNotReading,
    UpstreamTimeout,
    UpstreamUnauthorized,
)


def failure_reply(
    exc: UpstreamError | TimeoutError, msg_id: wire.RequestId | None = 0
) -> wire.Message:
    """The client's answer, under its request's id, when its upstream call
    could not complete (None: a call of the gateway's own). (The default id
    is for the MRTR bridge's parked call alone, whose answer goes out under a
    later retry's id; issue #11.)"""
    if isinstance(exc, UpstreamUnauthorized):
        return {**exc.reply, "id": msg_id}
    if isinstance(exc, UpstreamTimeout):
        return wire.gateway_error(msg_id, wire.INTERNAL_ERROR, str(exc), reason="upstream-timeout")
    if isinstance(exc, UpstreamNotReading):
        return wire.gateway_error(
            msg_id,
            wire.INTERNAL_ERROR,
            f"Upstream not reading: {exc}",
            reason="upstream-not-reading",
        )
    if isinstance(exc, UpstreamBusy):
        return wire.gateway_error(
            msg_id, wire.INTERNAL_ERROR, f"Upstream busy: {exc}", reason="upstream-busy"
        )
    return wire.gateway_error(
        msg_id, wire.INTERNAL_ERROR, f"Upstream server failed: {exc}", reason="upstream-failed"
    )


def unavailable_reply(why: str, msg_id: wire.RequestId) -> wire.Message:
    """The answer to a request that came while no upstream could be had."""
    return wire.gateway_error(
        msg_id,
        wire.INTERNAL_ERROR,
        f"Upstream server unavailable: {why}",
        reason="upstream-unavailable",
    )
