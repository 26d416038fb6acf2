"""Issue #15 with real peers: the mcp 1.30 `sse_client` (the deprecated
HTTP+SSE transport) through the gateway's SSE front to a legacy, a
modern-only and a dual-era server over stdio (tests/servers/py1_sse_client.py).

Issue #15: "Such a client is a legacy client: everything the gateway does
for legacy clients applies (sessions, the MRTR bridge as server requests on
its stream, progress, cancellation ...)". The peers come from
`bash peers/install.sh`; when they are missing the tests FAIL, never skip.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.test_real_peers_notifications import http_gateway_process

pytestmark = pytest.mark.peers

REPO = Path(__file__).resolve().parent.parent
PEERS = REPO / ".peers"
PY1, PY2 = str(PEERS / "py1/bin/python"), str(PEERS / "py2/bin/python")
CLIENT = str(REPO / "tests/servers/py1_sse_client.py")
LEGACY = [PY1, str(REPO / "compat_matrix/peers/py1_server.py")]
MODERN = [PY2, str(REPO / "compat_matrix/peers/py2_modern_server.py")]
DUAL = [PY2, str(REPO / "compat_matrix/peers/py2_push_server.py")]


def peers_installed() -> None:
    for peer in (PY1, PY2):
        if not Path(peer).exists():
            pytest.fail(f"peer missing: {peer} (run `bash peers/install.sh`)", pytrace=False)


async def sse_client_through_gateway(tmp_path: Path, server: list[str]) -> dict[str, Any]:
    peers_installed()
    async with http_gateway_process(tmp_path, server) as (client, _):
        url = str(client.base_url.join("/sse"))
        with anyio.fail_after(120):
            done = await anyio.run_process(
                [PY1, CLIENT, url], cwd=REPO, check=False, stdin=subprocess.DEVNULL
            )
    lines = done.stdout.decode().strip().splitlines()
    assert done.returncode == 0 and lines, done.stderr.decode()[-3000:]
    out: dict[str, Any] = json.loads(lines[-1])
    return out


def assert_legacy_session_works(out: dict[str, Any]) -> None:
    assert {"echo", "progress", "ask_name", "slow"} <= set(out["tools"]), out
    assert out["echo"] == ["hi"], out
    # Progress notifications reach the client on its stream.
    assert out["progress"]["seen"] == [1.0, 2.0, 3.0], out
    # "the MRTR bridge as server requests on its stream": the elicitation
    # arrives as elicitation/create and the client's POSTed answer completes the call.
    assert out["ask_name"] == ["Hello, Ada"], out
    assert out["asked"] == ["elicitation/create"], out
    # Cancellation: the client gives up (notifications/cancelled) and the
    # session goes on.
    assert "Timed out" in out["cancelled"], out
    assert out["after_cancel"] == ["again"], out


async def test_sse_client_to_legacy_server(tmp_path: Path) -> None:
    """A 2024-style SSE client reaches a legacy stdio server through the gateway."""
    out = await sse_client_through_gateway(tmp_path, LEGACY)
    assert out["server"] == "py1-fixture", out
    assert_legacy_session_works(out)


async def test_sse_client_to_modern_only_server(tmp_path: Path) -> None:
    """Translated onto a modern-only server: its input_required becomes an
    elicitation/create request on the SSE stream."""
    out = await sse_client_through_gateway(tmp_path, MODERN)
    assert_legacy_session_works(out)


async def test_sse_client_to_dual_era_server(tmp_path: Path) -> None:
    """A dual-era server that pushes its elicitation to a legacy session."""
    out = await sse_client_through_gateway(tmp_path, DUAL)
    assert_legacy_session_works(out)


async def test_ts_sdk_sse_client_to_legacy_server(tmp_path: Path) -> None:
    """The TS SDK 1.x `SSEClientTransport` lists and calls a tool through the
    SSE front (issue #15: "the TS SDK 1.x `SSEClientTransport` ... list and
    call tools")."""
    peers_installed()
    sdk = PEERS / "node/node_modules/@modelcontextprotocol/sdk/package.json"
    if not sdk.exists():
        pytest.fail(f"peer missing: {sdk} (run `bash peers/install.sh`)", pytrace=False)
    async with http_gateway_process(tmp_path, LEGACY) as (client, _):
        url = str(client.base_url.join("/sse"))
        with anyio.fail_after(90):
            done = await anyio.run_process(
                ["node", str(REPO / "tests/servers/ts1_sse_client.mjs"), url],
                cwd=REPO,
                check=False,
                stdin=subprocess.DEVNULL,
            )
    lines = done.stdout.decode().strip().splitlines()
    assert done.returncode == 0 and lines, done.stderr.decode()[-3000:]
    out = json.loads(lines[-1])
    assert out["server"] == "py1-fixture", out
    assert "echo" in out["tools"], out
    assert out["echo"] == ["hi"], out
