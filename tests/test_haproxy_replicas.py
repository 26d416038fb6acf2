"""Replicas behind a real load balancer (issue #13): Debian's HAProxy with
deploy/haproxy/haproxy.cfg in front of three gateway replicas, on loopback.

"HAProxy in front of three gateway replicas (config in `deploy/`, started by
the test, health checks on `/readyz`), for an HTTP upstream of each era and for
a stdio upstream per replica (the sidecar pattern): legacy SDK clients keep
their sessions; modern clients spread across replicas; MRTR round trips
complete across replicas (replay tools anywhere, held calls by the chosen
affinity); a retry on the wrong replica gets the documented error." And "A
rolling restart of the three replicas, one at a time, under a steady load of
both eras' clients: zero failed requests, zero lost calls (count them)"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from bench.http_client import retry_params
from tests.http_gateway_process import V, modern_headers
from tests.replicas import ROOT, Cluster, cluster, free_port, haproxy

pytestmark = [
    pytest.mark.anyio,
    # CI installs it (.ci/run), and there a missing HAProxy is a failure.
    pytest.mark.skipif(
        haproxy() is None and not os.environ.get("CI"),
        reason="haproxy is not installed (Debian: apt-get install haproxy)",
    ),
]

PY1 = ROOT / ".peers" / "py1" / "bin" / "python"
SESSION_LOAD = ROOT / "tests" / "servers" / "py1_session_load.py"
FAST_HTTP = ROOT / "bench" / "fast_http_server.py"
FAST_STDIO = ["--", sys.executable, str(ROOT / "bench" / "fast_server.py"), "--era", "legacy"]
KEY = "replicas-share-this-key-0123456789"
CONFIG = f"""
[gateway]
drain_delay = 2.5
[upstream]
health_interval = 0.5
[mrtr]
state_key = "{KEY}"
instance_id = "@INSTANCE@"
"""
META = {
    "io.modelcontextprotocol/protocolVersion": V,
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
}


@asynccontextmanager
async def _http_upstream(era: str) -> AsyncIterator[list[str]]:
    port = free_port()
    process = await anyio.open_process(
        [sys.executable, str(FAST_HTTP), "--era", era, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with httpx.AsyncClient(timeout=2) as client:
            with anyio.fail_after(15):
                while True:  # ends when the server answers (or the bound)
                    try:
                        await client.get(f"http://127.0.0.1:{port}/readyz")
                        break
                    except httpx.TransportError:
                        await anyio.sleep(0.05)
        yield ["--upstream", f"http://127.0.0.1:{port}/mcp"]
    finally:
        process.terminate()
        with anyio.fail_after(10):
            await process.wait()


@asynccontextmanager
async def _upstream(kind: str) -> AsyncIterator[list[str]]:
    if kind == "stdio":  # the sidecar pattern: each replica its own server
        yield FAST_STDIO
        return
    async with _http_upstream(kind) as args:
        yield args


async def _legacy_sdk_sessions(url: str, clients: int, seconds: float) -> list[dict[str, Any]]:
    """`clients` mcp 1.30 SDK clients, each keeping a session busy for `seconds`."""
    reports: list[dict[str, Any]] = []

    async def one() -> None:
        done = await anyio.run_process(
            [str(PY1), str(SESSION_LOAD), f"{url}/mcp", str(seconds), "0.005"],
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        reports.append(json.loads(done.stdout))

    with anyio.fail_after(seconds + 60):
        async with anyio.create_task_group() as tg:
            for _ in range(clients):
                tg.start_soon(one)
    return reports


def _echo(msg_id: int, text: str) -> dict[str, Any]:
    params = {"name": "echo", "arguments": {"text": text}, "_meta": META}
    return {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": params}


async def _modern_echo(client: httpx.AsyncClient, msg_id: int) -> bool:
    answer = await client.post(
        "/mcp", json=_echo(msg_id, f"m{msg_id}"), headers=modern_headers("tools/call", "echo")
    )
    if answer.status_code != 200:
        return False
    result = answer.json().get("result") or {}
    return bool(result.get("content")) and result["content"][0].get("text") == f"m{msg_id}"


@pytest.mark.parametrize("upstream", ["modern", "legacy", "stdio"])
async def test_legacy_sessions_stay_and_modern_calls_spread(tmp_path: Path, upstream: str) -> None:
    """Legacy SDK clients keep their sessions (HAProxy sticks on the
    Mcp-Session-Id the initialize response set: without it, round robin would
    send a session's second request to another replica, which answers 404);
    modern requests are balanced one by one across all three."""
    async with _upstream(upstream) as args, cluster(tmp_path, args, CONFIG) as lb:
        reports = await _legacy_sdk_sessions(lb.url, clients=3, seconds=1.5)
        for report in reports:
            assert report["failures"] == [], report
            assert report["sessions"] == 1 and report["calls"] > 5, report
        before = await lb.requests_served()
        async with httpx.AsyncClient(base_url=lb.url, timeout=10) as client:
            results = [await _modern_echo(client, i) for i in range(30)]
        assert all(results)
        after = await lb.requests_served()
        spread = {name: after[name] - before[name] for name in after}
        assert sum(spread.values()) == 30 and all(n >= 5 for n in spread.values()), spread


async def _ask(client: httpx.AsyncClient) -> httpx.Response:
    params = {"name": "ask", "arguments": {}, "_meta": META}
    return await client.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params},
        headers=modern_headers("tools/call", "ask"),
    )


async def _retry(client: httpx.AsyncClient, asked: httpx.Response) -> httpx.Response:
    result = asked.json()["result"]
    assert result["resultType"] == "input_required", result
    params = {**(retry_params(result) or {}), "_meta": META}
    return await client.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params},
        headers=modern_headers("tools/call", "ask"),
    )


def _said_hello(answer: httpx.Response) -> bool:
    result = answer.json().get("result") or {}
    content = result.get("content") or [{}]
    return answer.status_code == 200 and str(content[0].get("text", "")).startswith("Hello")


async def test_held_mrtr_calls_come_back_by_the_affinity_cookie(tmp_path: Path) -> None:
    """Hold mode (the default): the retry must reach the replica that parked
    the call. A client that keeps cookies gets there through HAProxy (the
    mcp_era_gateway_replica cookie); one that does not lands on the next
    replica (round robin) and gets -32602, data.reason "other-instance"."""
    async with cluster(tmp_path, FAST_STDIO, CONFIG) as lb:
        for _ in range(3):
            async with httpx.AsyncClient(base_url=lb.url, timeout=10) as client:
                asked = await _ask(client)
                assert client.cookies.get("mcp_era_gateway_replica") in ("gw1", "gw2", "gw3")
                assert _said_hello(await _retry(client, asked))
        async with httpx.AsyncClient(base_url=lb.url, timeout=10) as client:
            asked = await _ask(client)
            client.cookies.clear()  # a client that keeps none
            elsewhere = await _retry(client, asked)
        error = elsewhere.json()["error"]
        assert error["code"] == -32602
        assert error["data"] == {"source": "mcp-era-gateway", "reason": "other-instance"}


async def test_replay_tools_complete_on_any_replica(tmp_path: Path) -> None:
    """Replay mode: with the shared state key, the retry runs on whichever
    replica gets it (here always another one: no cookie, round robin)."""
    config = CONFIG + 'replay_tools = ["ask"]\n'
    async with cluster(tmp_path, FAST_STDIO, config) as lb:
        for _ in range(4):
            async with httpx.AsyncClient(base_url=lb.url, timeout=10) as client:
                asked = await _ask(client)
                client.cookies.clear()
                again = await _retry(client, asked)
                assert _said_hello(again), again.text


async def test_rolling_restart_under_load_fails_no_request(tmp_path: Path) -> None:
    """Each replica in turn gets SIGTERM (it drains: /readyz 503, HAProxy
    takes it out, then it stops accepting and finishes what it has), exits 0
    and starts again, while modern clients and legacy SDK sessions keep
    calling through HAProxy. Every modern request is answered correctly; the
    legacy clients see no failure — a session whose replica went away is
    answered 404 and the client starts a new one, as the spec says (counted)."""
    counts = {"sent": 0, "ok": 0, "failed": 0}
    stop = anyio.Event()

    async def modern_load(lb: Cluster, worker: int) -> None:
        async with httpx.AsyncClient(base_url=lb.url, timeout=10) as client:
            msg_id = worker * 1_000_000
            while not stop.is_set():  # ends when the restarts are over
                msg_id += 1
                counts["sent"] += 1
                try:
                    ok = await _modern_echo(client, msg_id)
                except httpx.HTTPError:
                    ok = False
                counts["ok" if ok else "failed"] += 1
                await anyio.sleep(0.005)

    legacy: list[dict[str, Any]] = []
    codes: list[int] = []
    async with _http_upstream("legacy") as args, cluster(tmp_path, args, CONFIG) as lb:
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for worker in range(4):
                    tg.start_soon(modern_load, lb, worker)

                async def legacy_load() -> None:
                    legacy.extend(await _legacy_sdk_sessions(lb.url, clients=2, seconds=25))

                tg.start_soon(legacy_load)
                await anyio.sleep(1)  # the load is under way
                for replica in lb.replicas:
                    codes.append(await lb.restart(replica))
                await anyio.sleep(1)
                stop.set()
    print(f"\nrolling restart: modern {counts}; legacy SDK clients {legacy}")
    assert codes == [0, 0, 0]
    assert counts["failed"] == 0 and counts["ok"] == counts["sent"] > 100, counts
    for report in legacy:
        assert report["failures"] == [], report
        assert report["calls"] > 100, report


async def test_rotating_the_state_key_across_replicas_mid_load(tmp_path: Path) -> None:
    """Issue #13: "Key rotation across replicas mid-load: no state rejected
    that was sealed with a key still listed". MRTR interactions of a replay
    tool run through HAProxy without cookies, so each retry lands on another
    replica than its input_required came from, while the replicas roll, one
    at a time, from key A to [A, B], then to [B, A] (docs/deployment.md,
    "Rotating the state key"): at every moment some replicas seal with one key and others
    open with the other."""
    old, new = "old-key-" + "a" * 24, "new-key-" + "b" * 24
    counts = {"interactions": 0, "ok": 0, "failed": 0}
    failures: list[str] = []
    stop = anyio.Event()

    def config(keys: list[str]) -> str:
        listed = ", ".join(f'"{k}"' for k in keys)
        return CONFIG.replace(f'state_key = "{KEY}"', f"state_key = [{listed}]") + (
            'replay_tools = ["ask"]\n'
        )

    async def interactions(lb: Cluster) -> None:
        async with httpx.AsyncClient(base_url=lb.url, timeout=10) as client:
            while not stop.is_set():  # ends when the keys have rolled
                counts["interactions"] += 1
                try:
                    asked = await _ask(client)
                    client.cookies.clear()
                    done = await _retry(client, asked)
                    ok = _said_hello(done)
                    if not ok:
                        failures.append(done.text)
                except (httpx.HTTPError, KeyError, AssertionError) as exc:
                    ok = False
                    failures.append(repr(exc))
                counts["ok" if ok else "failed"] += 1

    async with cluster(tmp_path, FAST_STDIO, config([old])) as lb:
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(interactions, lb)
                await anyio.sleep(0.5)
                for keys in ([old, new], [new, old]):
                    for replica in lb.replicas:
                        replica.config.write_text(config(keys).replace("@INSTANCE@", replica.name))
                        assert await lb.restart(replica) == 0
                await anyio.sleep(0.5)
                stop.set()
    print(f"\nkey rotation: {counts}")
    assert counts["failed"] == 0, failures[:3]
    assert counts["ok"] > 50, counts


async def test_http_sse_sessions_stay_on_their_replica(tmp_path: Path) -> None:
    """Issue #15 behind the load balancer: an HTTP+SSE client's POSTs
    (`/messages?session_id=...`) must reach the replica holding its stream;
    round robin would send two in three elsewhere (404). HAProxy learns the
    session from the Mcp-Session-Id the gateway also sets on the GET /sse
    response and sticks on the POSTs' session_id. Three mcp 1.30 SSE clients
    at once, every step (tools, progress, elicitation, sampling, roots, a
    subscription, cancellation), the legacy fixture per replica."""
    server = ["--", str(PY1), str(ROOT / "compat_matrix/peers/py1_server.py"), "--notify"]
    outs: list[dict[str, Any]] = []

    async def one(url: str) -> None:
        done = await anyio.run_process(
            [str(PY1), str(ROOT / "tests/servers/py1_sse_client.py"), url], check=False
        )
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        outs.append(json.loads(done.stdout.decode().strip().splitlines()[-1]))

    async with cluster(tmp_path, server, CONFIG) as lb:
        before = await lb.requests_served()
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(one, f"{lb.url}/sse")
        after = await lb.requests_served()
    for out in outs:
        assert out["ask_name"] == ["Hello, Ada"] and out["updated"] == ["notes://sse"], out
        assert out["after_cancel"] == ["again"], out
    assert len(outs) == 3
    # The sessions were spread: more than one replica served some.
    served = [after[name] - before[name] for name in after]
    assert sum(served) >= 3 * 10 and sum(1 for n in served if n) >= 2, served
