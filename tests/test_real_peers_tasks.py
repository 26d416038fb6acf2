"""Issue #16 with real peers: a legacy client (mcp 1.30 `ClientSession`,
tests/servers/py1_task_client.py) calls the task tools of a modern-only
server with the tasks extension (mcp 2.3, compat_matrix/peers/py2_tasks_server.py)
through the gateway, the server wrapped over stdio and served over HTTP.

Issue #16: "A legacy client that does not use tasks but calls a tool the
modern server answers with a task gets the final result as an ordinary
`tools/call` result (the gateway polls, honouring `pollIntervalMilliseconds`)";
input during a task reaches the client as server requests; a task's failure is
the call's error; a client that cancels the call cancels the task upstream.
The peers come from `bash peers/install.sh`; when they are missing the tests
FAIL, never skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gateway.core import task_shapes
from tests.http_back_support import PEERS, Peer, free_port

pytestmark = [pytest.mark.peers]

REPO = Path(__file__).resolve().parent.parent
SERVER = str(REPO / "compat_matrix/peers/py2_tasks_server.py")
CLIENT = str(REPO / "tests/servers/py1_task_client.py")
PY1, PY2 = str(PEERS / "py1/bin/python"), str(PEERS / "py2/bin/python")
GATEWAY = [sys.executable, "-m", "gateway", "--log-level", "warning"]


def peers_installed() -> None:
    for peer in (PY1, PY2):
        if not Path(peer).exists():
            pytest.fail(f"peer missing: {peer} (run `bash peers/install.sh`)", pytrace=False)


Request = Callable[[str, dict[str, Any]], dict[str, Any]]


@contextmanager
def stdio_gateway(server: list[str], env: dict[str, str] | None = None) -> Iterator[Request]:
    """The gateway over stdio in front of `server`, for a raw modern client:
    `request(method, params)` sends one request and returns its reply."""
    with subprocess.Popen(
        [*GATEWAY, "--", *server],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as gateway:
        assert gateway.stdin is not None and gateway.stdout is not None
        stdin, stdout = gateway.stdin, gateway.stdout
        ids = iter(range(1, 1000))

        def request(method: str, params: dict[str, Any]) -> dict[str, Any]:
            msg_id = next(ids)
            body = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}
            stdin.write(json.dumps(body).encode() + b"\n")
            stdin.flush()
            while True:  # ends at the reply (the test's timeout bounds it)
                msg: dict[str, Any] = json.loads(stdout.readline())
                if msg.get("id") == msg_id and "method" not in msg:
                    return msg

        try:
            yield request
        finally:
            stdin.close()
            gateway.wait(timeout=15)


def through_gateway(target: list[str]) -> dict[str, Any]:
    peers_installed()
    done = subprocess.run(
        [PY1, CLIENT, "--", *GATEWAY, *target],
        cwd=REPO,
        capture_output=True,
        timeout=120,
        check=False,
    )
    lines = [line for line in done.stdout.decode().splitlines() if line.startswith("{")]
    assert lines, done.stderr.decode()[-3000:]
    out: dict[str, Any] = json.loads(lines[-1])
    return out


@pytest.fixture(scope="module")
def tasks_http() -> Iterator[str]:
    peers_installed()
    port = free_port()
    server = Peer([PY2, SERVER, "--http", str(port)], port)
    server.start()
    try:
        server.wait_listening(time.monotonic() + 30)
        yield server.url
    finally:
        server.stop()


def assert_every_task_answered(out: dict[str, Any]) -> None:
    assert out["greet"] == ["Hello, Ada!"], out  # never a task
    assert out["slow"] == ["computed x after 0.5s"], out  # polled to its result
    # Input during the task: an elicitation to the legacy client, its answer
    # sent back with tasks/update.
    assert out["confirm"] == ["deleted"], out
    assert (
        sorted(out["multi"].values(), key=str)
        == [{"action": "accept", "content": {"name": "Alice"}}] * 2
    ), out
    # SEP-2663 "Task Status": a tool error completes the task, isError kept;
    # a JSON-RPC error fails it, and the call fails with that error.
    assert out["failing"]["isError"] is True, out
    assert out["protocol_error"] == {"code": -32603, "message": "boom"}, out
    # An MRTR round before the task, then the task (required: without the
    # extension the server would answer -32021).
    assert out["with_task"] == ["Hello, Alice!"], out
    assert out["asked"] == ["Delete a.txt?", "First?", "Second?", "Your name?"], out


def test_a_legacy_client_gets_a_modern_servers_tasks_answered_over_stdio() -> None:
    assert_every_task_answered(through_gateway(["--", PY2, SERVER]))


def test_a_legacy_client_gets_a_modern_servers_tasks_answered_over_http(tasks_http: str) -> None:
    assert_every_task_answered(through_gateway(["--upstream", tasks_http]))


def test_a_cancelled_call_cancels_its_task_upstream() -> None:
    """2025-11-25 "Cancellation": the legacy client's notifications/cancelled
    ends its call (no reply), and the gateway sends the task's tasks/cancel
    (SEP-2663 "Task Cancellation"); the server says it stopped one task."""
    peers_installed()
    gateway = subprocess.Popen(
        [*GATEWAY, "--", PY2, SERVER],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert gateway.stdin is not None and gateway.stdout is not None
    stdin, stdout = gateway.stdin, gateway.stdout

    def send(msg: dict[str, Any]) -> None:
        stdin.write(json.dumps(msg).encode() + b"\n")
        stdin.flush()

    def reply_to(msg_id: int) -> dict[str, Any]:
        while True:  # ends at the reply (the test's timeout bounds it)
            msg: dict[str, Any] = json.loads(stdout.readline())
            assert msg.get("id") != 2, f"the cancelled call was answered: {msg}"
            if msg.get("id") == msg_id and "method" not in msg:
                return msg

    try:
        init = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        }
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
        reply_to(1)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        slow = {"name": "slow_compute", "arguments": {"seconds": 60}}
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": slow})
        time.sleep(0.5)  # the task exists upstream by then (a real process: no event to wait on)
        send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}})
        stopped: list[str] = []
        deadline = time.monotonic() + 15
        n = 10
        while not stopped and time.monotonic() < deadline:
            n += 1
            count = {"name": "tasks_cancelled", "arguments": {}}
            send({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": count})
            stopped = json.loads(reply_to(n)["result"]["content"][0]["text"])
        assert len(stopped) == 1, stopped
    finally:
        stdin.close()
        gateway.wait(timeout=15)
        stdout.close()


def test_a_modern_client_gets_a_task_for_a_slow_call_of_a_legacy_server() -> None:
    """Issue #16: "Modern client (declaring the extension) → legacy server:
    the gateway may answer a `tools/call` with a task handle when the legacy
    call outlasts a configurable threshold", with the mcp 1.30 FastMCP
    fixture: discover declares the extension, a 2.5 s call past `[tasks]
    after` (0.5 s) is a task whose tasks/get ends completed with the result;
    a cancelled task's call is cancelled upstream and the server goes on."""
    peers_installed()
    legacy = [PY1, str(REPO / "compat_matrix/peers/py1_server.py")]
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {task_shapes.EXTENSION: {}}},
    }
    with stdio_gateway(legacy, {"MCP_ERA_GATEWAY_TASKS_AFTER": "0.5"}) as send:

        def request(method: str, params: dict[str, Any]) -> dict[str, Any]:
            return send(method, {**params, "_meta": meta})

        discover = request("server/discover", {})
        assert task_shapes.EXTENSION in discover["result"]["capabilities"]["extensions"]
        created = request("tools/call", {"name": "slow", "arguments": {"ms": 2500}})
        task = created["result"]
        assert task["resultType"] == "task" and task["status"] == "working", created
        deadline = time.monotonic() + 20
        while True:  # polls at the task's interval until it ends
            polled = request("tasks/get", {"taskId": task["taskId"]})["result"]
            if polled["status"] != "working" or time.monotonic() > deadline:
                break
            time.sleep(task["pollIntervalMs"] / 1000)
        assert polled["status"] == "completed", polled
        assert polled["result"]["content"][0]["text"] == "done", polled
        stuck = request("tools/call", {"name": "slow", "arguments": {"ms": 60_000}})
        task_id = stuck["result"]["taskId"]
        assert request("tasks/cancel", {"taskId": task_id})["result"] == {"resultType": "complete"}
        assert request("tasks/get", {"taskId": task_id})["result"]["status"] == "cancelled"
        echo = request("tools/call", {"name": "echo", "arguments": {"text": "still here"}})
        assert echo["result"]["content"][0]["text"] == "still here", echo


