"""Held MRTR calls across replicas (issue #13: "for held calls choose,
implement and document how a retry reaches the replica that holds the call
(e.g. an affinity cookie on the `input_required` response for clients that
keep cookies ...), and what a client gets when it lands elsewhere (a clear
error naming the reason; never another call's answers)").

The gateway names itself (`[mrtr] instance_id`) in a cookie on each
`input_required` answer; a balancer routes on it (deploy/haproxy), and a
client that keeps cookies brings it back with its retry."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.http_client import retry_params
from tests.http_gateway_process import FAST, V, _gateway, _until_readyz, modern_headers

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parent.parent
# A legacy server whose `ask` tool elicits (a held call: not a replay tool).
ASKING = ["--", sys.executable, str(ROOT / "bench" / "fast_server.py"), "--era", "legacy"]
KEY = "k" * 32
META = {
    "io.modelcontextprotocol/protocolVersion": V,
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
}


def _config(instance: str, extra: str = "") -> str:
    return FAST + f'[mrtr]\nstate_key = "{KEY}"\ninstance_id = "{instance}"\n' + extra


def _tools_call(msg_id: int, params: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": msg_id,
        "method": "tools/call",
        "params": {**params, "_meta": META},
    }


async def _ask(client: httpx.AsyncClient) -> httpx.Response:
    return await client.post(
        "/mcp",
        json=_tools_call(1, {"name": "ask", "arguments": {}}),
        headers=modern_headers("tools/call", "ask"),
    )


async def _retry(client: httpx.AsyncClient, asked: httpx.Response) -> httpx.Response:
    params = retry_params(asked.json()["result"])
    assert params is not None
    return await client.post(
        "/mcp", json=_tools_call(2, params), headers=modern_headers("tools/call", "ask")
    )


async def test_input_required_names_the_replica_in_a_cookie(tmp_path: Path) -> None:
    async with _gateway(tmp_path, ASKING, _config("gw-a")) as (_, client):
        await _until_readyz(client, 200)
        plain = await client.post(
            "/mcp",
            json=_tools_call(3, {"name": "echo", "arguments": {"text": "x"}}),
            headers=modern_headers("tools/call", "echo"),
        )
        assert plain.status_code == 200 and "set-cookie" not in plain.headers
        asked = await _ask(client)
        assert asked.json()["result"]["resultType"] == "input_required"
        cookie = asked.headers["set-cookie"]
        # As long as a held call waits (state_ttl, 300 s) or a task lives
        # ([tasks] ttl, 3600 s), whichever is longer.
        assert cookie.startswith("mcp_era_gateway_replica=gw-a; Path=/; Max-Age=3600;")
        # httpx keeps cookies, as a browser-like client would: the retry brings it.
        assert client.cookies["mcp_era_gateway_replica"] == "gw-a"
        done = await _retry(client, asked)
        assert done.status_code == 200
        assert done.json()["result"]["content"][0]["text"].startswith("Hello")


async def test_no_cookie_when_affinity_is_off(tmp_path: Path) -> None:
    config = _config("gw-a", '[http]\naffinity_cookie = ""\n')
    async with _gateway(tmp_path, ASKING, config) as (_, client):
        await _until_readyz(client, 200)
        asked = await _ask(client)
        assert asked.json()["result"]["resultType"] == "input_required"
        assert "set-cookie" not in asked.headers


async def test_a_retry_on_another_replica_gets_a_clear_error(tmp_path: Path) -> None:
    """Two replicas with the same state key: the retry of a call held on one
    lands on the other. It gets an error naming the reason, never an answer
    (the call it names is not there)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with (
        _gateway(tmp_path / "a", ASKING, _config("gw-a")) as (_, a),
        _gateway(tmp_path / "b", ASKING, _config("gw-b")) as (_, b),
    ):
        await _until_readyz(a, 200)
        await _until_readyz(b, 200)
        asked = await _ask(a)
        elsewhere = await _retry(b, asked)
        error = elsewhere.json()["error"]
        assert error["code"] == -32602
        assert error["data"] == {"source": "mcp-era-gateway", "reason": "other-instance"}
        assert "another gateway instance ('gw-a'; this is 'gw-b')" in error["message"]
        # The call is still held where it was: its retry there completes.
        done = await _retry(a, asked)
        assert done.json()["result"]["content"][0]["text"].startswith("Hello")
