"""How a routed client request travels upstream: which session lease it
holds, how its progress token is mapped, whether it can go out at once
(DESIGN §5.1.6, 2026-07-28 "Progress"), and what comes after its reply.

The runtime (runtime/client_calls.py) takes one path for every request: it
sends the moment nothing in its `Plan` has to wait, and a task takes over
only at a step that does; after the reply, `after_reply` says whether the
call is done or takes another turn.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, NamedTuple

from gateway import era, wire
from gateway.core import legacy_tasks, mrtr_shapes, task_shapes
from gateway.core.routing import Forward, Shape
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


class Served(enum.Enum):
    """How the gateway serves a routed call: forwarded as it is, or by a part
    of its own (each of those waits, so the call goes on in a task)."""

    FORWARD = "forward"
    # A legacy client's resources/(un)subscribe on a modern server: the
    # session's upstream listen (DESIGN §5.2.6).
    SESSION_SUBSCRIPTION = "session-subscription"
    # A modern client's subscriptions/listen (DESIGN §5.1.9).
    LISTEN = "listen"
    # A legacy client's tasks/* (2025-11-25 tasks) on a modern server's tasks.
    LEGACY_TASK_METHOD = "legacy-task-method"
    # A legacy client's task-augmented tools/call: answered at once with the
    # CreateTaskResult, the call running on.
    LEGACY_TASK_CALL = "legacy-task-call"
    # A modern client's tasks/* of the gateway's own tasks (DESIGN §5.4).
    TASK_METHOD = "task-method"
    # A modern client's tools/call the gateway runs as a task of its own.
    TASK_CALL = "task-call"
    # A call the MRTR bridge carries (DESIGN §5.1.6).
    MRTR = "mrtr"


class ServeSettings(NamedTuple):
    tasks_for_legacy: bool
    tasks_for_modern: bool


def served_by(
    decision: Forward,
    params: dict[str, Any] | None,
    settings: ServeSettings,
    server_capabilities: dict[str, Any] | None,
    task_room: Callable[[str], bool],
    principal: str,
) -> Served:
    """`params`: the client's own (a retry's requestState, a task request);
    `server_capabilities`: the session's server's; `task_room(principal)`:
    whether the client's principal may start one more of the gateway's
    tasks, asked only of a call that could be one (past its share, the call
    is answered as any call: it waits for its own calls, not others' tasks)."""
    method = decision.method
    if decision.shape is Shape.TO_LEGACY:
        if method in ("resources/subscribe", "resources/unsubscribe"):
            return Served.SESSION_SUBSCRIPTION
        if method in legacy_tasks.METHODS:
            return Served.LEGACY_TASK_METHOD
        if (
            method == "tools/call"
            and settings.tasks_for_legacy
            and legacy_tasks.wants_task(params)
            and server_capabilities is not None
            and task_shapes.offered_by(server_capabilities)
        ):
            return Served.LEGACY_TASK_CALL
        return Served.FORWARD
    if decision.shape is not Shape.TO_MODERN:
        return Served.FORWARD
    if method == "subscriptions/listen":
        return Served.LISTEN
    if method in task_shapes.TASK_METHODS:
        return Served.TASK_METHOD
    if (
        method == "tools/call"
        and settings.tasks_for_modern
        and task_shapes.offered_by(decision.client_capabilities)
        and task_room(principal)
    ):
        return Served.TASK_CALL
    return Served.MRTR if bridged(decision, params) else Served.FORWARD


def bridged(decision: Forward, params: dict[str, Any] | None) -> bool:
    """A modern client's call the MRTR bridge carries: an MRTR method from a
    client that can be asked for input, or a retry (it carries requestState)."""
    if decision.method not in era.MRTR_METHODS:
        return False
    return mrtr_shapes.is_retry(params or {}) or bool(
        era.CLIENT_FEATURES & decision.client_capabilities.keys()
    )


class Next(enum.Enum):
    """What comes after an upstream reply, before it is shaped for its client."""

    DONE = "done"
    # -32022: the server moved on; learn its versions, route again, retry once
    # (DESIGN §5.2.7).
    REDISCOVER = "rediscover"
    # A modern server's input_required or task for a legacy client: the
    # legacy-input loop completes it (DESIGN §5.2.5).
    INPUT_LOOP = "input-loop"


def after_reply(shaped_for_legacy: bool, reply: wire.Message, retried: bool) -> Next:
    """`shaped_for_legacy`: a legacy client's call on a modern server
    (Shape.TO_LEGACY), the only kind whose reply can take a turn; `retried`:
    the -32022 retry was made already (it is made once)."""
    if not shaped_for_legacy:
        return Next.DONE
    if not retried and is_unsupported_version(reply):
        return Next.REDISCOVER
    if mrtr_shapes.reply_is_input_required(reply) or task_shapes.is_task(reply.get("result")):
        return Next.INPUT_LOOP
    return Next.DONE
