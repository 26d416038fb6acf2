"""Issue #14 ("A new user's first hour"), the runtime half: what a new user
meets when the gateway starts and stops. Each test runs the gateway as a
real process, as the user would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest
import structlog

from gateway.config import Config
from gateway.runtime.mrtr_bridge import MrtrBridge
from gateway.runtime.service import GatewayService
from tests.http_gateway_process import (
    FAST,
    _children,
    _gateway,
    _until_listening,
    _until_readyz,
    call,
    free_port,
    modern_headers,
)
from tests.stdio_gateway_process import FLAKY, NOTES, gateway, wait_gone

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parent.parent
GATEWAY = [sys.executable, "-m", "gateway"]
PID_NOTES = [sys.executable, str(ROOT / "tests" / "servers" / "pid_notes_server.py")]


async def test_stdin_closed_at_once_starts_one_upstream_only(tmp_path: Path) -> None:
    """Issue #14: "When its stdin closes at once, the gateway starts a second
    upstream process during shutdown." The shutdown closed the probing
    process, the probe took that for a server that died during the probe
    (DESIGN §4: restart it, legacy) and started another."""
    pid_file = tmp_path / "pids"
    result = await anyio.run_process(
        [sys.executable, "-m", "gateway", "--", *PID_NOTES],
        input=b"",
        check=False,
        env={**os.environ, "PID_FILE": str(pid_file)},
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == b""
    started = pid_file.read_text().split()
    assert len(started) == 1, result.stderr.decode()
    assert b"upstream unavailable" not in result.stderr


async def test_sighup_stops_the_stdio_gateway_like_sigterm() -> None:
    """Issue #14: "SIGHUP kills it with 129 and no drain: treat it like
    SIGTERM": exit 0, and the upstream is reaped."""
    async with gateway(server=FLAKY) as gw:
        await gw.call(1, "tools/call", {"name": "echo"})
        (child,) = gw.children()
        gw.process.send_signal(signal.SIGHUP)
        with anyio.fail_after(15):
            assert await gw.process.wait() == 0
        await wait_gone(child)


async def test_sighup_drains_the_http_front_like_sigterm(tmp_path: Path) -> None:
    """Issue #14, SIGHUP like SIGTERM, over the HTTP front: /readyz turns 503
    "draining" (issue #13's drain step), then exit 0 with the upstream reaped."""
    config = FAST + "[gateway]\ndrain_delay = 0.5\n"
    async with _gateway(tmp_path, ["--", *FLAKY], config) as (process, client):
        await _until_readyz(client, 200)
        (server,) = _children(process.pid)
        process.send_signal(signal.SIGHUP)
        draining = await _until_readyz(client, 503, within=1)
        assert draining["status"] == "draining"
        with anyio.fail_after(10):
            assert await process.wait() == 0
        await wait_gone(int(server))


async def _never_forward(*args: Any) -> Any:
    raise AssertionError("not called")


def _never_shape(*args: Any) -> Any:
    raise AssertionError("not called")


def _warnings(config: Config) -> list[str]:
    with structlog.testing.capture_logs() as logs:
        MrtrBridge(config, _never_forward, _never_shape)
    return [str(e["event"]) for e in logs if e["log_level"] == "warning"]


@pytest.mark.parametrize(
    "config",
    [
        Config(command=("server",)),
        Config(command=("server",), replay_tools=("search_*",)),
        Config(command=("server",), listen="127.0.0.1:8080"),
        Config(
            command=("server",),
            listen="127.0.0.1:8080",
            state_key="k" * 32,
            replay_tools=("search_*",),
            instance_id="gw-1",
        ),
    ],
    ids=["stdio", "stdio-replay", "http-hold", "http-replay-keyed"],
)
def test_no_state_key_warning_where_a_random_key_cannot_matter(config: Config) -> None:
    """Issue #14: "Every start prints a warning about the requestState key and
    replicas, even for one stdio process where it cannot matter: warn only
    where it can." One process that alone opens what it sealed (stdio; HTTP
    in hold mode without replicas), or a key configured: no warning."""
    assert _warnings(config) == []


