"""2025-11-25 tasks presented to legacy clients of a modern server that
offers the tasks extension (issue #16: "Legacy client using 2025-11-25 tasks
→ modern server with the extension: the gateway presents 2025-11-25 tasks
(capabilities, `execution.taskSupport`, task-augmented calls, `tasks/get`,
blocking `tasks/result`, `tasks/list` scoped to the client's session,
`tasks/cancel`)"; 2025-11-25 basic/utilities/tasks). A scripted modern
server, the whole service in process, on trio's mock clock."""

from __future__ import annotations

from typing import Any

import anyio

from gateway import era, wire
from gateway.core import legacy_tasks, task_shapes
from tests.mock_clock import on_mock_clock
from tests.scripted import Client, Recorder, ScriptedServer, gateway, modern_server

CAPS: dict[str, Any] = {"tools": {}, "extensions": {task_shapes.EXTENSION: {}}}
SERVER_TASKS: dict[str, dict[str, Any]] = {}
DUE: dict[str, tuple[float, str]] = {}
ANSWERS: dict[str, Any] = {}  # the inputResponses each server task got
ELICIT = {
    "message": "Sure?",
    "requestedSchema": {"type": "object"},
}  # when each server task completes, and its tool


def server_task(task_id: str, status: str = "working", **fields: Any) -> dict[str, Any]:
    return {
        "taskId": task_id,
        "status": status,
        "createdAt": "2026-12-02T00:00:00Z",
        "lastUpdatedAt": "2026-12-02T00:00:00Z",
        "ttlMs": 60_000,
        "pollIntervalMs": 500,
        **fields,
    }


