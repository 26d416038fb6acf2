"""Real peers through the gateway to an https:// upstream: mcp 1.30 FastMCP
over Streamable HTTP behind HAProxy terminating TLS, as a remote server is
reached in production.

The compatibility matrix runs plain http only. Here every exchange is over
TLS, with a certificate of a private CA (`SSL_CERT_FILE`, as the README
says): calls on the HTTP back's direct path over asyncio's TLS transport,
the rest (initialize, the GET stream, DELETE) on the general one over
anyio's:

- the stdlib modern MRTR client (compat_matrix/peers/raw_mrtr_client.py,
  every feature, tampered requestState checked) reaches the legacy server:
  each server request on a POST's event stream becomes `input_required`, and
  each answer is POSTed back over TLS;
- mcp 1.30's legacy `ClientSession` reaches it with change notifications,
  which come on the legacy session's GET stream over TLS;
- without the CA, the first call fails with the certificate error in its
  message and one line in the gateway's log, and nothing hangs.

The peers come from `bash peers/install.sh`, HAProxy from Debian (.ci/run
installs both); when missing the tests FAIL, they are never skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from anyio.abc import Process

from bench.https_back import tls_terminator
from compat_matrix.environment import INSTALL_HINT, peers_dir
from tests.replicas import free_port, haproxy

pytestmark = [pytest.mark.anyio, pytest.mark.peers]

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / "compat_matrix" / "peers"
GATEWAY = (sys.executable, "-m", "gateway", "--log-format", "json")


@dataclass
class TlsUpstream:
    url: str
    ca: Path


def _py1() -> Path:
    python = peers_dir() / "py1" / "bin" / "python"
    assert python.exists(), INSTALL_HINT
    return python


async def _until_accepting(port: int, process: Process, within: float = 30) -> None:
    """Another program's readiness: nothing to wait on but its port, tried
    every 50 ms (the peer runs on its own clock, no test clock drives it)."""
    with anyio.fail_after(within):
        while True:  # ends at the first accepted connection (or the bound)
            assert process.returncode is None, f"exited {process.returncode} before listening"
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)
                continue
            await stream.aclose()
            return


@asynccontextmanager
async def _process(cmd: list[str], log: Path) -> AsyncIterator[Process]:
    with log.open("wb") as sink:
        process = await anyio.open_process(cmd, stdout=sink, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
            with anyio.move_on_after(10):
                await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()


@asynccontextmanager
async def tls_upstream(tmp_path: Path) -> AsyncIterator[TlsUpstream]:
    """py1 over Streamable HTTP (change notifications on), HAProxy in front
    terminating TLS with a self-signed certificate."""
    binary = haproxy()
    assert binary is not None, "haproxy is not installed (.ci/run installs Debian's)"
    port, tls_port = free_port(), free_port()
    cfg, cert = tls_terminator(tmp_path, tls_port, port)
    server = [str(_py1()), str(PEERS / "py1_server.py"), "--http", str(port), "--notify"]
    async with (
        _process(server, tmp_path / "py1.log") as py1,
        _process([binary, "-f", str(cfg), "-db"], tmp_path / "haproxy.log") as balancer,
    ):
        await _until_accepting(port, py1)
        await _until_accepting(tls_port, balancer)
        yield TlsUpstream(f"https://127.0.0.1:{tls_port}/mcp", cert)


async def run_client(client: list[str], upstream: str, env: dict[str, str], log: Path) -> Any:
    """A client peer spawning the gateway (stdio front) in front of `upstream`;
    its JSON report."""
    cmd = [*client, "--", *GATEWAY, "--upstream", upstream]
    with log.open("wb") as sink, anyio.fail_after(120):
        done = await anyio.run_process(cmd, env=env, stderr=sink, check=False)
    return orjson.loads(done.stdout)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def _failed_steps(report: Any) -> list[Any]:
    return [step for step in report["steps"] if not step["ok"]]


async def test_a_modern_client_reaches_a_legacy_server_over_tls_with_every_mrtr_feature(
    tmp_path: Path,
) -> None:
    async with tls_upstream(tmp_path) as upstream:
        client = [sys.executable, str(PEERS / "raw_mrtr_client.py"), "--feature", "all"]
        report = await run_client(
            [*client, "--check-errors"],
            upstream.url,
            _env(SSL_CERT_FILE=str(upstream.ca)),
            tmp_path / "gateway.log",
        )
    assert report["ok"], (_failed_steps(report), report["error"])
    calls = [step for step in report["steps"] if "rounds" in step]
    asked = sorted(m for step in calls for r in step["rounds"] for m in r["inputRequests"].values())
    assert asked == [
        "elicitation/create",
        "elicitation/create",
        "roots/list",
        "sampling/createMessage",
    ]
    assert all(step["resultType"] == "complete" for step in calls)
    tampered = next(s for s in report["steps"] if s["step"] == "tampered requestState rejected")
    assert tampered["error"]["code"] == -32602


async def test_a_legacy_client_gets_change_notifications_over_tls(tmp_path: Path) -> None:
    async with tls_upstream(tmp_path) as upstream:
        client = [str(_py1()), str(PEERS / "py1_client.py"), "--feature", "notifications"]
        report = await run_client(
            client, upstream.url, _env(SSL_CERT_FILE=str(upstream.ca)), tmp_path / "gateway.log"
        )
    assert report["ok"], (_failed_steps(report), report["error"])
    steps = {step["step"]: step for step in report["steps"]}
    assert steps["tools/call echo"]["text"] == "hello from the compat matrix"
    assert steps["notifications: resources/updated on the session"]["ok"]
    assert steps["notifications: tools/list_changed on the session"]["ok"]


async def test_an_unknown_certificate_fails_the_call_with_the_reason(tmp_path: Path) -> None:
    async with tls_upstream(tmp_path) as upstream:
        client = [sys.executable, str(PEERS / "raw_mrtr_client.py"), "--feature", "sampling"]
        log = tmp_path / "gateway.log"
        report = await run_client(client, upstream.url, _env(), log)
    assert not report["ok"]
    first = report["steps"][0]
    assert first["step"] == "server/discover" and not first["ok"]
    assert "CERTIFICATE_VERIFY_FAILED" in first["error"]["message"]
    assert first["error"]["data"]["reason"] == "upstream-unavailable"
    errors = [
        line
        for line in map(orjson.loads, log.read_bytes().splitlines())
        if line.get("level") == "error"
    ]
    assert [e["event"] for e in errors] == ["upstream unavailable"], errors
    assert "CERTIFICATE_VERIFY_FAILED" in errors[0]["reason"]