@pytest.mark.parametrize(
    "config",
    [
        Config(command=("server",), listen="127.0.0.1:8080", replay_tools=("search_*",)),
        Config(command=("server",), listen="127.0.0.1:8080", instance_id="gw-1"),
        Config(command=("server",), instance_id="gw-1"),
    ],
    ids=["http-replay", "http-replica", "stdio-replica"],
)
def test_the_state_key_warning_where_a_random_key_can_fail_a_retry(config: Config) -> None:
    """Issue #14, the other side: replicas (an `instance_id`) or replay mode
    over the HTTP front, where a retry's state may be opened by a process
    that did not seal it, still get the one warning line."""
    (line,) = _warnings(config)
    assert "no requestState key configured" in line


SEARCH = call(1, "tools/call", name="search_notes", arguments={"query": "secret-word"})
DIRECTIONS = ["client→gw", "gw→upstream", "upstream→gw", "gw→client"]


def _message_lines(stderr: bytes) -> list[dict[str, Any]]:
    events = [orjson.loads(x) for x in stderr.splitlines() if x.startswith(b"{")]
    return [e for e in events if e.get("event") == "message"]


def _assert_one_translated_call(lines: list[dict[str, Any]], raw: bytes) -> None:
    """The tools/call's four lines, each side in its own era, with method,
    id and size, and nothing of the body (tool arguments may be secrets)."""

    def find(direction: str, method: str, msg_id: object = None) -> int:
        (index,) = [
            i
            for i, e in enumerate(lines)
            if e["direction"] == direction
            and e["method"] == method
            and (msg_id is None or e["id"] == msg_id)
        ]
        return index

    asked = find("client→gw", "tools/call")
    sent = find("gw→upstream", "tools/call")
    answered = find("upstream→gw", "reply", lines[sent]["id"])
    replied = find("gw→client", "reply", 1)
    assert asked < sent < answered < replied, lines
    four = [lines[i] for i in (asked, sent, answered, replied)]
    assert [e["era"] for e in four] == ["modern", "legacy", "legacy", "modern"]
    assert four[0]["id"] == 1
    assert all(isinstance(e["bytes"], int) and e["bytes"] > 50 for e in four)
    assert b"secret-word" not in raw


async def _stdio_run(level: str) -> tuple[bytes, bytes]:
    result = await anyio.run_process(
        [*GATEWAY, "--log-level", level, "--log-format", "json", "--", *NOTES],
        input=orjson.dumps(SEARCH) + b"\n",
        cwd=ROOT,
    )
    return result.stdout, result.stderr


async def test_debug_logs_each_message_on_each_side_over_stdio() -> None:
    """Issue #14: "`--log-level debug` should show a one-line trace of each
    message on each side (direction, era, method, id, size), so a user can
    see a translation without a packet capture"."""
    stdout, stderr = await _stdio_run("debug")
    assert orjson.loads(stdout)["id"] == 1
    lines = _message_lines(stderr)
    assert sorted({e["direction"] for e in lines}) == sorted(DIRECTIONS)
    _assert_one_translated_call(lines, stderr)


async def test_nothing_of_the_message_trace_at_info() -> None:
    """Issue #14, the other side: at info no line, and nothing set up for
    one (no link wrapped, no upstream tap: no event dict built per message)."""
    stdout, stderr = await _stdio_run("info")
    assert orjson.loads(stdout)["id"] == 1
    assert _message_lines(stderr) == []
    service = GatewayService(Config(command=("server",)))
    assert service.message_log is None
    assert service.pool.supervisor._tap is None


async def test_debug_logs_each_message_on_each_side_over_http(tmp_path: Path) -> None:
    """Issue #14's message trace, over the HTTP front."""
    port = free_port()
    log_file = tmp_path / "gw.log"
    cmd = [*GATEWAY, "--listen", f"127.0.0.1:{port}"]
    cmd += ["--log-level", "debug", "--log-format", "json", "--", *NOTES]
    with log_file.open("wb") as err:
        process = await anyio.open_process(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            await _until_listening(client)
            answer = await client.post(
                "/mcp", json=SEARCH, headers=modern_headers("tools/call", "search_notes")
            )
            assert answer.status_code == 200, answer.text
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(15):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            with anyio.fail_after(10):
                await process.wait()
    raw = log_file.read_bytes()
    _assert_one_translated_call(_message_lines(raw), raw)
