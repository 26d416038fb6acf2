"""Issue 10 with real peers: a dual-era mcp 2.3 server whose tool asks its
client push-style (`ctx.elicit`, `ctx.session.create_message`,
`ctx.session.list_roots`; compat_matrix/peers/py2_push_server.py), driven by the
legacy client mcp 1.30 `ClientSession` (tests/servers/py1_push_client.py)
direct and through the gateway, the server wrapped over stdio and served over
HTTP. Direct, the tool gets its three answers; through the gateway it must
too (before, it failed with "this transport context has no back-channel for
server-initiated requests"). The peers come from `bash peers/install.sh`;
when they are missing the tests FAIL, never skip.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.http_back_support import Peer, free_port
from tests.push_peers import ANSWER, ASKED, PY2, REPO, SERVER, legacy_client

pytestmark = [pytest.mark.peers]

GATEWAY = [sys.executable, "-m", "gateway", "--log-level", "warning"]


@pytest.fixture(scope="module")
def push_http() -> Iterator[str]:
    port = free_port()
    server = Peer([PY2, SERVER, "--http", str(port)], port)
    server.start()
    try:
        server.wait_listening(time.monotonic() + 30)
        yield server.url
    finally:
        server.stop()


def test_push_tool_direct_over_stdio() -> None:
    """The baseline: what a legacy client gets from the server direct."""
    out = legacy_client([PY2, SERVER])
    assert out["text"] == [ANSWER] and out["asked"] == ASKED and not out["isError"]


def test_push_tool_through_the_gateway_over_stdio() -> None:
    """Issue 10: the legacy client gets the push-style requests through the
    gateway, the server wrapped over stdio (one process per era)."""
    out = legacy_client([*GATEWAY, "--", PY2, SERVER])
    assert out["text"] == [ANSWER], out
    assert out["asked"] == ASKED and not out["isError"]
    assert out["protocolVersion"] == "2025-11-25"


def test_push_tool_direct_over_http(push_http: str) -> None:
    out = legacy_client([push_http])
    assert out["text"] == [ANSWER] and out["asked"] == ASKED


def test_push_tool_through_the_gateway_over_http(push_http: str) -> None:
    """Issue 10: the same over HTTP, where the one endpoint serves both eras."""
    out = legacy_client([*GATEWAY, "--upstream", push_http])
    assert out["text"] == [ANSWER], out
    assert out["asked"] == ASKED and not out["isError"]


def test_probe_says_dual_for_the_push_server(push_http: str) -> None:
    """Issue 10: `probe` prints `"era": "dual"` with both eras' versions and
    how it found out, over stdio and over HTTP."""
    for target, transport in (
        (["--", PY2, SERVER], "stdio"),
        (["--upstream", push_http], "streamable-http"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "gateway", "probe", "--log-level", "warning", *target],
            cwd=REPO,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        report = json.loads(done.stdout)
        assert report["era"] == "dual", report
        assert report["transport"] == transport, report
        assert report["modern"]["protocolVersion"] == "2026-07-28"
        assert report["legacy"]["protocolVersion"] == "2025-11-25"
        assert report["legacy"]["serverInfo"]["name"] == "py2-fixture"
        assert report["probe"]["modern"] == "DiscoverResult"
        assert report["probe"]["legacy"] == "InitializeResult 2025-11-25"
