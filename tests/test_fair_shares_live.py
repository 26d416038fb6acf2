"""Issue #29, class 4, each trigger against a real gateway process on the HTTP
front with two principals (alice, bob: `[http] tokens`) and a real SDK server
behind it: mcp 1.30's FastMCP (compat_matrix/peers/py1_server.py, legacy) or
the modern tasks server on mcp 2.x (compat_matrix/peers/py2_tasks_server.py).
One principal fills its share of a pool; the other still gets a slot; and
ended tasks hold no slot (2025-11-25 basic/utilities/tasks "Resource
Management": "Enforce limits on concurrent tasks per requestor")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway import era, wire
from gateway.core import task_shapes
from gateway.core.fair_share import SHARE_FULL
from tests.http_answers import answer_of
from tests.http_gateway_process import V, modern_headers
from tests.replicas import ROOT, Replica, free_port

pytestmark = pytest.mark.anyio

PY1 = ROOT / ".peers" / "py1" / "bin" / "python"
PY2 = ROOT / ".peers" / "py2" / "bin" / "python"
LEGACY = ["--", str(PY1), str(ROOT / "compat_matrix" / "peers" / "py1_server.py")]
TASKS_SERVER = ["--", str(PY2), str(ROOT / "compat_matrix" / "peers" / "py2_tasks_server.py")]
TOKENS = {"alice": "alice-token-0123456789abcdef", "bob": "bob-token-0123456789abcdef"}
LEGACY_V = "2025-11-25"
EXT: dict[str, Any] = {task_shapes.EXTENSION: {}}


@asynccontextmanager
async def gateway(
    tmp_path: Path, upstream: list[str], config: str = "", http: str = ""
) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """A gateway process with `config` (and `http`, more of its [http] table),
    and a client for each principal."""
    tokens = ", ".join(f'{name} = "{token}"' for name, token in TOKENS.items())
    path = tmp_path / "gateway.toml"
    path.write_text(f"[http]\ntokens = {{ {tokens} }}\n{http}\n{config}")
    replica = Replica("gw", free_port(), path, upstream)
    await replica.start()
    try:
        await replica.until_ready()
        clients = {
            name: httpx.AsyncClient(
                base_url=replica.url, timeout=30, headers={"authorization": f"Bearer {token}"}
            )
            for name, token in TOKENS.items()
        }
        async with clients["alice"], clients["bob"]:
            yield clients
    finally:
        await replica.stop()
        assert replica.log is not None
        assert "Traceback" not in replica.log.read_text()


async def modern_call(
    client: httpx.AsyncClient, name: str, arguments: dict[str, Any], caps: dict[str, Any]
) -> dict[str, Any]:
    meta = {era.PROTOCOL_VERSION: V, era.CLIENT_CAPABILITIES: caps}
    msg = wire.request(1, "tools/call", {"name": name, "arguments": arguments, "_meta": meta})
    headers = modern_headers("tools/call", name)
    return answer_of(await client.post("/mcp", json=msg, headers=headers))


async def modern_task_get(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    meta = {era.PROTOCOL_VERSION: V, era.CLIENT_CAPABILITIES: {"extensions": EXT}}
    msg = wire.request(2, "tasks/get", {"taskId": task_id, "_meta": meta})
    headers = modern_headers("tasks/get", task_id)  # SEP-2663 "Routing Headers"
    reply = answer_of(await client.post("/mcp", json=msg, headers=headers))
    assert "result" in reply, reply
    result: dict[str, Any] = reply["result"]
    return result


async def until_status(get: Any, task_id: str, status: str) -> None:
    with anyio.fail_after(20):
        while True:  # polling is how a client learns a task's status (tasks/get)
            if (await get(task_id))["status"] == status:
                return
            await anyio.sleep(0.05)


def refused(reply: dict[str, Any], reason: str, words: str) -> bool:
    error = reply.get("error") or {}
    return (error.get("data") or {}).get("reason") == reason and words in error.get("message", "")


# -- parked MRTR calls ----------------------------------------------------------------


async def test_a_principal_that_parks_calls_and_walks_away_fills_only_its_share(
    tmp_path: Path,
) -> None:
    """The issue: "one principal parks 1,000 elicitation calls in 1.4 s and
    walks away; every other principal's elicitation call gets parked-limit"."""
    config = "[mrtr]\nmax_parked_calls = 4\nmax_parked_per_principal = 2\n"
    caps: dict[str, Any] = {"elicitation": {}}
    async with gateway(tmp_path, LEGACY, config) as c:
        for _ in range(2):
            parked = await modern_call(c["alice"], "ask_name", {}, caps)
            assert parked["result"]["resultType"] == "input_required", parked
        for _ in range(3):
            third = await modern_call(c["alice"], "ask_name", {}, caps)
            assert refused(third, "parked-limit", "2 per principal"), third
        bobs = await modern_call(c["bob"], "ask_name", {}, caps)
    assert bobs["result"]["resultType"] == "input_required", bobs
    # The operator hears of it once a minute, not once a refusal.
    assert (tmp_path / "gw.log").read_text().count(SHARE_FULL) == 1


