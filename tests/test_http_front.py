"""The HTTP front over real HTTP (2026-07-28 basic/transports/streamable-http:
"Security Warning", "Sending Messages", "Protocol Version Header", "Request
Metadata", "Server Validation"; 2025-11-25 basic/transports "Session Management")."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.http_answers import answer_of
from tests.http_gateway_process import (
    ACCEPT,
    FLAKY,
    V,
    _children,
    call,
    free_port,
    gateway,
    modern_headers,
    wait_ready,
)

pytestmark = pytest.mark.anyio


async def wait_logged(path: Path, text: str) -> None:
    """Until the flaky server (another process) has written `text` to `path`:
    polled every 50 ms, at most 5 s."""
    with anyio.fail_after(5):
        while not _logged(path, text):  # noqa: ASYNC110 - another process writes it
            await anyio.sleep(0.05)


def _logged(path: Path, text: str) -> bool:
    return path.exists() and text in path.read_text()


@asynccontextmanager
async def in_flight(request: Awaitable[Any], calls: Path) -> AsyncIterator[None]:
    """Run `request` until the upstream has received its call (logged to
    `calls`), then leave it: the client closes its connection, unanswered."""
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            await request

        tg.start_soon(run)
        await wait_logged(calls, '"tools/call"')
        yield
        tg.cancel_scope.cancel()


async def test_health_ready_and_metrics(tmp_path: Path) -> None:
    async with gateway(tmp_path) as c:
        assert (await c.get("/healthz")).json() == {"status": "alive"}
        ready = (await c.get("/readyz")).json()
        assert ready["era"] == "legacy" and ready["server"]["name"] == "flaky"
        await c.post(
            "/mcp",
            json=call(1, "tools/call", name="echo"),
            headers=modern_headers("tools/call", "echo"),
        )
        text = (await c.get("/metrics")).text
    assert "mcp_gateway_upstream_ready 1" in text
    assert 'mcp_gateway_requests_total{path="modern->' in text


async def test_modern_call_and_spec_status_codes(tmp_path: Path) -> None:
    async with gateway(tmp_path) as c:
        ok = await c.post(
            "/mcp",
            json=call(1, "tools/call", name="echo"),
            headers=modern_headers("tools/call", "echo"),
        )
        assert ok.status_code == 200 and ok.json()["result"]["resultType"] == "complete"
        ping = await c.post("/mcp", json=call(2, "ping"), headers=modern_headers("ping"))
        assert ping.status_code == 404 and ping.json()["error"]["code"] == -32601
        wrong_name = await c.post(
            "/mcp",
            json=call(3, "tools/call", name="echo"),
            headers=modern_headers("tools/call", "other"),
        )
        assert wrong_name.status_code == 400 and wrong_name.json()["error"]["code"] == -32020
        assert wrong_name.json()["id"] == 3
        no_method = await c.post(
            "/mcp",
            json=call(4, "tools/list"),
            headers={
                "accept": ACCEPT,
                "content-type": "application/json",
                "mcp-protocol-version": V,
            },
        )
        assert no_method.status_code == 400 and no_method.json()["error"]["code"] == -32020
        body = {"jsonrpc": "2.0", "id": 5, "method": "tools/list"}
        no_meta = await c.post("/mcp", json=body, headers=modern_headers("tools/list"))
        assert no_meta.status_code == 400 and no_meta.json()["error"]["code"] == -32602
        old = call(6, "tools/list")
        old["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2099-01-01"
        unsupported = await c.post(
            "/mcp",
            json=old,
            headers=modern_headers("tools/list", **{"mcp-protocol-version": "2099-01-01"}),
        )
        assert unsupported.status_code == 400
        assert unsupported.json()["error"]["data"] == {"supported": [V], "requested": "2099-01-01"}
        b64 = await c.post(
            "/mcp",
            json=call(7, "tools/call", name="echo"),
            headers=modern_headers("tools/call", "=?base64?ZWNobw==?="),
        )
        assert b64.status_code == 200
        assert (await c.get("/mcp", headers={"accept": "text/event-stream"})).status_code == 405
        assert (await c.delete("/mcp")).status_code == 405


async def test_bad_http_input(tmp_path: Path) -> None:
    async with gateway(tmp_path, "--max-message-bytes", "2048") as c:
        h = modern_headers("tools/list")
        assert (await c.post("/mcp", content=b"{nope", headers=h)).json()["error"]["code"] == -32700
        no_accept = {**h, "accept": "application/json"}
        assert (
            await c.post("/mcp", json=call(1, "tools/list"), headers=no_accept)
        ).status_code == 406
        text = {**h, "content-type": "text/plain"}
        assert (await c.post("/mcp", json=call(1, "tools/list"), headers=text)).status_code == 415
        big = call(1, "tools/call", name="echo", arguments={"x": "a" * 5000})
        assert (await c.post("/mcp", json=big, headers=h)).status_code == 413
        echo = call(1, "tools/call", name="echo")
        h = modern_headers("tools/call", "echo")
        evil = {**h, "origin": "http://evil.example"}
        assert (await c.post("/mcp", json=echo, headers=evil)).status_code == 403
        rebind = {**h, "host": "evil.example"}
        assert (await c.post("/mcp", json=echo, headers=rebind)).status_code == 403
        fine = {**h, "origin": f"http://127.0.0.1:{c.base_url.port}"}
        assert (await c.post("/mcp", json=echo, headers=fine)).status_code == 200


async def test_bearer_tokens_name_principals(tmp_path: Path) -> None:
    async with gateway(tmp_path, config='[http]\ntokens = { alice = "s3cret" }\n') as c:
        h = modern_headers("tools/call", "echo")
        echo = call(1, "tools/call", name="echo")
        assert (await c.post("/mcp", json=echo, headers=h)).status_code == 401
        wrong = {**h, "authorization": "Bearer nope"}
        assert (await c.post("/mcp", json=echo, headers=wrong)).status_code == 401
        right = {**h, "authorization": "Bearer s3cret"}
        assert (await c.post("/mcp", json=echo, headers=right)).status_code == 200


async def test_legacy_session_lifecycle(tmp_path: Path) -> None:
    h = {"accept": ACCEPT, "content-type": "application/json"}
    async with gateway(tmp_path) as c:
        init = await c.post(
            "/mcp",
            headers=h,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
        )
        sid = init.headers["mcp-session-id"]
        assert len(sid) >= 16 and all(0x21 <= ord(ch) <= 0x7E for ch in sid)
        sh = {**h, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await c.post("/mcp", headers=sh, json=note)).status_code == 202
        listed = await c.post(
            "/mcp", headers=sh, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}
        )
        assert listed.headers["content-type"].startswith("text/event-stream")
        assert answer_of(listed)["result"] == {}
        tool = await c.post(
            "/mcp",
            headers=sh,
            json={"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo"}},
        )
        assert "resultType" not in answer_of(tool)["result"]
        missing = await c.post(
            "/mcp", headers=h, json={"jsonrpc": "2.0", "id": 4, "method": "tools/list"}
        )
        assert missing.status_code == 400
        unknown = await c.post(
            "/mcp",
            headers={**h, "mcp-session-id": "nope"},
            json={"jsonrpc": "2.0", "id": 5, "method": "tools/list"},
        )
        assert unknown.status_code == 404
        assert (await c.delete("/mcp", headers={"mcp-session-id": sid})).status_code == 200
        gone = await c.post("/mcp", headers=sh, json={"jsonrpc": "2.0", "id": 6, "method": "ping"})
        assert gone.status_code == 404


async def test_progress_comes_on_an_sse_stream_before_the_result(tmp_path: Path) -> None:
    async with gateway(tmp_path) as c:
        msg = call(1, "tools/call", name="progress")
        msg["params"]["_meta"]["progressToken"] = "tok"
        reply = await c.post("/mcp", json=msg, headers=modern_headers("tools/call", "progress"))
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in reply.text.splitlines() if line.startswith("data: ")]
    assert '"progressToken":"tok"' in events[0]
    assert '"resultType":"complete"' in events[-1]


async def test_closing_the_response_stream_cancels_upstream(tmp_path: Path) -> None:
    log, calls = tmp_path / "cancelled.log", tmp_path / "calls.log"
    env = {"FLAKY_LOG": str(log), "FLAKY_CALLS": str(calls)}
    async with gateway(tmp_path, env=env) as c:
        msg = call(1, "tools/call", name="sleep", arguments={"seconds": 3})
        async with in_flight(
            c.post("/mcp", json=msg, headers=modern_headers("tools/call", "sleep")), calls
        ):
            pass
        await wait_logged(log, "notifications/cancelled")


async def _legacy_session(c: httpx.AsyncClient, version: str = "2025-11-25") -> dict[str, str]:
    h = {"accept": ACCEPT, "content-type": "application/json"}
    init = await c.post(
        "/mcp",
        headers=h,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
    )
    sh = {**h, "mcp-session-id": init.headers["mcp-session-id"]}
    sh["mcp-protocol-version"] = version
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await c.post("/mcp", headers=sh, json=note)).status_code == 202
    return sh


async def test_closing_a_legacy_sessions_stream_cancels_upstream(tmp_path: Path) -> None:
    # The request's disconnect watcher wins before any reply: the front must
    # still cancel upstream (the session's link lives on, so nothing else does).
    log, calls = tmp_path / "cancelled.log", tmp_path / "calls.log"
    env = {"FLAKY_LOG": str(log), "FLAKY_CALLS": str(calls)}
    async with gateway(tmp_path, env=env) as c:
        sh = await _legacy_session(c)
        sleep = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"seconds": 1}},
        }
        async with in_flight(c.post("/mcp", headers=sh, json=sleep), calls):
            pass
        await wait_logged(log, "notifications/cancelled")
        # The session is still usable afterwards.
        ping = await c.post("/mcp", headers=sh, json={"jsonrpc": "2.0", "id": 3, "method": "ping"})
        assert answer_of(ping) == {"jsonrpc": "2.0", "id": 3, "result": {}}


async def test_a_2025_11_25_call_outlives_its_stream_and_is_resumed(tmp_path: Path) -> None:
    """2025-11-25 basic/transports, "Resumability and Redelivery": the stream
    is primed with an event id; "Disconnection SHOULD NOT be interpreted as the
    client cancelling its request"; GET with Last-Event-ID gets the rest of
    the stream, the reply included."""
    log = tmp_path / "cancelled.log"
    async with gateway(tmp_path, env={"FLAKY_LOG": str(log)}) as c:
        sh = await _legacy_session(c)
        sleep = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"seconds": 2}},
        }
        last_id = None
        async with c.stream("POST", "/mcp", headers=sh, json=sleep) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            async for line in resp.aiter_lines():  # the priming event comes after a second
                if line.startswith("id: "):
                    last_id = line[4:]
                if line.startswith("retry: "):
                    assert int(line[7:]) == 1000
                    break
        assert last_id is not None
        resumed = await c.get(
            "/mcp", headers={**sh, "accept": "text/event-stream", "last-event-id": last_id}
        )
        assert resumed.status_code == 200
        assert answer_of(resumed)["id"] == 2 and "result" in answer_of(resumed)
        again = await c.get(
            "/mcp", headers={**sh, "accept": "text/event-stream", "last-event-id": last_id}
        )
        assert again.status_code == 400  # delivered whole: nothing left to resume
        assert again.json()["error"]["data"]["reason"] == "unknown-event-id"
    assert not log.exists()  # never cancelled upstream


async def test_each_slow_2025_11_25_call_is_primed_at_its_own_time(tmp_path: Path) -> None:
    """2025-11-25 "Resumability and Redelivery": a call still running at the
    priming time gets its priming event then, not with its reply — the
    second of two calls started apart as well as the first (the front keeps
    one timer for them all, re-armed for the next call due)."""
    calls = tmp_path / "calls.log"
    async with gateway(tmp_path, env={"FLAKY_CALLS": str(calls)}) as c:
        sh = await _legacy_session(c)
        gaps: dict[int, float] = {}

        async def call(msg_id: int) -> None:
            sleep = {
                "jsonrpc": "2.0",
                "id": msg_id,
                "method": "tools/call",
                "params": {"name": "sleep", "arguments": {"seconds": 2.5}},
            }
            primed = None
            async with c.stream("POST", "/mcp", headers=sh, json=sleep) as resp:
                async for line in resp.aiter_lines():  # ends with the reply's data line
                    if line.startswith("retry: "):
                        primed = anyio.current_time()
                    elif line.startswith("data: {"):
                        assert primed is not None
                        gaps[msg_id] = anyio.current_time() - primed
                        break

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, 2)
            await wait_logged(calls, '"sleep"')
            # A real gateway and server: what is tested is when each call's
            # priming time comes, so the second call starts 0.4 s after the
            # first (inside its priming time, so the one timer must re-arm).
            await anyio.sleep(0.4)
            tg.start_soon(call, 3)
    # Primed about a second in, replied 2.5 s in (the second 5 s in: the
    # server sleeps one call at a time): well apart for both.
    assert gaps[2] > 0.7 and gaps[3] > 0.7, gaps


async def test_older_sessions_keep_json_answers(tmp_path: Path) -> None:
    """Priming events (empty data) are for 2025-11-25 clients: an older
    session's requests are answered in JSON, as before."""
    async with gateway(tmp_path) as c:
        sh = await _legacy_session(c, "2025-06-18")
        ping = await c.post("/mcp", headers=sh, json={"jsonrpc": "2.0", "id": 3, "method": "ping"})
    assert ping.headers["content-type"] == "application/json"
    assert ping.json() == {"jsonrpc": "2.0", "id": 3, "result": {}}


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18"])
async def test_a_session_deleted_under_a_request_answers_it_404(
    tmp_path: Path, version: str
) -> None:
    """A call in progress when its session ends is answered 404 at once,
    whether or not its answer would have become a resumable stream (a
    2025-06-18 session's has no priming time to end the wait)."""
    calls = tmp_path / "calls.log"
    async with gateway(tmp_path, env={"FLAKY_CALLS": str(calls)}) as c:
        sh = await _legacy_session(c, version)
        sleep = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"seconds": 5}},
        }
        replies: list[httpx.Response] = []

        async def call() -> None:
            replies.append(await c.post("/mcp", headers=sh, json=sleep))

        with anyio.fail_after(4):  # long before the sleep ends upstream
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await wait_logged(calls, '"tools/call"')
                deleted = await c.delete("/mcp", headers={"mcp-session-id": sh["mcp-session-id"]})
                assert deleted.status_code == 200
    assert replies[0].status_code == 404
    assert replies[0].json()["id"] == 2


def _gone(pid: str) -> bool:
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:  # reaped, perhaps between two looks
        return True


async def test_sigterm_stops_the_sidecar_cleanly(tmp_path: Path) -> None:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "gateway",
        "--listen",
        f"127.0.0.1:{port}",
        "--log-level",
        "warning",
        "--",
        *FLAKY,
    ]
    process = await anyio.open_process(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as c:
            await wait_ready(c)
        children = _children(process.pid)
        process.terminate()
        with anyio.fail_after(10):
            assert await process.wait() == 0
        assert all(map(_gone, children))
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
