"""The gateway's HTTP front as a real process on a real port, in front of
tests/servers/flood_server.py, with clients whose response streams can be
left unread: what the HTTP flow-control tests (issue #29, class 5) drive.

A stream left unread is an HTTP response whose body nobody reads, on a
socket with a small receive buffer: what the gateway sends then fills its
own socket's send buffer (up to tcp_wmem's 4 MiB) and then its queues, not
also a receive buffer autotuned up to tens of MiB. Everything here waits on
the gateway's log (its stderr, read as it comes) or on answers, never on a
timer."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
from anyio.abc import Process

from tests.flow_harness import FLOOD, MODERN_META, json_lines
from tests.http_answers import answer_of, sse_messages
from tests.http_gateway_process import free_port

CLIENT_DROPS = "messages dropped for a client that reads too slowly"
ACCEPT = "application/json, text/event-stream"
MODERN = "2026-07-28"
# What a client that does not read leaves the kernel to hold for it: a
# receive buffer this small (Linux doubles it) turns autotuning off.
UNREAD_RCVBUF = 4096
READ_RCVBUF = 4 * 1024 * 1024


@dataclass
class HttpFlowGateway:
    port: int
    process: Process
    token: str | None = None  # for /metrics, when tokens are configured
    stderr: bytearray = field(default_factory=bytearray)
    logged: anyio.Event = field(default_factory=anyio.Event)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    async def run_stderr(self) -> None:
        assert self.process.stderr is not None
        async for chunk in self.process.stderr:
            self.stderr += chunk
            self.logged.set()
            self.logged = anyio.Event()

    def log_events(self) -> list[dict[str, Any]]:
        return json_lines(self.stderr)

    async def wait_for_log(
        self, event: str, timeout: float = 20, count: int = 1, **fields: object
    ) -> dict[str, Any]:
        """The `count`-th log line `event` with `fields`, waiting for each
        read of the gateway's stderr in turn."""
        with anyio.fail_after(timeout):
            while True:  # each pass looks at what stderr brought so far
                seen = [
                    line
                    for line in self.log_events()
                    if line.get("event") == event
                    and all(line.get(k) == v for k, v in fields.items())
                ]
                if len(seen) >= count:
                    return seen[count - 1]
                await self.logged.wait()

    async def metrics(self) -> dict[str, float]:
        """/metrics, as {series: value}."""
        headers = {} if self.token is None else {"authorization": f"Bearer {self.token}"}
        async with httpx.AsyncClient(base_url=self.base, timeout=10) as client:
            text = (await client.get("/metrics", headers=headers)).text
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                series, _, value = line.rpartition(" ")
                values[series] = float(value)
        return values

    async def queued_bytes(self) -> int:
        """The bytes queued toward the HTTP clients (the gauge of /metrics)."""
        return int((await self.metrics())["mcp_gateway_client_queued_bytes"])

    async def dropped(self, kind: str) -> int:
        """Messages of `kind` not delivered toward clients (/metrics)."""
        series = f'mcp_gateway_messages_dropped_total{{toward="client",kind="{kind}"}}'
        return int((await self.metrics()).get(series, 0))

    async def post(self, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        """A request read as any client reads it: its reply."""
        async with httpx.AsyncClient(base_url=self.base, timeout=30) as client:
            return answer_of(await client.post("/mcp", content=body, headers=headers))

    async def post_all(self, headers: dict[str, str], body: bytes) -> list[dict[str, Any]]:
        """A request read as any client reads it: every message of its answer."""
        async with httpx.AsyncClient(base_url=self.base, timeout=30) as client:
            response = await client.post("/mcp", content=body, headers=headers)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return sse_messages(response.text)
        return [dict(orjson.loads(response.content))]


@asynccontextmanager
async def http_flow_gateway(
    tmp_path: Path, config: str = "", token: str | None = None
) -> AsyncIterator[HttpFlowGateway]:
    """The gateway on a free port, `config` its TOML, ready (its upstream's
    era settled and its port listening) when this yields. `token`: one of
    the configured `[http] tokens`, for /metrics."""
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
        "--log-format",
        "json",
        "--",
        *FLOOD,
    ]
    process = await anyio.open_process(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    gw = HttpFlowGateway(port, process, token)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(gw.run_stderr)
            try:
                await gw.wait_for_log("upstream era settled")
                await gw.wait_for_log("listening")
                yield gw
            finally:
                if process.returncode is None:
                    process.terminate()
                with anyio.fail_after(10):
                    await process.wait()
    finally:
        if process.returncode is None:
            process.kill()


def modern_call(
    msg_id: int, tool: str, arguments: dict[str, Any], token: str | None = None
) -> tuple[dict[str, str], bytes]:
    """A modern tools/call: its headers and body (`token`: a progress token)."""
    meta: dict[str, Any] = dict(MODERN_META)
    if token is not None:
        meta["progressToken"] = token
    params = {"name": tool, "arguments": arguments, "_meta": meta}
    headers = {
        "accept": ACCEPT,
        "content-type": "application/json",
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": tool,
    }
    body = {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": params}
    return headers, orjson.dumps(body)


@dataclass
class LegacySession:
    """A Streamable HTTP session of a legacy client of `version`."""

    gw: HttpFlowGateway
    version: str
    session_id: str
    auth: dict[str, str]

    def headers(self, **extra: str) -> dict[str, str]:
        return {
            "accept": ACCEPT,
            "content-type": "application/json",
            "mcp-protocol-version": self.version,
            "mcp-session-id": self.session_id,
            **self.auth,
            **extra,
        }

    def call(
        self, msg_id: int, tool: str, arguments: dict[str, Any], token: str | None = None
    ) -> tuple[dict[str, str], bytes]:
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        if token is not None:
            params["_meta"] = {"progressToken": token}
        body = {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": params}
        return self.headers(), orjson.dumps(body)

    async def request(self, msg_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}
        async with httpx.AsyncClient(base_url=self.gw.base, timeout=10) as client:
            response = await client.post("/mcp", content=orjson.dumps(body), headers=self.headers())
        return answer_of(response)


async def legacy_session(
    gw: HttpFlowGateway, version: str, bearer: str | None = None
) -> LegacySession:
    """initialize, notifications/initialized, and logging at info (so that
    the flood's log messages are sent)."""
    auth = {} if bearer is None else {"authorization": f"Bearer {bearer}"}
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "http-flow-test", "version": "1"},
        },
    }
    async with httpx.AsyncClient(base_url=gw.base, timeout=10) as client:
        headers = {"accept": ACCEPT, "content-type": "application/json", **auth}
        response = await client.post("/mcp", content=orjson.dumps(init), headers=headers)
        assert answer_of(response)["result"]["protocolVersion"] == version
        session = LegacySession(gw, version, response.headers["mcp-session-id"], auth)
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        done = await client.post("/mcp", content=orjson.dumps(note), headers=session.headers())
        assert done.status_code == 202
    await session.request(1, "logging/setLevel", {"level": "info"})
    return session


