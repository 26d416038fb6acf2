"""/readyz that tells the truth without client traffic, and draining
(issue #13: "`/readyz` re-probes in the background with backoff, and follows
the upstream down and up again (stdio and HTTP backs), without client
traffic"; "Draining: on SIGTERM the gateway first turns `/readyz` to 503,
keeps serving for a configurable drain delay so the balancer notices, then
stops accepting and drains in-flight calls within the grace").

The gateway and its upstreams run as real processes; nothing here sends the
gateway a client request until the end, so whatever /readyz says it learnt
on its own. Waits poll another process's state, each with a bound."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process

from tests.http_gateway_process import (
    FAST,
    FLAKY,
    META,
    _children,
    _gateway,
    _until_readyz,
    call,
    free_port,
    modern_headers,
)

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parent.parent
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}}


@asynccontextmanager
async def _http_server(port: int, era: str) -> AsyncIterator[Process]:
    server = ROOT / "bench" / "fast_http_server.py"
    process = await anyio.open_process(
        [sys.executable, str(server), "--era", era, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
        with anyio.fail_after(10):
            await process.wait()


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_readyz_follows_an_http_upstream_that_starts_late_goes_away_and_comes_back(
    tmp_path: Path, era: str
) -> None:
    """Issue #13: "start the gateway with `--upstream URL` before the upstream
    is up: `/readyz` stays 503 until some client request arrives — behind a
    readiness gate no request ever does"; and "`/readyz` follows an HTTP
    upstream that starts late, goes away and comes back"."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    async with _gateway(tmp_path, ["--upstream", url]) as (_, client):
        assert (await _until_readyz(client, 503))["status"] == "not ready"
        async with _http_server(port, era):
            assert (await _until_readyz(client, 200))["era"] == era
        # The server stopped; no request tells the gateway so.
        gone = await _until_readyz(client, 503)
        assert gone == {
            "status": "not ready",
            "reason": "the upstream does not accept connections",
        }
        async with _http_server(port, era):
            await _until_readyz(client, 200)
            if era == "modern":
                answer = await client.post(
                    "/mcp",
                    json={
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "tools/list",
                        "params": {"_meta": META},
                    },
                    headers=modern_headers("tools/list"),
                )
                assert answer.status_code == 200, answer.text


async def test_readyz_follows_a_stdio_server_that_exits_and_starts_again(tmp_path: Path) -> None:
    """Issue #13 (stdio back): the server exits with no client around; /readyz
    says so with the reason, and the gateway starts it again on its own after
    the backoff, without a request."""
    async with _gateway(tmp_path, ["--", *FLAKY]) as (process, client):
        await _until_readyz(client, 200)
        [server] = _children(process.pid)
        os.kill(int(server), signal.SIGKILL)
        down = await _until_readyz(client, 503, saying="the upstream exited (returncode -9)")
        assert down["status"] == "not ready"
        again = await _until_readyz(client, 200)
        assert again["status"] == "ready"
        assert _children(process.pid) != [server]


async def test_readyz_stays_503_with_the_reason_while_a_command_cannot_start(
    tmp_path: Path,
) -> None:
    """A server that exits at once keeps /readyz 503 with its reason, and the
    gateway keeps trying with the backoff (never a busy loop: the attempts
    are bounded by restart_backoff_max)."""
    failing = [sys.executable, "-c", "import sys; sys.stderr.write('no config\\n'); sys.exit(4)"]
    async with _gateway(tmp_path, ["--", *failing]) as (_, client):
        first = await _until_readyz(client, 503, saying="no config")
        assert first["status"] == "not ready"


async def test_sigterm_drains_then_stops(tmp_path: Path) -> None:
    """Issue #13 "Draining": after SIGTERM /readyz is 503 at once while calls
    are still served, each answer closing its connection (so keep-alive
    clients move to another replica); after `drain_delay` the gateway stops
    and exits 0."""
    config = FAST + "[gateway]\ndrain_delay = 1.5\n"
    async with _gateway(tmp_path, ["--", *FLAKY], config) as (process, client):
        await _until_readyz(client, 200)
        process.send_signal(signal.SIGTERM)
        draining = await _until_readyz(client, 503, within=1)
        assert draining["status"] == "draining"
        answer = await client.post(
            "/mcp",
            json=call(1, "tools/call", name="echo"),
            headers=modern_headers("tools/call", "echo"),
        )
        assert answer.status_code == 200, answer.text
        assert answer.headers["connection"] == "close"
        with anyio.fail_after(10):
            assert await process.wait() == 0
