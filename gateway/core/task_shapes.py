"""The shapes of the 2026-07-28 tasks extension, `io.modelcontextprotocol/tasks`
(SEP-2663; the ext-tasks specification): a `CreateTaskResult` answering a
`tools/call` (`resultType: "task"`), the `DetailedTask` a `tasks/get` returns,
and the requests that poll, answer and cancel a task. Pure functions over
plain dicts; what a task means for a client of the other era is the
callers' (core/legacy_input.py)."""

from __future__ import annotations

import math
from typing import Any, TypeGuard

from gateway import wire

EXTENSION = "io.modelcontextprotocol/tasks"
TASK = "task"  # the resultType of a CreateTaskResult
WORKING, INPUT_REQUIRED = "working", "input_required"
COMPLETED, FAILED, CANCELLED = "completed", "failed", "cancelled"
STATUSES = frozenset({WORKING, INPUT_REQUIRED, COMPLETED, FAILED, CANCELLED})
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED})
# The requests that name a task; over Streamable HTTP its id travels in
# Mcp-Name ("Streamable HTTP: Routing Headers").
TASK_METHODS = ("tasks/get", "tasks/update", "tasks/cancel")
# A task id is the server's opaque string; one longer than this is not an
# id anybody means, and the gateway does not carry it around.
MAX_TASK_ID = 1024


def offered_by(capabilities: dict[str, Any]) -> bool:
    """Whether a server's capabilities (`server/discover`) declare the extension."""
    extensions = capabilities.get("extensions")
    return isinstance(extensions, dict) and EXTENSION in extensions


def with_extension(capabilities: dict[str, Any]) -> dict[str, Any]:
    """A client's capabilities declaring the extension too (a copy; the
    other extensions it declares stay)."""
    extensions = capabilities.get("extensions")
    merged = dict(extensions) if isinstance(extensions, dict) else {}
    merged.setdefault(EXTENSION, {})
    return {**capabilities, "extensions": merged}


def is_task(result: object) -> TypeGuard[dict[str, Any]]:
    """A CreateTaskResult: `resultType` "task"."""
    return isinstance(result, dict) and result.get("resultType") == TASK


def task_problem(task: object) -> str | None:
    """What is wrong with a task as a server sent it (a CreateTaskResult or
    a tasks/get result), or None: its id, its status, and what its status
    says it carries."""
    if not isinstance(task, dict):
        return "the task is not an object"
    task_id = task.get("taskId")
    if not isinstance(task_id, str) or not task_id or len(task_id) > MAX_TASK_ID:
        return "taskId is not a string of 1 to 1024 characters"
    status = task.get("status")
    if status not in STATUSES:
        return f"status is not one of {', '.join(sorted(STATUSES))}"
    if status == INPUT_REQUIRED and not isinstance(task.get("inputRequests"), dict):
        return "an input_required task without inputRequests"
    if status == COMPLETED and not isinstance(task.get("result"), dict):
        return "a completed task without its result"
    if status == FAILED and not isinstance(task.get("error"), dict):
        return "a failed task without its error"
    return None


def poll_delay(task: dict[str, Any], default: float, floor: float, ceiling: float) -> float:
    """Seconds until the next `tasks/get`: the task's `pollIntervalMs`
    ("Clients SHOULD honor this value"), else `default`, kept within
    [floor, ceiling] so that no server makes the gateway poll in a tight
    loop or wait without end."""
    interval = _milliseconds(task.get("pollIntervalMs"))
    seconds = default if interval is None else interval / 1000
    return min(max(seconds, floor), ceiling)


def ttl_seconds(task: dict[str, Any]) -> float | None:
    """The task's time-to-live from its creation in seconds; None when
    unlimited (null) or not said."""
    ttl = _milliseconds(task.get("ttlMs"))
    return None if ttl is None else ttl / 1000


def _milliseconds(value: object) -> float | None:
    """A duration in milliseconds as a server may send it: a finite number,
    not negative; anything else is None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


def request_params(task_id: str, **fields: Any) -> dict[str, Any]:
    """The params of a tasks/get, tasks/update or tasks/cancel."""
    return {"taskId": task_id, **fields}


def missing_extension(msg_id: wire.RequestId) -> wire.Message:
    """-32021 for a request that needs the extension its client did not
    declare ("Capability Negotiation")."""
    return wire.error_response(
        msg_id,
        wire.MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"Missing required client capability: extensions[{EXTENSION!r}]",
        {"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
    )


# -- the answers the gateway gives for its own tasks (runtime/task_runner.py) ----------
def created(msg_id: wire.RequestId, task: dict[str, Any]) -> wire.Message:
    """A CreateTaskResult: the task's seed state ("Task Creation")."""
    return wire.result_response(msg_id, {"resultType": TASK, **task})


def current(msg_id: wire.RequestId, task: dict[str, Any]) -> wire.Message:
    """A tasks/get result: the DetailedTask, `resultType` "complete"."""
    return wire.result_response(msg_id, {"resultType": "complete", **task})


def acknowledged(msg_id: wire.RequestId) -> wire.Message:
    """The empty acknowledgement of tasks/update and tasks/cancel."""
    return wire.result_response(msg_id, {"resultType": "complete"})


def failed_reply(msg_id: wire.RequestId, error: dict[str, Any]) -> wire.Message:
    """The JSON-RPC error a failed task carries, as the answer the call itself
    would have had ("failed: The request failed due to a JSON-RPC error")."""
    code = error.get("code")
    return wire.error_response(
        msg_id,
        code if isinstance(code, int) and not isinstance(code, bool) else wire.INTERNAL_ERROR,
        str(error.get("message", "The task failed")),
        error.get("data"),
    )


def not_found(msg_id: wire.RequestId, task_id: object) -> wire.Message:
    """-32602 for an unknown task ("Task Polling"); the id quoted short, as a
    client may send anything."""
    shown = repr(task_id)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return wire.error_response(msg_id, wire.INVALID_PARAMS, f"Task not found: {shown}")


def input_responses(params: dict[str, Any]) -> dict[str, Any] | None:
    """A tasks/update's answers, or None when they are not an object."""
    responses = params.get("inputResponses")
    return responses if isinstance(responses, dict) else None


def bad_update(msg_id: wire.RequestId) -> wire.Message:
    return wire.error_response(
        msg_id, wire.INVALID_PARAMS, "Invalid params: inputResponses must be an object"
    )