class UnreadStream:
    """A response whose head has come and whose body is not read until
    `read_all` (or `read_until_reply`), which also widens the socket's
    receive buffer so that what is read then comes at loopback speed."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response

    def _widen(self) -> None:
        # The small buffer clamped the window at connect: both must grow.
        sock = self.response.extensions["network_stream"].get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, READ_RCVBUF)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, READ_RCVBUF)

    async def read_all(self, timeout: float = 20) -> list[dict[str, Any]]:
        """The rest of the body, to its end, as the messages of its events."""
        self._widen()
        body = bytearray()
        with anyio.fail_after(timeout):
            async for chunk in self.response.aiter_bytes():
                body += chunk
        return sse_messages(body.decode())

    async def read_until(
        self, done: Callable[[list[dict[str, Any]]], bool], timeout: float = 20
    ) -> list[dict[str, Any]]:
        """The body's messages until `done` says so (a GET stream never ends
        by itself)."""
        self._widen()
        body = bytearray()
        with anyio.fail_after(timeout):
            async for chunk in self.response.aiter_bytes():  # ends when `done`
                body += chunk
                if body.endswith(b"\n\n") and done(messages := sse_messages(body.decode())):
                    return messages
        raise AssertionError("the stream ended first")


@asynccontextmanager
async def unread(
    gw: HttpFlowGateway, method: str, headers: dict[str, str], body: bytes = b""
) -> AsyncIterator[UnreadStream]:
    """Send a request, wait for its response's head, and read nothing more
    of it until the test says."""
    transport = httpx.AsyncHTTPTransport(
        socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, UNREAD_RCVBUF)]
    )
    async with (
        httpx.AsyncClient(base_url=gw.base, transport=transport, timeout=30) as client,
        client.stream(method, "/mcp", content=body or None, headers=headers) as response,
    ):
        assert response.status_code == 200, response.status_code
        yield UnreadStream(response)