def test_a_legacy_clients_own_tasks_run_on_a_modern_servers_extension() -> None:
    """Issue #16: "Legacy client using 2025-11-25 tasks → modern server with
    the extension: the gateway presents 2025-11-25 tasks (capabilities,
    `execution.taskSupport`, task-augmented calls, `tasks/get`, blocking
    `tasks/result`, `tasks/list` scoped to the client's session,
    `tasks/cancel`)", with mcp 1.30's own experimental tasks client: input
    during the task reaches it as a server request; its cancel cancels the
    server's task upstream."""
    peers_installed()
    done = subprocess.run(
        [PY1, str(REPO / "tests/servers/py1_legacy_tasks_client.py"), "--", *GATEWAY, "--", PY2,
         SERVER],
        cwd=REPO, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    lines = [line for line in done.stdout.decode().splitlines() if line.startswith("{")]
    assert lines, done.stderr.decode()[-3000:]
    out = json.loads(lines[-1])
    assert out["tasks_capability"] == {
        "list": {},
        "cancel": {},
        "requests": {"tools": {"call": {}}},
    }
    assert out["task_support"] == "optional", out
    assert out["created"] == "working" and "completed" in out["statuses"], out
    assert out["result"] == ["computed t after 1.0s"], out
    assert out["confirm"] == ["deleted"], out
    assert out["cancelled"] == "cancelled" and out["cancelled_upstream"] == 1, out
    assert out["listed"] == ["cancelled", "completed", "completed"], out
    assert out["unknown"] == -32602, out
    assert out["plain"] == ["Hello, Ada!"], out


def test_a_tool_a_legacy_server_runs_only_as_a_task_works_for_a_modern_client() -> None:
    """2025-11-25 "Tool-Level Negotiation": the reference everything server
    (TS SDK 1.x) lists `simulate-research-query` with `taskSupport:
    "required"` and refuses it called plainly. Through the gateway a modern
    client just calls it: the gateway calls it as a task and waits on
    tasks/result; an elicitation during the task reaches the client as an
    MRTR round like any other."""
    everything = PEERS / "node/node_modules/.bin/mcp-server-everything"
    if not everything.exists():
        pytest.fail(f"peer missing: {everything} (run `bash peers/install.sh`)", pytrace=False)

    def meta(caps: dict[str, Any]) -> dict[str, Any]:
        return {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": caps,
        }

    with stdio_gateway([str(everything), "stdio"]) as request:
        tools = request("tools/list", {"_meta": meta({})})["result"]["tools"]
        [research] = [t for t in tools if t["name"] == "simulate-research-query"]
        assert research["execution"] == {"taskSupport": "required"}
        plain = {"name": research["name"], "arguments": {"topic": "bees"}}
        done = request("tools/call", {**plain, "_meta": meta({})})
        assert "Research Report: bees" in done["result"]["content"][0]["text"], done
        asking = {**plain, "arguments": {"topic": "bees", "ambiguous": True}}
        caps: dict[str, Any] = {"elicitation": {}, "roots": {}}
        reply = request("tools/call", {**asking, "_meta": meta(caps)})
        asked: list[str] = []
        for _ in range(5):  # each pass answers one input round
            result = reply["result"]
            if result.get("resultType") != "input_required":
                break
            answers: dict[str, Any] = {}
            for key, ask in result["inputRequests"].items():
                asked.append(ask["method"])
                if ask["method"] == "roots/list":
                    answers[key] = {"roots": []}
                else:
                    content = {"interpretation": "historical"}
                    answers[key] = {"action": "accept", "content": content}
            retry = {
                **asking,
                "inputResponses": answers,
                "requestState": result["requestState"],
            }
            reply = request("tools/call", {**retry, "_meta": meta(caps)})
        assert "elicitation/create" in asked, asked
        text = reply["result"]["content"][0]["text"]
        assert "Clarification**: historical" in text, reply


def test_a_legacy_servers_own_tasks_serve_modern_clients() -> None:
    """Issue #16: "Where the legacy server itself supports 2025-11-25 tasks
    for that tool, use them upstream", with mcp 1.30's experimental tasks
    server (compat_matrix/peers/py1_tasks_server.py): a tool that may run as
    a task runs as the server's own for a client that declared the
    extension ("slow done", where a plain call says "(sync)"), plainly for
    one that did not; a tool that must, for every client, and the
    elicitation the server sends inside tasks/result reaches the client as
    an MRTR round."""
    peers_installed()
    fixture = [PY1, str(REPO / "compat_matrix/peers/py1_tasks_server.py")]

    def meta(caps: dict[str, Any]) -> dict[str, Any]:
        return {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": caps,
        }

    with stdio_gateway(fixture) as request:
        listed = request("tools/list", {"_meta": meta({})})["result"]["tools"]
        assert {t["name"] for t in listed} == {"slow", "ask", "plain"}
        plain = request("tools/call", {"name": "slow", "arguments": {}, "_meta": meta({})})
        assert plain["result"]["content"][0]["text"] == "slow done (sync)", plain
        tasks: dict[str, Any] = {"extensions": {task_shapes.EXTENSION: {}}}
        own = request("tools/call", {"name": "slow", "arguments": {}, "_meta": meta(tasks)})
        assert own["result"]["content"][0]["text"] == "slow done", own
        ask = {"name": "ask", "arguments": {}, "_meta": meta({"elicitation": {}})}
        asked = request("tools/call", ask)["result"]
        assert asked["resultType"] == "input_required", asked
        [(key, elicit)] = asked["inputRequests"].items()
        assert elicit["method"] == "elicitation/create"
        answer = {key: {"action": "accept", "content": {"name": "Ada"}}}
        retry = {**ask, "inputResponses": answer, "requestState": asked["requestState"]}
        done = request("tools/call", retry)
        assert done["result"]["content"][0]["text"] == "hello Ada", done


def test_the_ts_sdk_1x_tasks_client_on_a_modern_servers_extension() -> None:
    """Issue #16, real peers: the TS SDK 1.x client's own 2025-11-25 tasks
    (`client.experimental.tasks.callToolStream`, `cancelTask`, `listTasks`)
    through the gateway to the modern server with the extension."""
    peers_installed()
    sdk = PEERS / "node/node_modules/@modelcontextprotocol/sdk/package.json"
    if not sdk.exists():
        pytest.fail(f"peer missing: {sdk} (run `bash peers/install.sh`)", pytrace=False)
    client = str(REPO / "tests/servers/ts1_tasks_client.mjs")
    done = subprocess.run(
        ["node", client, *GATEWAY, "--", PY2, SERVER],
        cwd=REPO, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    lines = [line for line in done.stdout.decode().splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, done.stderr.decode()[-3000:]
    out = json.loads(lines[-1])
    assert out["tasks"]["requests"] == {"tools": {"call": {}}}, out
    assert out["taskSupport"] == "optional", out
    assert out["slow"] == {"seen": ["working", "completed"], "text": "computed ts after 1.0s"}
    assert out["confirm"]["text"] == "deleted", out
    assert out["cancelled"] == "cancelled", out
    assert out["listed"] == ["cancelled", "completed", "completed"], out
