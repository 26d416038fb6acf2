"""The gateway as a real process over real pipes: started in front of a
server command, written to and read from line by line, and whether a
process is still alive (tests/test_stdio_e2e.py and others)."""

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
NOTES = [sys.executable, "-m", "gateway.examples.notes_server"]
FLAKY = [sys.executable, str(HERE / "servers" / "flaky_server.py")]
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


class Gateway:
    def __init__(self, process: Process) -> None:
        self.process = process
        self._buf = b""
        self.stdout_lines: list[bytes] = []

    async def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(data)

    async def send(self, msg: dict[str, Any]) -> None:
        await self.write(orjson.dumps(msg) + b"\n")

    async def recv(self, timeout: float = 10) -> dict[str, Any]:
        assert self.process.stdout is not None
        with anyio.fail_after(timeout):
            while b"\n" not in self._buf:
                self._buf += await self.process.stdout.receive()
        line, self._buf = self._buf.split(b"\n", 1)
        self.stdout_lines.append(line)
        return orjson.loads(line)  # type: ignore[no-any-return]

    async def call(self, msg_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        await self.send(
            {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": {**params, "_meta": META}}
        )
        while True:
            reply = await self.recv()
            if reply.get("id") == msg_id:
                return reply

    def children(self) -> list[int]:
        path = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(p) for p in path.read_text().split()] if path.exists() else []


@asynccontextmanager
async def gateway(*args: str, server: list[str] = NOTES) -> AsyncIterator[Gateway]:
    cmd = [sys.executable, "-m", "gateway", "--log-format", "json", *args, "--", *server]
    process = await anyio.open_process(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        yield Gateway(process)
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.fail_after(10):
            await process.wait()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes only once reaped; check its state. The
    # process can be reaped between the signal and the read (the open fails,
    # or the read does, with ESRCH): that is gone too.
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False


async def wait_gone(pid: int, timeout: float = 10) -> None:
    with anyio.fail_after(timeout):
        while alive(pid):  # noqa: ASYNC110 - not our child: nothing to wait on but polling
            await anyio.sleep(0.05)
