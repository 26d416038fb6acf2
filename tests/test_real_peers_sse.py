"""Issue #15 with real peers: the mcp 1.30 `sse_client` and the TS SDK 1.x
`SSEClientTransport` (the deprecated HTTP+SSE transport) through the
gateway's SSE front to a legacy (mcp 1.30 FastMCP), a modern-only and a
dual-era (mcp 2.3) server, each wrapped over stdio and served over
Streamable HTTP behind the gateway's HTTP back.

Issue #15, "Tests": "list and call tools, an elicitation and a sampling
round trip, progress, cancellation, a resource subscription"; "Such a
client is a legacy client: everything the gateway does for legacy clients
applies (sessions, the MRTR bridge as server requests on its stream,
progress, cancellation, logging, subscriptions ...)". The clients are
tests/servers/py1_sse_client.py and tests/servers/ts1_sse_client.mjs. The
peers come from `bash peers/install.sh`; when they are missing the tests
FAIL, never skip.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.http_back_support import Peer, free_port
from tests.raw_gateway_clients import http_gateway_process

pytestmark = pytest.mark.peers

REPO = Path(__file__).resolve().parent.parent
PEERS = REPO / ".peers"
PY1, PY2 = str(PEERS / "py1/bin/python"), str(PEERS / "py2/bin/python")
TS_SDK = PEERS / "node/node_modules/@modelcontextprotocol/sdk/package.json"
SRC = REPO / "compat_matrix/peers"
# Each server era: its command, and its flags. The legacy fixture declares
# resources.subscribe only with --notify; the mcp 2.3 ones always do.
SERVERS = {
    "legacy": [PY1, str(SRC / "py1_server.py"), "--notify"],
    "modern": [PY2, str(SRC / "py2_modern_server.py")],
    "dual": [PY2, str(SRC / "py2_push_server.py")],
}
ROOT = "file:///srv/sse-root"


def peers_installed() -> None:
    for peer in (PY1, PY2, str(TS_SDK)):
        if not Path(peer).exists():
            pytest.fail(f"peer missing: {peer} (run `bash peers/install.sh`)", pytrace=False)


@asynccontextmanager
async def gateway_with_sse(
    tmp_path: Path, server: str, back: str, upstream_url: str | None = None
) -> AsyncIterator[str]:
    """The gateway listening on HTTP in front of the `server` era's fixture,
    wrapped over stdio or served over HTTP (`back`), or in front of
    `upstream_url`; the SSE front's URL."""
    peers_installed()
    upstream: Peer | None = None
    if upstream_url is None and back == "http":
        server_port = free_port()
        upstream = Peer([*SERVERS[server], "--http", str(server_port)], server_port)
        upstream.start()
        upstream.wait_listening(time.monotonic() + 30)
        upstream_url = upstream.url
    try:
        async with http_gateway_process(tmp_path, SERVERS[server], upstream_url) as (client, _):
            yield str(client.base_url.join("/sse"))
    finally:
        if upstream is not None:
            upstream.stop()


async def run_client(argv: list[str]) -> dict[str, Any]:
    with anyio.fail_after(120):
        done = await anyio.run_process(argv, cwd=REPO, check=False, stdin=subprocess.DEVNULL)
    lines = done.stdout.decode().strip().splitlines()
    assert done.returncode == 0 and lines, done.stderr.decode()[-3000:]
    out: dict[str, Any] = json.loads(lines[-1])
    return out


def assert_legacy_session_works(out: dict[str, Any]) -> None:
    """What both clients check, whatever the server's era and the back."""
    assert {"echo", "progress", "ask_name", "summarize", "add_note", "slow"} <= set(out["tools"])
    assert out["echo"] == ["hi"], out
    # Progress notifications reach the client on its stream, before the result.
    assert out["progress"]["seen"] == [1, 2, 3], out
    assert out["progress"]["text"] == ["completed 3 steps"], out
    # "the MRTR bridge as server requests on its stream": each request the
    # server makes (pushed by a legacy or dual-push server, input_required
    # from a modern one) arrives as a server request; the client's POSTed
    # answer completes the call.
    assert out["ask_name"] == ["Hello, Ada"], out
    assert out["summarize"] == ["sampled(Summarize: abc)"], out
    assert out["roots"] == [ROOT], out
    assert out["asked"] == ["elicitation/create", "sampling/createMessage", "roots/list"], out
    # A resource subscription: resources/subscribe, then the update on the stream.
    assert out["updated"] == ["notes://sse"], out
    # Logging: logging/setLevel reaches the server (or, for a modern one,
    # the gateway filters for the session), and what is logged comes on the
    # stream, at the level set or above.
    assert out["log_levels"] == ["logged"], out
    assert out["logged"] == ["warning", "error"], out
    # Cancellation: the client gives up (notifications/cancelled) and the
    # session goes on.
    assert out["cancelled"] != "answered", out
    assert out["after_cancel"] == ["again"], out


ROUTES = [(server, back) for back in ("stdio", "http") for server in SERVERS]
IDS = [f"{server}-over-{back}" for server, back in ROUTES]


@pytest.mark.parametrize(("server", "back"), ROUTES, ids=IDS)
async def test_mcp_sse_client(tmp_path: Path, server: str, back: str) -> None:
    """mcp 1.30 `sse_client` + `ClientSession` through the SSE front."""
    async with gateway_with_sse(tmp_path, server, back) as url:
        out = await run_client([PY1, str(REPO / "tests/servers/py1_sse_client.py"), url])
    assert_legacy_session_works(out)
    if server == "legacy":
        assert out["server"] == "py1-fixture", out


@pytest.mark.parametrize(("server", "back"), ROUTES, ids=IDS)
async def test_ts_sdk_sse_client(tmp_path: Path, server: str, back: str) -> None:
    """The TS SDK 1.x `SSEClientTransport` + `Client` through the SSE front."""
    async with gateway_with_sse(tmp_path, server, back) as url:
        out = await run_client(["node", str(REPO / "tests/servers/ts1_sse_client.mjs"), url])
    assert_legacy_session_works(out)


async def test_an_sse_only_upstream_is_probed_and_served(tmp_path: Path) -> None:
    """Issue #15: "`probe` and the HTTP back keep detecting upstreams that
    only speak HTTP+SSE": mcp 1.30 FastMCP served over HTTP+SSE alone
    (tests/servers/py1_fixture_over_sse.py) is probed legacy, and the oldest client
    reaches it over HTTP+SSE on both sides of the gateway, every feature."""
    peers_installed()
    port = free_port()
    upstream = Peer([PY1, str(REPO / "tests/servers/py1_fixture_over_sse.py"), str(port)], port)
    upstream.path = "/sse"
    upstream.start()
    try:
        upstream.wait_listening(time.monotonic() + 30)
        with anyio.fail_after(60):
            probed = await anyio.run_process(
                [sys.executable, "-m", "gateway", "probe", "--log-level", "warning",
                 "--upstream", upstream.url],
                cwd=REPO, check=False, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        assert probed.returncode == 0, probed.stderr.decode()[-2000:]
        report = json.loads(probed.stdout)
        assert report["era"] == "legacy", report
        assert report["transport"] == "http+sse", report
        assert report["serverInfo"]["name"] == "py1-fixture", report
        async with gateway_with_sse(tmp_path, "legacy", "http", upstream.url) as url:
            out = await run_client([PY1, str(REPO / "tests/servers/py1_sse_client.py"), url])
    finally:
        upstream.stop()
    assert_legacy_session_works(out)
    assert out["server"] == "py1-fixture", out
