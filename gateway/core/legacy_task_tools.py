"""A legacy server's own 2025-11-25 tasks, used for modern clients (issue
#16: "Where the legacy server itself supports 2025-11-25 tasks for that
tool, use them upstream"; 2025-11-25 basic/utilities/tasks "Tool-Level
Negotiation": a tool with `execution.taskSupport: "required"` MUST be called
task-augmented, and the server refuses it otherwise).

A modern client knows nothing of that: the gateway calls such a tool
task-augmented (`params.task`) and, at once, the blocking `tasks/result`,
whose answer is the call's. Server requests during it arrive on the session
as during any call, so the MRTR bridge carries them to the client. Pure
shapes; runtime/session_calls.py sends the two requests."""

from __future__ import annotations

from typing import Any

from gateway import wire
from gateway.core.legacy_tasks import RELATED_TASK


def server_runs_tool_tasks(capabilities: dict[str, Any]) -> bool:
    """The InitializeResult declares `tasks.requests.tools.call`."""
    tasks = capabilities.get("tasks")
    requests = tasks.get("requests") if isinstance(tasks, dict) else None
    tools = requests.get("tools") if isinstance(requests, dict) else None
    return isinstance(tools, dict) and isinstance(tools.get("call"), dict)


REQUIRED, OPTIONAL = "required", "optional"


def task_support(result: object) -> dict[str, str]:
    """The tools of a tools/list result that may or must run as tasks, and
    which (`taskSupport` "optional" or "required")."""
    tools = result.get("tools") if isinstance(result, dict) else None
    support: dict[str, str] = {}
    for tool in tools if isinstance(tools, list) else []:
        execution = tool.get("execution") if isinstance(tool, dict) else None
        mode = execution.get("taskSupport") if isinstance(execution, dict) else None
        name = tool.get("name") if isinstance(tool, dict) else None
        if isinstance(name, str) and mode in (REQUIRED, OPTIONAL):
            support[name] = mode
    return support


def runs_as_task(support: str | None, client_wants_tasks: bool) -> bool:
    """Whether a modern client's call goes to the legacy server as a task: a
    tool that requires one, always; one that may, when the client declared
    the tasks extension (its long call is the server's own task, not a call
    the gateway holds)."""
    return support == REQUIRED or (support == OPTIONAL and client_wants_tasks)


def augmented(params: dict[str, Any] | None, ttl_ms: int) -> dict[str, Any]:
    """The call's params asking for a task ("Creating Tasks")."""
    return {**(params or {}), "task": {"ttl": ttl_ms}}


def created_task(reply: wire.Message) -> str | None:
    """The task id of a CreateTaskResult (`{"task": {"taskId": ...}}`), or None."""
    result = reply.get("result")
    task = result.get("task") if isinstance(result, dict) else None
    task_id = task.get("taskId") if isinstance(task, dict) else None
    return task_id if isinstance(task_id, str) and task_id else None


def call_reply(reply: wire.Message) -> wire.Message:
    """tasks/result's answer as the call's: without the related-task key,
    which names a task the modern client never saw."""
    result = reply.get("result")
    meta = result.get("_meta") if isinstance(result, dict) else None
    if not isinstance(meta, dict) or RELATED_TASK not in meta:
        return reply
    rest = {k: v for k, v in meta.items() if k != RELATED_TASK}
    assert isinstance(result, dict)
    shaped = {k: v for k, v in result.items() if k != "_meta"}
    if rest:
        shaped["_meta"] = rest
    return {**reply, "result": shaped}