# -- the gateway's own tasks for modern clients of a legacy server ---------------------


async def test_completed_tasks_leave_room_and_a_principal_runs_at_most_its_share(
    tmp_path: Path,
) -> None:
    """The issue: "five completed tasks of one principal with max_live = 5 deny
    the next principal a task". Here two of alice's tasks complete; her next
    two still become tasks (completed ones hold no slot), her fifth call,
    past her share of live tasks, is answered when it ends, and bob still
    gets a task."""
    config = "[tasks]\nafter = 0.05\nmax_live = 3\nmax_live_per_principal = 2\n"
    caps: dict[str, Any] = {"extensions": EXT}

    async def task_of(who: str, ms: int) -> str:
        created = await modern_call(c[who], "slow", {"ms": ms}, caps)
        assert created["result"]["resultType"] == "task", created
        task_id: str = created["result"]["taskId"]
        return task_id

    async with gateway(tmp_path, LEGACY, config) as c:
        ended = [await task_of("alice", 200) for _ in range(2)]
        for task_id in ended:
            await until_status(lambda t: modern_task_get(c["alice"], t), task_id, "completed")
        await task_of("alice", 3000)
        await task_of("alice", 3000)
        fifth = await modern_call(c["alice"], "slow", {"ms": 300}, caps)
        assert fifth["result"]["resultType"] == "complete", fifth
        await task_of("bob", 3000)
        # The ended tasks are still there for their client (their ttl).
        assert (await modern_task_get(c["alice"], ended[0]))["status"] == "completed"


# -- 2025-11-25 tasks for legacy clients of a modern server ----------------------------


async def legacy_session(client: httpx.AsyncClient) -> dict[str, str]:
    init = wire.request(
        1,
        "initialize",
        {
            "protocolVersion": LEGACY_V,
            "capabilities": {},
            "clientInfo": {"name": "fair-share-test", "version": "1"},
        },
    )
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    reply = await client.post("/mcp", json=init, headers=headers)
    assert reply.status_code == 200, reply.text
    session = {**headers, "mcp-session-id": reply.headers["mcp-session-id"]}
    session["mcp-protocol-version"] = LEGACY_V
    note = wire.notification("notifications/initialized")
    assert (await client.post("/mcp", json=note, headers=session)).status_code == 202
    return session


async def legacy_request(
    client: httpx.AsyncClient, session: dict[str, str], method: str, params: dict[str, Any]
) -> dict[str, Any]:
    msg = wire.request(7, method, params)
    return answer_of(await client.post("/mcp", json=msg, headers=session))


