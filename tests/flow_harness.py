"""The stdio gateway as a real process over real pipes, with a client that can
stop reading: what the flow-control tests (issue #29, class 1) drive."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson
from anyio.abc import Process

HERE = Path(__file__).parent
FLOOD = [sys.executable, str(HERE / "servers" / "flood_server.py")]
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
ENV_PREFIX = "MCP_ERA_GATEWAY_"


class FlowClient:
    """A client of the gateway process. Its reader task runs only while
    `reading` is set, so a test can stop reading and the pipe fills as it
    would for a busy client."""

    def __init__(self, process: Process, modern: bool) -> None:
        self.process = process
        self.modern = modern
        self.reading = anyio.Event()
        self.reading.set()
        self.messages: list[dict[str, Any]] = []
        self.stderr = bytearray()
        self._arrived = anyio.Event()
        self.logged = anyio.Event()
        self._buf = b""

    # -- writing --------------------------------------------------------
    async def send(self, msg: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(orjson.dumps(msg) + b"\n")

    async def request(self, msg_id: int, method: str, params: dict[str, Any]) -> None:
        if self.modern:
            meta = {**MODERN_META, **(params.get("_meta") or {})}
            params = {**params, "_meta": meta}
        await self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})

    async def tool(
        self, msg_id: int, name: str, arguments: dict[str, Any], token: str | None = None
    ) -> None:
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        if token is not None:
            params["_meta"] = {"progressToken": token}
        await self.request(msg_id, "tools/call", params)

    async def open_session(self) -> None:
        """A legacy client's handshake (a modern client has none)."""
        if self.modern:
            return
        await self.send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "flow-test", "version": "1"},
                },
            }
        )
        await self.reply(0)
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def close_stdin(self) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.aclose()

    # -- reading --------------------------------------------------------
    def pause(self) -> None:
        self.reading = anyio.Event()

    def resume(self) -> None:
        self.reading.set()

    async def run_reader(self) -> None:
        assert self.process.stdout is not None
        while True:  # ends at the gateway's end of stdout
            await self.reading.wait()
            try:
                chunk = await self.process.stdout.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            self._buf += chunk
            *lines, self._buf = self._buf.split(b"\n")
            for line in lines:
                self.messages.append(orjson.loads(line))
            self._arrived.set()
            self._arrived = anyio.Event()

    async def run_stderr(self) -> None:
        assert self.process.stderr is not None
        async for chunk in self.process.stderr:
            self.stderr += chunk
            self.logged.set()
            self.logged = anyio.Event()

    def replies(self) -> dict[Any, dict[str, Any]]:
        return {m["id"]: m for m in self.messages if "method" not in m}

    async def reply(self, msg_id: int, timeout: float = 20) -> dict[str, Any]:
        with anyio.fail_after(timeout):
            while msg_id not in self.replies():  # each pass waits for a read
                await self._arrived.wait()
        return self.replies()[msg_id]

    async def all_replies(self, ids: list[int], timeout: float = 30) -> dict[Any, dict[str, Any]]:
        for msg_id in ids:
            await self.reply(msg_id, timeout)
        return self.replies()

    def log_events(self) -> list[dict[str, Any]]:
        return json_lines(self.stderr)


@asynccontextmanager
async def flow_gateway(
    *, modern: bool = True, server: list[str] = FLOOD, **settings: object
) -> AsyncIterator[FlowClient]:
    """`settings`: config keys as environment variables, e.g.
    `gateway_max_queued_bytes=...` for `[gateway] max_queued_bytes`."""
    env = {**os.environ}
    for key, value in settings.items():
        env[ENV_PREFIX + key.upper()] = str(value)
    cmd = [sys.executable, "-m", "gateway", "--log-format", "json", "--", *server]
    process = await anyio.open_process(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    client = FlowClient(process, modern)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run_reader)
            tg.start_soon(client.run_stderr)
            try:
                await client.open_session()
                yield client
            finally:
                client.resume()
                if process.returncode is None:
                    process.kill()
                with anyio.fail_after(10):
                    await process.wait()
    finally:
        if process.returncode is None:
            process.kill()


async def wait_for_log(
    client: FlowClient, event: str, timeout: float = 20, **fields: object
) -> dict[str, Any]:
    """The gateway's first log line `event` with `fields` (its stderr, read
    by the client), waiting for each read of stderr in turn."""
    with anyio.fail_after(timeout):
        while True:  # each pass looks at what stderr brought so far
            for line in client.log_events():
                if line.get("event") == event and all(line.get(k) == v for k, v in fields.items()):
                    return line
            await client.logged.wait()


def json_lines(stderr: bytes | bytearray) -> list[dict[str, Any]]:
    """The gateway's JSON log lines in what it wrote to stderr (others skipped)."""
    events = []
    for line in bytes(stderr).splitlines():
        try:
            events.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue
    return events
