"""A stdio upstream's exit is seen, and the process reaped, with or without
a pidfd (2026-07-28 stdio "Shutdown": close stdin, wait, SIGTERM, SIGKILL).
pidfd_open is missing on macOS and on Linux before 5.3, and refused by some
seccomp profiles and sandboxes (valgrind too): there the gateway once failed
every upstream start with an OSError traceback and stopped. Each runs with the
process keeper (the server's exit said on its report pipe) and without it
(where none can be run: the server is the gateway's child)."""

from __future__ import annotations

import errno
import os
import sys

import anyio
import pytest
from structlog.testing import capture_logs

from gateway.backs import process_start
from gateway.backs.server_output import ServerExited
from gateway.backs.stdio_back import StdioServerProcess

pytestmark = pytest.mark.anyio

PY = sys.executable
EXITS_3 = (PY, "-c", "import sys; sys.stderr.write('bye\\n'); sys.exit(3)")
READS_UNTIL_EOF = (PY, "-c", "import sys; sys.stdin.read()")
IGNORES_EOF_AND_SIGTERM = (
    PY,
    "-c",
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "sys.stdin.read(); print('ready', file=sys.stderr, flush=True)\n"
    "time.sleep(60)",
)


@pytest.fixture(params=["keeper", "no-keeper"], autouse=True)
def keeper(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "no-keeper":
        monkeypatch.setattr(process_start, "KEEPER", None)
    return str(request.param)


@pytest.fixture(params=["pidfd", "no-pidfd"])
def exit_watch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "no-pidfd":

        def refused(pid: int) -> int:
            raise OSError(errno.ENOSYS, "Function not implemented")

        monkeypatch.setattr(os, "pidfd_open", refused)
        monkeypatch.setattr(process_start, "_no_pidfd_said", set())
    return str(request.param)


async def test_an_exit_is_seen_with_its_code(exit_watch: str) -> None:
    process = await StdioServerProcess.spawn(EXITS_3, max_bytes=1 << 20)
    async with anyio.create_task_group() as tg:
        tg.start_soon(process.run_background)
        with anyio.fail_after(10), pytest.raises(ServerExited) as exited:
            await process.receive()
        assert await process.aclose(0.5) == 3
    assert exited.value.returncode == 3 and exited.value.stderr == ["bye"]


async def test_closing_stdin_stops_and_reaps_the_server(exit_watch: str) -> None:
    process = await StdioServerProcess.spawn(READS_UNTIL_EOF, max_bytes=1 << 20)
    async with anyio.create_task_group() as tg:
        tg.start_soon(process.run_background)
        with anyio.fail_after(10):
            assert await process.aclose(5.0) == 0
    assert process.returncode == 0


async def test_a_server_that_ignores_sigterm_is_killed_and_reaped(exit_watch: str) -> None:
    process = await StdioServerProcess.spawn(IGNORES_EOF_AND_SIGTERM, max_bytes=1 << 20)
    async with anyio.create_task_group() as tg:
        tg.start_soon(process.run_background)
        with anyio.fail_after(10):
            assert await process.aclose(0.3) == -9
    assert process.returncode == -9


async def test_no_pidfd_is_said_once_in_the_log(exit_watch: str) -> None:
    with capture_logs() as logs:
        for _ in range(2):
            process = await StdioServerProcess.spawn(READS_UNTIL_EOF, max_bytes=1 << 20)
            with anyio.fail_after(10):
                await process.aclose(5.0)
    said = [e for e in logs if e["event"] == "no pidfd_open; upstream exits are polled"]
    if exit_watch == "pidfd":
        assert said == []
    else:
        assert [e["reason"] for e in said] == ["Function not implemented"]