async def test_legacy_tasks_that_ended_with_their_session_leave_room_for_others(
    tmp_path: Path,
) -> None:
    """The issue: "one principal creates 1,000 tasks (`params.task`) ..., they
    all complete, it ends its session — every other principal's
    task-augmented call now gets too-many-tasks". Alice's two ended tasks
    free their slots; past her share she is refused, bob is not."""
    config = "[tasks]\nmax_live = 3\nmax_live_per_principal = 2\n"

    async with gateway(tmp_path, TASKS_SERVER, config) as c:
        alice = await legacy_session(c["alice"])

        async def create(who: str, session: dict[str, str], seconds: float) -> dict[str, Any]:
            params = {
                "name": "slow_compute",
                "arguments": {"seconds": seconds, "label": who},
                "task": {"ttl": 1e15},  # capped at [tasks] max_wait
            }
            return await legacy_request(c[who], session, "tools/call", params)

        async def get(task_id: str) -> dict[str, Any]:
            got = await legacy_request(c["alice"], alice, "tasks/get", {"taskId": task_id})
            result: dict[str, Any] = got["result"]
            return result

        quick = [(await create("alice", alice, 0.1))["result"]["task"] for _ in range(2)]
        assert all(t["ttl"] <= 3_600_000 for t in quick), quick
        for task in quick:
            await until_status(get, task["taskId"], "completed")
        for _ in range(2):
            assert "task" in (await create("alice", alice, 30))["result"]
        third = await create("alice", alice, 30)
        assert refused(third, "too-many-tasks", "per principal"), third
        deleted = await c["alice"].delete("/mcp", headers=alice)
        assert deleted.status_code in (200, 204), deleted.text
        bob = await legacy_session(c["bob"])
        bobs = await create("bob", bob, 30)
    assert "task" in bobs["result"], bobs


# -- the HTTP front's legacy sessions ------------------------------------------------


async def test_one_principal_opens_at_most_its_share_of_sessions(tmp_path: Path) -> None:
    async with gateway(tmp_path, LEGACY, http="max_sessions = 4") as c:
        for _ in range(3):  # three quarters of four
            await legacy_session(c["alice"])
        init = wire.request(
            1, "initialize", {"protocolVersion": LEGACY_V, "capabilities": {}, "clientInfo": {}}
        )
        headers = {"accept": "application/json, text/event-stream"}
        fourth = await c["alice"].post("/mcp", json=init, headers=headers)
        assert fourth.status_code == 503, fourth.text
        assert "max_sessions_per_principal" in fourth.text
        await legacy_session(c["bob"])
    assert (tmp_path / "gw.log").read_text().count(SHARE_FULL) == 1


# -- subscriptions/listen ----------------------------------------------------------------


async def test_a_listen_names_at_most_max_listen_uris(tmp_path: Path) -> None:
    """The issue: "one listen of 20,000 URIs made 20,000 upstream
    resources/subscribe calls". Past the bound the listen is refused at once,
    before anything goes upstream; within it, it is acknowledged."""
    config = "[upstream]\nmax_listen_uris = 3\n"
    meta = {era.PROTOCOL_VERSION: V, era.CLIENT_CAPABILITIES: {}}

    def listen(uris: list[str]) -> dict[str, Any]:
        params = {"notifications": {"resourceSubscriptions": uris}, "_meta": meta}
        return wire.request(3, "subscriptions/listen", params)

    async with gateway(tmp_path, [*LEGACY, "--notify"], config) as c:
        headers = modern_headers("subscriptions/listen")
        too_many = [f"notes://n{i}" for i in range(4)]
        reply = answer_of(await c["alice"].post("/mcp", json=listen(too_many), headers=headers))
        assert reply["error"]["code"] == wire.INVALID_PARAMS, reply
        assert "max_listen_uris" in reply["error"]["message"]
        async with c["bob"].stream("POST", "/mcp", json=listen(too_many[:3]), headers=headers) as s:
            async for line in s.aiter_lines():
                if line.startswith("data:"):
                    assert "error" not in line, line  # the acknowledgement
                    break
