"""The gateway's own tasks for modern clients of a legacy server (issue #16:
"Modern client (declaring the extension) → legacy server: the gateway may
answer a `tools/call` with a task handle when the legacy call outlasts a
configurable threshold"; SEP-2663 "Task Creation", "Task Polling", "Task
Update Requests", "Task Cancellation", "Capability Negotiation"). A scripted
legacy server, the whole service in process, timers on trio's mock clock:
no sleeps in wall-clock time."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import trio
from hypothesis import given
from hypothesis import strategies as st

from gateway import era, wire
from gateway.core import task_shapes
from tests.fuzz_profiles import FUZZ
from tests.fuzz_requests import JSON
from tests.inprocess import ACCEPT, MODERN_META, V, http_gateway
from tests.mock_clock import mock_clock, on_mock_clock
from tests.scripted import Client, Recorder, ScriptedServer, gateway, legacy_server

EXT: dict[str, Any] = {task_shapes.EXTENSION: {}}
TASKS_META = {era.CLIENT_CAPABILITIES: {"elicitation": {}, "extensions": EXT}}
SETTINGS: dict[str, Any] = {"tasks_after": 2.0, "request_timeout": 30, "state_ttl": 300}


async def tool(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    """`quick` answers at once, `slow` after 10 s, `late_ask` asks for a name
    after 5 s and greets it, `forever` never ends."""
    name = msg["params"]["name"]
    if name == "slow":
        await anyio.sleep(10)
    elif name == "late_ask":
        await anyio.sleep(5)
        answer = await server.ask(
            "elicitation/create", {"message": "Name?", "requestedSchema": {"type": "object"}}
        )
        who = answer["result"]["content"]["name"]
        return {"content": [{"type": "text", "text": f"Hello, {who}"}]}
    elif name == "forever":
        await anyio.sleep_forever()
    return {"content": [{"type": "text", "text": f"{name} done"}]}


def upstream(log: list[wire.Message] | None = None) -> Any:
    return legacy_server({"tools/call": tool}, log=log)


async def call(c: Client, name: str, meta: dict[str, Any] | None = None) -> wire.Message:
    params = {"name": name, "arguments": {}, "_meta": TASKS_META if meta is None else meta}
    return await c.call("tools/call", params, timeout=60)


async def task_request(c: Client, method: str, task_id: str, **fields: Any) -> wire.Message:
    return await c.call(method, {"taskId": task_id, **fields, "_meta": TASKS_META}, timeout=60)


@on_mock_clock
async def test_a_call_that_outlasts_the_threshold_becomes_a_task() -> None:
    """ "Task Creation": past `[tasks] after` the client gets a CreateTaskResult
    (`resultType: "task"`, working); `tasks/get` shows it working, then
    completed with the call's result inlined."""
    async with gateway(upstream(), **SETTINGS) as c:
        created = await call(c, "slow")
        task = created["result"]
        assert task["resultType"] == "task" and task["status"] == "working", task
        assert {"taskId", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"} <= task.keys()
        polled = await task_request(c, "tasks/get", task["taskId"])
        assert polled["result"]["status"] == "working"
        assert polled["result"]["resultType"] == "complete"
        await anyio.sleep(10)
        done = (await task_request(c, "tasks/get", task["taskId"]))["result"]
    assert done["status"] == "completed", done
    assert done["result"]["content"] == [{"type": "text", "text": "slow done"}]
    assert "resultType" not in done["result"]


@on_mock_clock
async def test_a_quick_call_is_answered_as_usual() -> None:
    """The server decides per request: a call that ends within the threshold
    is answered directly, and one from a client without the extension waits
    however long it takes ("MUST NOT return CreateTaskResult to a client that
    did not include the extension capability")."""
    async with gateway(upstream(), **SETTINGS) as c:
        quick = await call(c, "quick")
        slow = await call(c, "slow", meta={era.CLIENT_CAPABILITIES: {}})
    assert quick["result"]["resultType"] == "complete"
    assert quick["result"]["content"][0]["text"] == "quick done"
    assert slow["result"]["resultType"] == "complete"


@on_mock_clock
async def test_input_during_the_task_is_input_required_and_answered_by_tasks_update() -> None:
    """ "Task Update Requests": the legacy server's elicitation during the task
    shows as `input_required` with `inputRequests`; `tasks/update` answers it
    (an empty acknowledgement) and the task completes with what it said. The
    requestState that continues the call never leaves the gateway."""
    async with gateway(upstream(), **SETTINGS) as c:
        task_id = (await call(c, "late_ask"))["result"]["taskId"]
        await anyio.sleep(5)
        waiting = (await task_request(c, "tasks/get", task_id))["result"]
        assert waiting["status"] == "input_required", waiting
        assert "requestState" not in waiting
        [(key, ask)] = waiting["inputRequests"].items()
        assert ask["method"] == "elicitation/create"
        # A key nobody asked for is ignored; the real one continues the call.
        ignored = await task_request(c, "tasks/update", task_id, inputResponses={"nope": {}})
        assert ignored["result"] == {"resultType": "complete"}
        answer = {key: {"action": "accept", "content": {"name": "Ada"}}}
        ack = await task_request(c, "tasks/update", task_id, inputResponses=answer)
        assert ack["result"] == {"resultType": "complete"}
        with anyio.fail_after(10):
            while True:  # each pass is one poll; ends when the task is done
                done = (await task_request(c, "tasks/get", task_id))["result"]
                if done["status"] != "working":
                    break
                await anyio.sleep(0.5)
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "Hello, Ada"


@on_mock_clock
async def test_cancelling_a_task_cancels_the_call_upstream() -> None:
    """ "Task Cancellation": an empty acknowledgement, the task is cancelled,
    and the legacy server hears notifications/cancelled for the call; a
    second cancel is acknowledged the same (idempotent)."""
    seen = Recorder()
    async with gateway(upstream(seen), **SETTINGS) as c:
        task_id = (await call(c, "forever"))["result"]["taskId"]
        ack = await task_request(c, "tasks/cancel", task_id)
        assert ack["result"] == {"resultType": "complete"}
        again = await task_request(c, "tasks/cancel", task_id)
        assert again["result"] == {"resultType": "complete"}
        status = (await task_request(c, "tasks/get", task_id))["result"]["status"]
        await seen.wait_for("notifications/cancelled", timeout=5)
    assert status == "cancelled"


@on_mock_clock
async def test_a_task_is_only_its_principals_and_unknown_ids_are_not_found() -> None:
    """Issue #16: "Task ids unguessable and bound to the principal": another
    principal's tasks/get of a real id looks like an unknown id (-32602)."""
    async with gateway(upstream(), **SETTINGS) as c:
        task_id = (await call(c, "slow"))["result"]["taskId"]
        assert len(task_id) >= 32
        other, inbox = c.open_link(principal="mallory")
        meta = {**TASKS_META, era.PROTOCOL_VERSION: "2026-07-28"}
        await c.service.handle_client_message(
            other, wire.request(9, "tasks/get", {"taskId": task_id, "_meta": meta}), c.requests
        )
        with anyio.fail_after(5):
            stolen = await inbox.receive()
        unknown = await task_request(c, "tasks/get", "x" * 500)
    assert stolen["error"]["code"] == wire.INVALID_PARAMS, stolen
    assert unknown["error"]["code"] == wire.INVALID_PARAMS
    assert len(unknown["error"]["message"]) < 120  # a huge id is not echoed whole


@on_mock_clock
async def test_task_methods_need_the_extension() -> None:
    """ "Capability Negotiation": tasks/get from a client that did not declare
    the extension is -32021 with requiredCapabilities; server/discover
    declares it."""
    async with gateway(upstream(), **SETTINGS) as c:
        refused = await c.call("tasks/get", {"taskId": "t"})
        discover = await c.call("server/discover")
    assert refused["error"]["code"] == wire.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert refused["error"]["data"] == {"requiredCapabilities": {"extensions": EXT}}
    assert discover["result"]["capabilities"]["extensions"] == EXT


@on_mock_clock
async def test_tasks_expire_with_their_ttl_and_stop_their_call() -> None:
    """Issue #16: "bounded by TTL": past `[tasks] ttl` the task is gone
    (-32602) and its call is cancelled upstream."""
    seen = Recorder()
    async with gateway(upstream(seen), **SETTINGS, tasks_ttl=60) as c:
        task_id = (await call(c, "forever"))["result"]["taskId"]
        await anyio.sleep(70)
        gone = await task_request(c, "tasks/get", task_id)
        await seen.wait_for("notifications/cancelled", timeout=5)
    assert gone["error"]["code"] == wire.INVALID_PARAMS


@on_mock_clock
async def test_past_max_live_tasks_calls_are_answered_when_they_end() -> None:
    """Issue #16: "a maximum number of live tasks": with one live, the next
    long call gets its result, no task. (Clients that declared no client
    feature: the others' calls hold the legacy session alone while they run,
    DESIGN "Which call a server request belongs to".)"""
    meta = {era.CLIENT_CAPABILITIES: {"extensions": EXT}}
    async with gateway(upstream(), **SETTINGS, tasks_max_live=1) as c:
        first = await call(c, "forever", meta)
        second = await call(c, "slow", meta)
    assert first["result"]["resultType"] == "task"
    assert second.get("result", {}).get("resultType") == "complete", second


@on_mock_clock
async def test_switched_off_the_task_methods_are_not_found() -> None:
    async with gateway(upstream(), **SETTINGS, tasks_for_modern_clients=False) as c:
        refused = await task_request(c, "tasks/get", "t")
        discover = await c.call("server/discover")
    assert refused["error"]["code"] == wire.METHOD_NOT_FOUND
    assert "extensions" not in discover["result"]["capabilities"]


async def slow_tool(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    await anyio.sleep(0.5)
    return {"content": [{"type": "text", "text": "slow done"}]}


@on_mock_clock
async def test_over_http_a_task_names_its_replica_and_is_polled_from_another_connection() -> None:
    """Issue #16: "a task polled from a second connection"; a task lives on
    the replica that runs it, so its answer carries the affinity cookie
    (docs/deployment.md), and SEP-2663 "Streamable HTTP: Routing Headers":
    tasks/get carries the task id in Mcp-Name."""
    async with http_gateway(legacy_server({"tools/call": slow_tool}), tasks_after=0.05) as g:
        created = await g.modern(
            "tools/call", {"name": "slow", "arguments": {}, "_meta": TASKS_META}
        )
        task = created.json()["result"]
        assert task["resultType"] == "task", task
        assert created.headers["set-cookie"].startswith("mcp_era_gateway_replica=")
        transport = httpx.ASGITransport(app=g.front)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as other:
            params = {"taskId": task["taskId"], "_meta": {**MODERN_META, **TASKS_META}}
            body = {"jsonrpc": "2.0", "id": 7, "method": "tasks/get", "params": params}
            headers = {
                "accept": ACCEPT,
                "mcp-protocol-version": V,
                "mcp-method": "tasks/get",
                "mcp-name": task["taskId"],
            }
            with anyio.fail_after(10):
                while True:  # polls until the task ends
                    polled = (await other.post("/mcp", json=body, headers=headers)).json()
                    if polled["result"]["status"] != "working":
                        break
                    await anyio.sleep(0.05)
            wrong = await other.post("/mcp", json=body, headers={**headers, "mcp-name": "x"})
    assert polled["result"]["status"] == "completed", polled
    assert polled["result"]["result"]["content"][0]["text"] == "slow done"
    assert wrong.status_code == 400  # Mcp-Name must be the task id


REAL_ID = "<the task's id>"
HOSTILE_IDS = st.one_of(st.just(REAL_ID), JSON)
HOSTILE_REQUESTS = st.tuples(
    st.sampled_from(task_shapes.TASK_METHODS),
    HOSTILE_IDS,
    st.one_of(JSON, st.dictionaries(st.text(max_size=6), JSON, max_size=3)),
    st.sampled_from(["owner", "mallory"]),
)


async def _hostile(requests: list[tuple[str, Any, Any, str]]) -> None:
    async with gateway(upstream(), **SETTINGS) as c:
        task_id = (await call(c, "forever"))["result"]["taskId"]
        mallory, inbox = c.open_link(principal="mallory")
        owner_cancelled = False
        for n, (method, raw_id, responses, who) in enumerate(requests, start=100):
            params: dict[str, Any] = {
                "taskId": task_id if raw_id == REAL_ID else raw_id,
                "_meta": {era.PROTOCOL_VERSION: "2026-07-28", **TASKS_META},
            }
            if method == "tasks/update":
                params["inputResponses"] = responses
            if who == "owner":
                await c.send(wire.request(n, method, params))
                reply = await c.next(timeout=10)
            else:
                await c.service.handle_client_message(
                    mallory, wire.request(n, method, params), c.requests
                )
                with anyio.fail_after(10):
                    reply = await inbox.receive()
            assert reply["id"] == n, reply
            mine = who == "owner" and raw_id == REAL_ID
            if not mine or (method == "tasks/update" and not isinstance(responses, dict)):
                # Anything but the owner's well-formed request about its own
                # task is a clear -32602 (or -32600 for a shape the front
                # refuses), and changes nothing.
                assert reply["error"]["code"] in (wire.INVALID_PARAMS, wire.INVALID_REQUEST), reply
                continue
            assert reply["result"]["resultType"] == "complete", reply
            owner_cancelled = owner_cancelled or method == "tasks/cancel"
        status = (await task_request(c, "tasks/get", task_id))["result"]["status"]
    assert status == ("cancelled" if owner_cancelled else "working"), (status, requests)


@FUZZ
@given(requests=st.lists(HOSTILE_REQUESTS, min_size=1, max_size=6))
def test_hostile_task_requests_get_clear_errors_and_touch_no_task(
    requests: list[tuple[str, Any, Any, str]],
) -> None:
    """Issue #16: "a forged task id or state": tasks/get, tasks/update and
    tasks/cancel with ids and answers of any shape, from the task's principal
    and another, never crash the gateway, each get an answer under their id,
    and only the owner's own well-formed requests touch its task."""
    trio.run(_hostile, requests, clock=mock_clock())
