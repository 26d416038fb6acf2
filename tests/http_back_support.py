"""What the HTTP back's tests share: one HttpServerConnection driven over
real HTTP on 127.0.0.1 (`connection`, `exchange`), the whole gateway in
process over an HTTP upstream (`http_gateway`), and the real peer servers
started for them (`Peer`, PEERS)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway import era, wire
from gateway.backs.http_back import HttpServerConnection
from gateway.backs.http_connector import HttpConnector
from gateway.config import Config
from tests.inprocess_service import in_process_service
from tests.scripted import Client

META = {
    era.PROTOCOL_VERSION: "2026-07-28",
    era.CLIENT_CAPABILITIES: {},
    era.CLIENT_INFO: {"name": "test", "version": "1"},
}


def modern(msg_id: wire.RequestId, method: str, **params: Any) -> wire.Message:
    return wire.request(msg_id, method, {**params, "_meta": META})


@asynccontextmanager
async def connection(url: str, **headers: str) -> AsyncIterator[HttpServerConnection]:
    async with traced_connection(url, False, **headers) as conn:
        yield conn


@asynccontextmanager
async def traced_connection(
    url: str, trace_headers: bool, **headers: str
) -> AsyncIterator[HttpServerConnection]:
    """`trace_headers`: as with tracing on (tests of issue #13's headers)."""
    connector = HttpConnector(
        url, headers=headers, connect_timeout=2, read_timeout=2, trace_headers=trace_headers
    )
    conn = await connector.connect()
    async with anyio.create_task_group() as tg:
        # Running before the first request, as in the gateway: calls are
        # written at once, their answers read in the connection's callbacks.
        await tg.start(_run_background, conn)
        try:
            yield conn
        finally:
            await conn.aclose(1)
            tg.cancel_scope.cancel()
    await connector.aclose()


async def _run_background(
    conn: HttpServerConnection, *, task_status: anyio.abc.TaskStatus[None]
) -> None:
    task_status.started()
    await conn.run_background()


async def exchange(conn: HttpServerConnection, msg: wire.Message) -> list[wire.Message]:
    """Send a request; everything received up to and including its reply."""
    await conn.send(msg)
    return await until_reply(conn, msg["id"])


async def until_reply(conn: HttpServerConnection, msg_id: wire.RequestId) -> list[wire.Message]:
    seen: list[wire.Message] = []
    with anyio.fail_after(5):
        while not any(m.get("id") == msg_id and "method" not in m for m in seen):
            seen += await conn.receive_batch()
    return seen


def reply_of(seen: list[wire.Message]) -> wire.Message:
    return next(m for m in seen if "method" not in m)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def legacy_handshake(c: HttpServerConnection) -> wire.Message:
    init = wire.request(
        1,
        "initialize",
        {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {}},
    )
    reply = reply_of(await exchange(c, init))
    await c.send(wire.notification("notifications/initialized"))
    return reply


@asynccontextmanager
async def http_gateway(url: str, **config: Any) -> AsyncIterator[Client]:
    cfg = Config(
        upstream_url=url,
        **{"probe_timeout": 2, "request_timeout": 5, "restart_backoff_initial": 0.01, **config},
    )
    async with in_process_service(cfg) as client:
        yield client


MRTR_CAPS: dict[str, Any] = {"elicitation": {"form": {}}}


REPO = Path(__file__).resolve().parent.parent


PEERS = Path(os.environ.get("MCP_PEERS_DIR") or REPO / ".peers").resolve()
CONFORMANCE = REPO / "compat_matrix" / "conformance"


@dataclass
class Peer:
    argv: list[str]
    port: int
    path: str = "/mcp"
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def start(self) -> None:
        if not Path(self.argv[0]).exists():
            pytest.fail(
                f"peer missing: {self.argv[0]} (run `bash peers/install.sh`)", pytrace=False
            )
        self.proc = subprocess.Popen(
            self.argv,
            env={**os.environ, **self.env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own group: stopped with its children
        )

    def wait_listening(self, deadline: float) -> None:
        assert self.proc is not None
        while True:  # each pass tries to connect once
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                pytest.fail(f"{self.argv} exited {self.proc.returncode}: {err[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"{self.argv} never listened on {self.port}")
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(3)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()
