"""How a routed client request travels upstream: which session lease it
holds, how its progress token is mapped, and whether it can go out at once
(DESIGN §5.1.6, 2026-07-28 "Progress").

The runtime (runtime/client_calls.py) sends a request the moment nothing in
its `Plan` has to wait; otherwise a task does the waiting. Either way the
plan is the same, made here once.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

from gateway import era, wire
from gateway.core.server_requests import ClientView

# Methods that wait on more than a reply: a task serves them.
WAITING_METHODS = frozenset(
    {"logging/setLevel", "subscriptions/listen", "resources/subscribe", "resources/unsubscribe"}
)

# Methods during which a legacy server has no reason to ask its client anything:
# they skip the session lease, so listing never waits behind a parked call.
NO_SERVER_REQUESTS = frozenset(
    {
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "completion/complete",
        "logging/setLevel",
        "ping",
    }
)


class Lease(enum.Enum):
    """How a call holds a legacy session while it runs (DESIGN §5.1.6)."""

    NONE = "none"  # no server request during it can need a client
    SHARED = "shared"
    # A legacy client that declared client features, while another client
    # could claim a server request: nothing else may run beside it.
    EXCLUSIVE = "exclusive"


def lease_for(
    method: str, server_is_legacy: bool, client: ClientView, other_clients: bool
) -> Lease:
    """`other_clients`: another client is connected that could claim a
    server request. Runs for every call: the cheap tests go first."""
    if not server_is_legacy or method in NO_SERVER_REQUESTS:
        return Lease.NONE
    if (
        other_clients
        and client.session is not None
        and any(map(client.declared, era.CLIENT_FEATURES))
    ):
        return Lease.EXCLUSIVE
    return Lease.SHARED


def progress_token(params: dict[str, Any] | None) -> str | int | None:
    """The client's progress token, if it asked for progress."""
    meta = (params or {}).get("_meta")
    if isinstance(meta, dict):
        token = meta.get("progressToken")
        if wire.is_request_id(token):
            return token
    return None


def with_progress_token(params: dict[str, Any] | None, token: str) -> dict[str, Any]:
    """`params` carrying the gateway's upstream token instead of the client's
    (tokens of different clients may collide on a shared session)."""
    out = dict(params or {})
    out["_meta"] = {**out.get("_meta", {}), "progressToken": token}
    return out


def is_unsupported_version(reply: wire.Message) -> bool:
    """-32022: a modern server no longer speaks the version the gateway used."""
    error = reply.get("error")
    return isinstance(error, dict) and error.get("code") == wire.UNSUPPORTED_PROTOCOL_VERSION


class Plan(NamedTuple):
    """(A tuple: one is made for every call.)"""

    lease: Lease
    # The client's progress token (the runtime maps it to an upstream one).
    progress_token: str | int | None
    # Something must be awaited before the request can go out: the session
    # lease, a log level to set upstream first, or a method that waits.
    must_wait: bool


def plan(
    method: str,
    params: dict[str, Any] | None,
    lease: Lease,
    lease_free: bool,
    level_change_needed: bool,
) -> Plan:
    """`lease_free`: a shared lease can be taken at once (no holder, no
    waiting writer)."""
    must_wait = (
        level_change_needed
        or lease is Lease.EXCLUSIVE
        or (lease is Lease.SHARED and not lease_free)
        or method in WAITING_METHODS
    )
    return Plan(lease, progress_token(params), must_wait)
