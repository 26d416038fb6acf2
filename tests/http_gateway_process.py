"""The gateway as a real process serving HTTP on 127.0.0.1, and the modern
requests sent to it: started, waited for (its port, its /readyz) and stopped.
Used by the tests that run the HTTP front over real HTTP (tests/test_http_front.py,
tests/test_upstream_watch.py and others)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
from anyio.abc import Process

HERE = Path(__file__).parent
FLAKY = [sys.executable, str(HERE / "servers" / "flaky_server.py")]
V = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": V,
    "io.modelcontextprotocol/clientCapabilities": {},
}
ACCEPT = "application/json, text/event-stream"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def gateway(
    tmp_path: Path, *args: str, config: str = "", env: dict[str, str] | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    port = free_port()
    cfg = tmp_path / "gw.toml"
    cfg.write_text(config)
    cmd = [
        sys.executable,
        "-m",
        "gateway",
        "--config",
        str(cfg),
        "--listen",
        f"127.0.0.1:{port}",
        "--log-level",
        "warning",
        *args,
        "--",
        *FLAKY,
    ]
    process = await anyio.open_process(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})}
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            await wait_ready(client)
            yield client
    finally:
        process.terminate()
        with anyio.fail_after(10):
            await process.wait()


async def wait_ready(client: httpx.AsyncClient) -> None:
    """Until the gateway process answers /readyz with 200: another process,
    with nothing to wait on but polling (every 50 ms, at most 15 s)."""
    with anyio.fail_after(15):
        while True:  # ends when the gateway is ready (or the bound)
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await anyio.sleep(0.05)


def modern_headers(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    headers = {
        "accept": ACCEPT,
        "content-type": "application/json",
        "mcp-protocol-version": V,
        "mcp-method": method,
    }
    if name is not None:
        headers["mcp-name"] = name
    headers.update(extra)
    return headers


def call(msg_id: int, method: str, **params: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": msg_id,
        "method": method,
        "params": {**params, "_meta": dict(META)},
    }


def _children(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()


# -- any upstream, quick re-probes (tests/test_upstream_watch.py) -------------------------

# Quick re-probes, so that each wait below is short.
FAST = """
[upstream]
health_interval = 0.2
restart_backoff_initial = 0.05
restart_backoff_max = 0.2
probe_timeout = 2
"""


@asynccontextmanager
async def _gateway(
    tmp_path: Path, upstream: list[str], config: str = FAST
) -> AsyncIterator[tuple[Process, httpx.AsyncClient]]:
    port = free_port()
    (tmp_path / "gw.toml").write_text(config)
    cmd = [sys.executable, "-m", "gateway", "--config", str(tmp_path / "gw.toml")]
    cmd += ["--listen", f"127.0.0.1:{port}", "--log-level", "warning", *upstream]
    process = await anyio.open_process(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            await _until_listening(client)
            yield process, client
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.fail_after(10):
            await process.wait()


async def _until_listening(client: httpx.AsyncClient) -> None:
    with anyio.fail_after(15):
        while True:  # ends when the port answers (or the bound)
            try:
                await client.get("/healthz")
                return
            except httpx.TransportError:
                await anyio.sleep(0.05)


async def _until_readyz(
    client: httpx.AsyncClient, status: int, within: float = 10, saying: str = ""
) -> Any:
    """/readyz's details once it answers `status` with `saying` in its reason
    (polled every 50 ms)."""
    with anyio.fail_after(within):
        while True:  # ends when /readyz answers so (or the bound)
            answer = await client.get("/readyz")
            if answer.status_code == status and saying in answer.json().get("reason", ""):
                return answer.json()
            await anyio.sleep(0.05)
