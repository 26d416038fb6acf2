"""The gateway as a real process over real pipes (2026-07-28 stdio transport:
framing, stdout purity, "Shutdown", "Unexpected Termination")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from anyio.abc import Process

pytestmark = pytest.mark.anyio

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


async def test_bad_lines_get_errors_and_disturb_nothing() -> None:
    async with gateway("--max-message-bytes", "4096") as gw:
        await gw.write(b"this is not json\n")
        assert (await gw.recv())["error"]["code"] == -32700
        await gw.write(b'{"jsonrpc":"2.0","id":1}\n')
        assert (await gw.recv())["error"]["code"] == -32600
        await gw.write(
            b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"x":"'
            + b"a" * 100_000
            + b'"}}\n'
        )
        big = await gw.recv()
        assert big["error"]["code"] == -32600 and "exceeds" in big["error"]["message"]
        await gw.send({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
        assert (await gw.recv())["error"]["code"] == -32600  # legacy, not initialized
        reply = await gw.call(
            4, "tools/call", {"name": "search_notes", "arguments": {"query": "gateway"}}
        )
        assert reply["result"]["resultType"] == "complete"
        stdin = gw.process.stdin
        assert stdin is not None
        await stdin.aclose()
        with anyio.fail_after(10):
            assert await gw.process.wait() == 0
        assert gw.process.stdout is not None
        rest = b""
        async for chunk in gw.process.stdout:
            rest += chunk
        # stdout carried JSON-RPC messages and nothing else.
        for line in [*gw.stdout_lines, *rest.splitlines()]:
            assert orjson.loads(line)["jsonrpc"] == "2.0"


async def test_closing_stdin_drains_and_stops_the_server() -> None:
    async with gateway(server=FLAKY) as gw:
        await gw.call(1, "tools/call", {"name": "echo"})
        (child,) = gw.children()
        await gw.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "sleep", "arguments": {"seconds": 0.3}, "_meta": META},
            }
        )
        stdin = gw.process.stdin
        assert stdin is not None
        await stdin.aclose()
        drained = await gw.recv()  # the in-flight call still gets its answer
        assert drained["id"] == 2 and "result" in drained
        with anyio.fail_after(15):
            assert await gw.process.wait() == 0
        await wait_gone(child)


async def test_sigterm_stops_gateway_and_server() -> None:
    async with gateway(server=FLAKY) as gw:
        await gw.call(1, "tools/call", {"name": "echo"})
        (child,) = gw.children()
        gw.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(15):
            assert await gw.process.wait() == 0
        await wait_gone(child)


async def test_crash_fails_the_call_and_the_next_call_restarts_the_server() -> None:
    async with gateway(server=FLAKY) as gw:
        first = await gw.call(1, "tools/call", {"name": "echo"})
        crashed = await gw.call(2, "tools/call", {"name": "crash"})
        assert crashed["error"]["data"]["reason"] == "upstream-failed"
        assert "exited" in crashed["error"]["message"]
        again = await gw.call(3, "tools/call", {"name": "echo"})
        assert again["result"]["content"][0]["text"] != first["result"]["content"][0]["text"]


async def test_server_stderr_is_forwarded_to_the_gateway_log() -> None:
    async with gateway(server=FLAKY) as gw:
        await gw.call(1, "tools/call", {"name": "stderr"})
        stdin = gw.process.stdin
        assert stdin is not None
        await stdin.aclose()
        with anyio.fail_after(15):
            await gw.process.wait()
        assert gw.process.stderr is not None
        err = b""
        async for chunk in gw.process.stderr:
            err += chunk
    events = [orjson.loads(line) for line in err.splitlines() if line.startswith(b"{")]
    assert any("flaky-server says hello" in str(e.get("line")) for e in events)


async def test_probe_command_reports_the_era() -> None:
    result = await anyio.run_process(
        [sys.executable, "-m", "gateway", "probe", "--log-level", "warning", "--", *NOTES]
    )
    report = orjson.loads(result.stdout)
    assert report["era"] == "legacy"
    assert report["transport"] == "stdio"
    assert report["serverInfo"] == {"name": "notes-example", "version": "1.0.0"}
    assert report["elapsedMs"] > 0


async def test_demo_runs_and_shows_both_sides() -> None:
    result = await anyio.run_process(
        # (wide enough that every message is one line)
        [sys.executable, "-m", "gateway", "demo"],
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "1000"},
    )
    out = result.stdout.decode()
    for marker in (
        "client → gateway",
        "gateway → server",
        "server → gateway",
        "gateway → client",
        '"resultType":"complete"',
        "-32602",
    ):
        assert marker in out


@pytest.mark.parametrize("flag", ["--stubborn", "--very-stubborn"])
async def test_a_server_that_will_not_exit_is_terminated_then_killed(flag: str) -> None:
    async with gateway(server=[*FLAKY, flag]) as gw:
        await gw.call(1, "tools/call", {"name": "echo"})
        (child,) = gw.children()
        stdin = gw.process.stdin
        assert stdin is not None
        started = anyio.current_time()
        await stdin.aclose()
        with anyio.fail_after(10):
            assert await gw.process.wait() == 0
        # Well inside the ~4 s an MCP client gives its server before SIGKILL.
        assert anyio.current_time() - started < 4
        await wait_gone(child)


async def test_a_signal_stops_a_stubborn_server_at_once() -> None:
    # MCP clients SIGKILL about a second after SIGTERM: the upstream must be gone by then.
    async with gateway("--log-level", "info", server=[*FLAKY, "--stubborn"]) as gw:
        await gw.call(1, "tools/call", {"name": "echo"})
        (child,) = gw.children()
        started = anyio.current_time()
        gw.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(10):
            assert await gw.process.wait() == 0
        assert anyio.current_time() - started < 1.0
        await wait_gone(child)


async def test_a_killed_gateway_takes_its_server_along() -> None:
    # SIGKILL leaves the gateway no time: the kernel's parent-death signal does it.
    async with gateway(server=[*FLAKY, "--stubborn"]) as gw:
        await gw.call(1, "tools/call", {"name": "echo"})
        (child,) = gw.children()
        gw.process.kill()
        await wait_gone(child, timeout=5)
