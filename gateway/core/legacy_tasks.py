"""The 2025-11-25 experimental tasks, as the gateway presents them to legacy
clients of a modern server that offers the tasks extension (issue #16;
2025-11-25 basic/utilities/tasks).

A legacy client asks for a task itself (`params.task` on a `tools/call`):
the gateway answers at once with a `CreateTaskResult` (`{"task": Task}`,
the 2025-11-25 shape: `ttl` and `pollInterval` in milliseconds) and runs the
call, which the modern server may answer at once, with input rounds, or with
a task of its own that the gateway polls (core/legacy_input.py). The
client's `tasks/get`, blocking `tasks/result`, `tasks/list` and `tasks/cancel`
are served from the gateway's record (core/task_book.py). Pure: shapes and
rules; runtime/legacy_task_runner.py runs the calls.
"""

from __future__ import annotations

from typing import Any

from gateway import wire
from gateway.core import task_shapes
from gateway.core.task_book import TaskRecord
from gateway.core.task_shapes import COMPLETED, FAILED

METHODS = ("tasks/get", "tasks/result", "tasks/list", "tasks/cancel")
# "Related Task Metadata": the key naming the task a message belongs to.
RELATED_TASK = "io.modelcontextprotocol/related-task"
# What the gateway declares to a legacy client ("Capabilities"): it lists and
# cancels the tasks it runs, and runs tools/call as a task on request.
CAPABILITIES: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}


def wants_task(params: dict[str, Any] | None) -> bool:
    """A task-augmented request ("Creating Tasks"): `params.task` an object."""
    return isinstance((params or {}).get("task"), dict)


def without_task(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """The request's params as the modern server reads them: no `task` (the
    2026-07-28 extension has none, and a server MUST ignore it)."""
    if params is None or "task" not in params:
        return params
    return {k: v for k, v in params.items() if k != "task"}


def requested_ttl_ms(params: dict[str, Any] | None, ceiling_ms: int) -> int:
    """The `task.ttl` the client asked for, at most the gateway's own ("the
    receiver MAY override the requested ttl")."""
    task = (params or {}).get("task")
    ttl = task.get("ttl") if isinstance(task, dict) else None
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
        return ceiling_ms
    return min(ttl, ceiling_ms)


def tools_may_run_as_tasks(result: dict[str, Any]) -> dict[str, Any]:
    """A tools/list result for a legacy client whose tasks the gateway runs:
    each tool says it may run as one ("Tool-Level Negotiation":
    `execution.taskSupport`), unless it says otherwise already."""
    tools = result.get("tools")
    if not isinstance(tools, list):
        return result
    marked = [
        {**tool, "execution": {"taskSupport": "optional"}}
        if isinstance(tool, dict) and "execution" not in tool
        else tool
        for tool in tools
    ]
    return {**result, "tools": marked}


def related(request: wire.Message, task_id: str) -> wire.Message:
    """A server request made during the task, naming it ("Associating
    Task-Related Messages": `_meta` "io.modelcontextprotocol/related-task")."""
    params = dict(request.get("params") or {})
    meta = params.get("_meta")
    params["_meta"] = {
        **(meta if isinstance(meta, dict) else {}),
        RELATED_TASK: {"taskId": task_id},
    }
    return {**request, "params": params}


def task_view(record: TaskRecord) -> dict[str, Any]:
    """The 2025-11-25 Task: status fields and timing, never the result."""
    modern = record.view()
    task = {
        "taskId": modern["taskId"],
        "status": modern["status"],
        "createdAt": modern["createdAt"],
        "lastUpdatedAt": modern["lastUpdatedAt"],
        "ttl": modern["ttlMs"],
        "pollInterval": modern["pollIntervalMs"],
    }
    if "statusMessage" in modern:
        task["statusMessage"] = modern["statusMessage"]
    return task


def status_notification(record: TaskRecord) -> wire.Message:
    """notifications/tasks/status: the whole Task ("Task Notifications")."""
    return wire.notification("notifications/tasks/status", task_view(record))


def created(msg_id: wire.RequestId, record: TaskRecord) -> wire.Message:
    return wire.result_response(msg_id, {"task": task_view(record)})


def current(msg_id: wire.RequestId, record: TaskRecord) -> wire.Message:
    """tasks/get and tasks/cancel answer with the Task itself."""
    return wire.result_response(msg_id, task_view(record))


def listing(msg_id: wire.RequestId, records: list[TaskRecord]) -> wire.Message:
    """tasks/list: every task the requestor may get, in one page."""
    return wire.result_response(msg_id, {"tasks": [task_view(r) for r in records]})


def outcome(msg_id: wire.RequestId, record: TaskRecord) -> wire.Message:
    """tasks/result of an ended task ("Result Retrieval"): what the call
    itself would have returned, result or error, with the related-task key."""
    related = {RELATED_TASK: {"taskId": record.task_id}}
    if record.status == COMPLETED and record.result is not None:
        meta = record.result.get("_meta")
        merged = {**meta, **related} if isinstance(meta, dict) else related
        return wire.result_response(msg_id, {**record.result, "_meta": merged})
    if record.status == FAILED and record.error is not None:
        return task_shapes.failed_reply(msg_id, record.error)
    return wire.gateway_error(
        msg_id, wire.INTERNAL_ERROR, "The task was cancelled", reason="task-cancelled"
    )


def terminal(msg_id: wire.RequestId, record: TaskRecord) -> wire.Message:
    """ "Task Cancellation": a task already ended cannot be cancelled (-32602)."""
    return wire.error_response(
        msg_id,
        wire.INVALID_PARAMS,
        f"Cannot cancel task in terminal state {record.status!r}",
    )
