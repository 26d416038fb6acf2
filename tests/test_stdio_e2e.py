"""The gateway as a real process over real pipes (2026-07-28 stdio transport:
framing, stdout purity, "Shutdown", "Unexpected Termination")."""

from __future__ import annotations

import os
import signal
import sys

import anyio
import orjson
import pytest

from tests.stdio_gateway_process import FLAKY, META, NOTES, gateway, wait_gone

pytestmark = pytest.mark.anyio


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
