"""An upstream that fails to start says why, and says which bound ran out
(issue: "An upstream that dies at start is reported as "exited (code 1)"
while its own reason sits in its stderr"; "A silent upstream takes 63 s to
fail start-up")."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import orjson
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream
from structlog.testing import capture_logs

from gateway import cli, wire
from gateway.backs.server_output import STDERR_LINE_BYTES, STDERR_TAIL_LINES, ServerExited
from gateway.backs.stdio_back import StdioServerProcess
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.probe_command import run_probe
from gateway.runtime.service import GatewayService
from tests.inprocess_service import in_process_service
from tests.scripted import MODERN_META, ScriptedServer, gateway

pytestmark = pytest.mark.anyio

PY = sys.executable
DIES_WITH_A_REASON = (
    PY,
    "-c",
    "import sys; sys.stderr.write('starting up\\nAPI_KEY missing\\n'); sys.exit(1)",
)


@asynccontextmanager
async def real_gateway(**config: Any) -> AsyncIterator[tuple[GatewayService, ClientLink, Any]]:
    """The service in-process over a real upstream command (no front)."""
    cfg = Config(**{"probe_timeout": 2.0, "startup_timeout": 10.0, **config})
    async with in_process_service(cfg) as c:

        async def call(msg_id: int) -> wire.Message:
            params = {"name": "x", "arguments": {}, "_meta": dict(MODERN_META)}
            await c.send(wire.request(msg_id, "tools/call", params))
            return await _reply(c.inbox, msg_id)

        yield c.service, c.link, call


async def _reply(inbox: MemoryObjectReceiveStream[wire.Message], msg_id: int) -> wire.Message:
    with anyio.fail_after(10):
        while True:  # skips notifications
            msg = await inbox.receive()
            if msg.get("id") == msg_id:
                return msg


async def test_an_upstream_that_dies_at_start_says_why_to_the_client_and_the_log() -> None:
    """Issue: the server's reason ("API_KEY missing") was only in info-level
    stderr lines, hidden by --log-level warning; the client got "exited (code 1)"."""
    with capture_logs() as logs:
        async with real_gateway(command=DIES_WITH_A_REASON) as (service, _, call):
            reply = await call(1)
            failure = service.pool.failure
    error = reply["error"]
    assert error["data"]["source"] == "mcp-era-gateway"
    assert "exited (code 1)" in error["message"]
    assert "API_KEY missing" in error["message"]
    assert failure is not None and "API_KEY missing" in failure
    loud = [e for e in logs if e["log_level"] in ("warning", "error")]
    assert any("API_KEY missing" in str(e.get("reason")) for e in loud)


async def test_a_missing_module_is_named_in_the_error() -> None:
    async with real_gateway(command=(PY, "-m", "no_such_module_for_this_test")) as (_, _, call):
        reply = await call(1)
    assert "No module named no_such_module_for_this_test" in reply["error"]["message"]


async def test_a_silent_upstream_error_names_the_bound_that_ran_out() -> None:
    """Issue: "make the error say which bound applied ("no answer to
    initialize within startup_timeout=30 s")"."""

    async def silent(server: ScriptedServer) -> None:
        while True:  # ends when the gateway closes the pipe
            await server.recv()

    async with gateway(silent, probe_timeout=0.05, startup_timeout=0.3) as c:
        failure = c.service.pool.failure
        reply = await c.call("tools/call", {"name": "x", "arguments": {}})
    assert failure == "no answer to initialize within startup_timeout=0.3 s"
    assert reply["error"]["message"] == (
        "Upstream server unavailable: no answer to initialize within startup_timeout=0.3 s"
    )


async def test_the_probe_command_makes_one_start_up_attempt(capfd: Any) -> None:
    """The 63 s: a silent server got two start-up attempts of startup_timeout
    (30 s) plus exit_grace (1.5 s) each, since the first ready() after the
    failed start tried again at once. One attempt, and its bound named."""
    silent = (PY, "-c", "import time; time.sleep(60)")
    config = Config(command=silent, probe_timeout=0.1, startup_timeout=0.5, upstream_exit_grace=0.1)
    with capture_logs() as logs:
        code = await run_probe(config)
    report = orjson.loads(capfd.readouterr().out)
    assert code == 1
    assert report["error"] == "no answer to initialize within startup_timeout=0.5 s"
    assert [e["event"] for e in logs].count("upstream started") == 1


async def test_the_stderr_kept_is_bounded_in_lines_and_bytes() -> None:
    chatty = (
        PY,
        "-c",
        "import sys\n"
        "for i in range(50): print(f'line-{i}-' + 'x' * 1000, file=sys.stderr)\n"
        "sys.exit(3)",
    )
    process = await StdioServerProcess.spawn(chatty, max_bytes=1 << 20)
    async with anyio.create_task_group() as tg:
        tg.start_soon(process.run_background)
        with pytest.raises(ServerExited) as exited:
            await process.receive()
        await process.aclose(0.5)
    tail = exited.value.stderr
    assert len(tail) == STDERR_TAIL_LINES
    assert all(len(line) <= STDERR_LINE_BYTES for line in tail)
    assert tail[-1].startswith("line-49-")
    assert "line-49-" in str(exited.value) and len(str(exited.value)) < 4 * STDERR_LINE_BYTES


def test_the_command_line_sets_the_start_up_bound_and_max_processes() -> None:
    parser = cli._parser("mcp-era-gateway")
    ns = parser.parse_args(["--startup-timeout", "7.5", "--max-processes", "4"])
    cfg = cli._build_config(ns, ["server"])
    assert (cfg.startup_timeout, cfg.max_processes) == (7.5, 4)