async def tools_call(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    """`quick` answers at once; any other tool is a task of the server's
    that completes 5 s later (if nobody cancels it), `forever` never."""
    name = msg["params"]["name"]
    if name == "quick":
        return {"content": [{"type": "text", "text": "quick"}]}
    task_id = f"srv-{len(SERVER_TASKS) + 1}"
    SERVER_TASKS[task_id] = server_task(task_id)
    DUE[task_id] = (anyio.current_time() + 5, name)
    return {"resultType": "task", **SERVER_TASKS[task_id]}


async def tasks_get(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    task_id = msg["params"]["taskId"]
    due, name = DUE[task_id]
    running = SERVER_TASKS[task_id]["status"] in ("working", "input_required")
    if running and name == "confirm":
        answer = ANSWERS.get(task_id)
        if answer is None:
            asking = {"c": {"method": "elicitation/create", "params": ELICIT}}
            return server_task(task_id, "input_required", inputRequests=asking)
        said = answer["content"]["confirm"]
        done = {"content": [{"type": "text", "text": f"confirmed: {said}"}]}
        SERVER_TASKS[task_id] = server_task(task_id, "completed", result=done)
    elif running and name != "forever" and anyio.current_time() >= due:
        done = {"content": [{"type": "text", "text": f"{name} done"}]}
        SERVER_TASKS[task_id] = server_task(task_id, "completed", result=done)
    return dict(SERVER_TASKS[task_id])


async def tasks_update(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    ANSWERS[msg["params"]["taskId"]] = msg["params"]["inputResponses"]["c"]
    return {}


async def tasks_cancel(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    task_id = msg["params"]["taskId"]
    SERVER_TASKS[task_id] = server_task(task_id, "cancelled")
    return {}


async def tools_list(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {"tools": [{"name": "slow", "inputSchema": {"type": "object"}}]}


def upstream(log: Recorder) -> Any:
    SERVER_TASKS.clear()
    ANSWERS.clear()
    handlers = {
        "tools/call": tools_call,
        "tools/list": tools_list,
        "tasks/get": tasks_get,
        "tasks/cancel": tasks_cancel,
        "tasks/update": tasks_update,
    }
    return modern_server(handlers, capabilities=CAPS, log=log)


async def legacy(c: Client, method: str, params: dict[str, Any]) -> wire.Message:
    return await c.call(method, params, modern=False, timeout=60)


@on_mock_clock
async def test_the_session_sees_tasks_and_task_tools() -> None:
    """ "Capabilities" and "Tool-Level Negotiation": the server's extension
    shows as the 2025-11-25 `tasks` capability, and each tool may run as a
    task."""
    async with gateway(upstream(Recorder())) as c:
        init = await c.initialize()
        tools = await legacy(c, "tools/list", {})
    assert init["result"]["capabilities"]["tasks"] == legacy_tasks.CAPABILITIES
    assert tools["result"]["tools"][0]["execution"] == {"taskSupport": "optional"}


@on_mock_clock
async def test_a_task_augmented_call_is_a_task_and_tasks_result_waits_for_it() -> None:
    """ "Creating Tasks": a CreateTaskResult at once (the ttl the client asked,
    no more than the gateway's); the server gets no `task` param and the
    extension declared; tasks/get reports working; the blocking tasks/result
    returns the call's result with the related-task key ("Result
    Retrieval")."""
    seen = Recorder()
    async with gateway(upstream(seen)) as c:
        await c.initialize()
        created = await legacy(
            c, "tools/call", {"name": "slow", "arguments": {}, "task": {"ttl": 30_000}}
        )
        task = created["result"]["task"]
        assert task["status"] == "working" and task["ttl"] == 30_000, created
        got = await legacy(c, "tasks/get", {"taskId": task["taskId"]})
        assert got["result"]["status"] == "working"
        result = await legacy(c, "tasks/result", {"taskId": task["taskId"]})
        final = await legacy(c, "tasks/get", {"taskId": task["taskId"]})
    upstream_call = next(m for m in seen if m.get("method") == "tools/call")
    assert "task" not in upstream_call["params"]
    caps = upstream_call["params"]["_meta"][era.CLIENT_CAPABILITIES]
    assert task_shapes.EXTENSION in caps["extensions"]
    assert result["result"]["content"][0]["text"] == "slow done"
    assert result["result"]["_meta"][legacy_tasks.RELATED_TASK] == {"taskId": task["taskId"]}
    assert final["result"]["status"] == "completed"


@on_mock_clock
async def test_cancel_list_and_other_sessions() -> None:
    """ "Task Cancellation": a running task cancelled returns the task
    (cancelled) and cancels the server's task; a terminal one is -32602.
    "tasks/list": only this session's tasks; another session neither lists
    nor gets them."""
    seen = Recorder()
    async with gateway(upstream(seen)) as c:
        await c.initialize()
        params = {"name": "slow", "arguments": {}, "task": {}}
        first = (await legacy(c, "tools/call", params))["result"]["task"]["taskId"]
        params = {"name": "forever", "arguments": {}, "task": {}}
        second = (await legacy(c, "tools/call", params))["result"]["task"]["taskId"]
        await legacy(c, "tasks/result", {"taskId": first})
        cancelled = await legacy(c, "tasks/cancel", {"taskId": second})
        again = await legacy(c, "tasks/cancel", {"taskId": first})
        listed = await legacy(c, "tasks/list", {})
        await seen.wait_for("tasks/cancel", timeout=10)
        other, inbox = c.open_link(principal="mallory")
        init = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "mallory", "version": "1"},
        }
        answers = []
        steps = [("initialize", init), ("tasks/list", {}), ("tasks/get", {"taskId": first})]
        for n, (method, p) in enumerate(steps, start=1):
            await c.service.handle_client_message(other, wire.request(n, method, p), c.requests)
            with anyio.fail_after(10):
                answers.append(await inbox.receive())
            if method == "initialize":
                initialized = wire.notification("notifications/initialized")
                await c.service.handle_client_message(other, initialized, c.requests)
    assert cancelled["result"]["status"] == "cancelled"
    assert again["error"]["code"] == wire.INVALID_PARAMS
    assert sorted(t["status"] for t in listed["result"]["tasks"]) == ["cancelled", "completed"]
    assert answers[1]["result"]["tasks"] == [], answers
    assert answers[2]["error"]["code"] == wire.INVALID_PARAMS


@on_mock_clock
async def test_a_call_without_task_is_answered_as_usual() -> None:
    """A legacy client that does not use tasks gets the final result of a
    tool the server answers with a task (the gateway polls it)."""
    async with gateway(upstream(Recorder())) as c:
        await c.initialize()
        plain = await legacy(c, "tools/call", {"name": "slow", "arguments": {}})
    assert plain["result"]["content"][0]["text"] == "slow done"
    assert "resultType" not in plain["result"]


@on_mock_clock
async def test_input_the_servers_task_needs_is_asked_of_the_client_naming_the_task() -> None:
    """ "Input Required Status" and "Associating Task-Related Messages": while
    the server's task waits for input, the client's task shows
    `input_required` and the client gets the request with the related-task
    key; its answer goes upstream in tasks/update and the task completes."""
    async with gateway(upstream(Recorder())) as c:
        await c.initialize({"elicitation": {}})
        created = await legacy(c, "tools/call", {"name": "confirm", "arguments": {}, "task": {}})
        task_id = created["result"]["task"]["taskId"]
        with anyio.fail_after(10):
            asked = await c.next(timeout=10)
            while asked.get("method") != "elicitation/create":
                asked = await c.next(timeout=10)
        status = (await legacy(c, "tasks/get", {"taskId": task_id}))["result"]["status"]
        await c.send(
            wire.result_response(asked["id"], {"action": "accept", "content": {"confirm": True}})
        )
        result = await legacy(c, "tasks/result", {"taskId": task_id})
    assert asked["params"]["_meta"][legacy_tasks.RELATED_TASK] == {"taskId": task_id}
    assert status == "input_required"
    assert result["result"]["content"][0]["text"] == "confirmed: True"


@on_mock_clock
async def test_status_notifications_tell_the_client_where_its_task_is() -> None:
    """ "Task Notifications": notifications/tasks/status with the whole Task
    when the task waits for input, goes on, and ends."""
    async with gateway(upstream(Recorder())) as c:
        await c.initialize({"elicitation": {}})
        created = await legacy(c, "tools/call", {"name": "confirm", "arguments": {}, "task": {}})
        task_id = created["result"]["task"]["taskId"]
        statuses: list[str] = []
        with anyio.fail_after(30):
            while "completed" not in statuses:  # ends at the task's end (or the bound)
                msg = await c.next(timeout=30)
                if msg.get("method") == "elicitation/create":
                    yes = {"action": "accept", "content": {"confirm": True}}
                    await c.send(wire.result_response(msg["id"], yes))
                elif msg.get("method") == "notifications/tasks/status":
                    assert msg["params"]["taskId"] == task_id
                    assert {"createdAt", "lastUpdatedAt", "ttl"} <= msg["params"].keys()
                    statuses.append(msg["params"]["status"])
    assert statuses == ["input_required", "working", "completed"], statuses


@on_mock_clock
async def test_a_task_that_outlives_its_ttl_fails_then_is_forgotten() -> None:
    """ "TTL and Resource Management": the receiver MAY delete a task after
    its ttl. A legacy client's task whose call outlives the ttl it asked for
    fails (reason task-timeout) and the server's task is cancelled; then the
    task is forgotten (-32602)."""
    seen = Recorder()
    async with gateway(upstream(seen), tasks_max_wait=100) as c:
        await c.initialize()
        params = {"name": "forever", "arguments": {}, "task": {"ttl": 5000}}
        created = await legacy(c, "tools/call", params)
        task_id = created["result"]["task"]["taskId"]
        assert created["result"]["task"]["ttl"] == 5000
        failed = await legacy(c, "tasks/result", {"taskId": task_id})
        await seen.wait_for("tasks/cancel", timeout=10)
        await anyio.sleep(20)  # past the ttl and a sweep of the book
        gone = await legacy(c, "tasks/get", {"taskId": task_id})
    assert failed.get("error", {}).get("data", {}).get("reason") == "task-timeout", failed
    assert gone["error"]["code"] == wire.INVALID_PARAMS
