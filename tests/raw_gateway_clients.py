"""The gateway as a process, over its stdin/stdout or listening on HTTP, in
front of a real peer's command, and raw JSON-RPC clients of it (stdlib +
anyio/httpx, no SDK): from tests/test_real_peers_notifications.py, shared by
the other real-peer tests."""

from __future__ import annotations

import json
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
import pytest
from anyio.abc import Process

REPO = Path(__file__).resolve().parent.parent
V = "2026-07-28"
LEGACY_V = "2025-11-25"
META = {
    "io.modelcontextprotocol/protocolVersion": V,
    "io.modelcontextprotocol/clientInfo": {"name": "notif-test", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
ACCEPT = "application/json, text/event-stream"


def text_of(reply: dict[str, Any]) -> str:
    assert "result" in reply, reply
    return "".join(c.get("text", "") for c in reply["result"].get("content", []))


# -- stdio -------------------------------------------------------------------------


class Stdio:
    """A gateway process driven over its stdin/stdout; every message is kept."""

    def __init__(self, process: Process, stderr: Path) -> None:
        self.process = process
        self.stderr = stderr
        self._buf = b""
        self.seen: list[dict[str, Any]] = []
        self._next = 1

    async def send(self, msg: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(json.dumps(msg).encode() + b"\n")

    async def recv(self, timeout: float = 10) -> dict[str, Any]:
        assert self.process.stdout is not None
        try:
            with anyio.fail_after(timeout):
                while b"\n" not in self._buf:
                    self._buf += await self.process.stdout.receive()
        except TimeoutError:
            tail = self.stderr.read_text()[-3000:] if self.stderr.exists() else ""
            pytest.fail(f"no message from the gateway in {timeout}s; seen={self.seen[-8:]}\n{tail}")
        line, self._buf = self._buf.split(b"\n", 1)
        msg: dict[str, Any] = json.loads(line)
        self.seen.append(msg)
        return msg

    def new_id(self) -> int:
        self._next += 1
        return self._next

    async def request(
        self, method: str, params: dict[str, Any] | None = None, *, modern: bool = True
    ) -> dict[str, Any]:
        """Send a request and read until its response (notifications are kept in `seen`)."""
        msg_id = self.new_id()
        body = dict(params or {})
        if modern:
            body["_meta"] = dict(META)
        await self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": body})
        while True:
            reply = await self.recv()
            if reply.get("id") == msg_id and "method" not in reply:
                return reply

    async def until(self, pred: Any, since: int, timeout: float = 10) -> dict[str, Any]:
        """The first message from `seen[since]` on (already read or new) matching pred."""
        for msg in self.seen[since:]:
            if pred(msg):
                return msg
        with anyio.fail_after(timeout + 1):
            while True:
                msg = await self.recv(timeout)
                if pred(msg):
                    return msg

    async def legacy_handshake(self) -> dict[str, Any]:
        init = await self.request(
            "initialize",
            {
                "protocolVersion": LEGACY_V,
                "capabilities": {},
                "clientInfo": {"name": "notif-test-legacy", "version": "1"},
            },
            modern=False,
        )
        assert "result" in init, init
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        result: dict[str, Any] = init["result"]
        return result


@asynccontextmanager
async def stdio_gateway(
    tmp_path: Path, server: list[str], *options: str, log_level: str = "warning"
) -> AsyncIterator[Stdio]:
    stderr = tmp_path / "gateway.stderr"
    cmd = [sys.executable, "-m", "gateway", "--log-level", log_level, *options, "--", *server]
    with stderr.open("wb") as err:
        process = await anyio.open_process(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=REPO
        )
        try:
            yield Stdio(process, stderr)
        finally:
            if process.returncode is None:
                process.terminate()
            with anyio.fail_after(10):
                await process.wait()


# -- HTTP --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def http_gateway(tmp_path: Path, server: list[str]) -> AsyncIterator[httpx.AsyncClient]:
    async with http_gateway_process(tmp_path, server) as (client, _):
        yield client


@asynccontextmanager
async def http_gateway_process(
    tmp_path: Path, server: list[str], upstream: str | None = None
) -> AsyncIterator[tuple[httpx.AsyncClient, Process]]:
    """The gateway as a process listening on HTTP, in front of the `server`
    command, or of the HTTP server at `upstream`; ready (its /readyz)."""
    port = free_port()
    target = ["--upstream", upstream] if upstream is not None else ["--", *server]
    cmd = [
        sys.executable, "-m", "gateway", "--listen", f"127.0.0.1:{port}",
        "--log-level", "warning", *target,
    ]  # fmt: skip
    stderr = tmp_path / "gateway-http.stderr"
    with stderr.open("wb") as err:
        process = await anyio.open_process(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO,
            env=dict(os.environ),
        )  # fmt: skip
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
                with anyio.fail_after(20):
                    while True:  # each pass asks /readyz once; bounded above
                        try:
                            if (await c.get("/readyz")).status_code == 200:
                                break
                        except httpx.TransportError:
                            pass
                        await anyio.sleep(0.05)
                yield c, process
        finally:
            if process.returncode is None:
                process.terminate()
            with anyio.fail_after(10):
                await process.wait()


def modern_headers(method: str, name: str | None = None) -> dict[str, str]:
    h = {
        "accept": ACCEPT,
        "content-type": "application/json",
        "mcp-protocol-version": V,
        "mcp-method": method,
    }
    if name is not None:
        h["mcp-name"] = name
    return h


def sse_or_json(resp: httpx.Response) -> list[dict[str, Any]]:
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        return [
            json.loads(line[5:])
            for line in resp.text.splitlines()
            if line.startswith("data:") and line[5:].strip()
        ]
    return [resp.json()]
