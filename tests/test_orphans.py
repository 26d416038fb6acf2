"""Issue #29, class 6, "Orphans": every process the gateway started, and
their descendants, end when the gateway ends, however it ends.

Over real processes: the gateway (a subprocess, tests/flow_harness.py) in
front of tests/servers/orphan_server.py, whose tools start sleepers in the
server's process group, in a session of their own (setsid), as a daemon (a
double fork: re-parented while the server runs), ignoring SIGTERM. Each pid
is watched through a pidfd opened before the gateway is stopped (so a reused
pid cannot stand in), and checked gone or a zombie afterwards. Linux only:
there the keeper is a subreaper; on macOS only the server's process group is
guaranteed (docs/behaviour.md), and pidfd_open does not exist.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from structlog.testing import capture_logs

from gateway.backs import process_start
from gateway.config import Config
from gateway.runtime import stdio_app
from tests.flow_harness import MODERN_META, FlowClient, flow_gateway, wait_for_log
from tests.stdio_gateway_process import alive

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the subreaper and pidfds are Linux's"
)

HERE = Path(__file__).parent
ORPHANS = [sys.executable, str(HERE / "servers" / "orphan_server.py")]
KEEPER = process_start.KEEPER
# Short, so that what ignores SIGTERM is killed well inside each test's bound.
GRACE = 1.0


@contextmanager
def watching(pids: list[int]) -> Iterator[Watch]:
    watch = Watch(pids)
    try:
        yield watch
    finally:
        watch.close()


class Watch:
    """pidfds on processes that are not our children: each turns readable
    when its process exits."""

    def __init__(self, pids: list[int]) -> None:
        self.fds: dict[int, int] = {}
        for pid in pids:
            self.fds[pid] = os.pidfd_open(pid)  # it must be running now

    async def all_gone(self, timeout: float) -> None:
        with anyio.fail_after(timeout):
            for fd in self.fds.values():
                await anyio.wait_readable(fd)
        self.assert_gone()

    def assert_gone(self) -> None:
        left = [pid for pid in self.fds if alive(pid)]
        assert not left, f"still running: {left}"

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)


async def call(gw: FlowClient, msg_id: int, name: str, **args: Any) -> dict[str, Any]:
    await gw.tool(msg_id, name, args)
    reply = await gw.reply(msg_id, timeout=10)
    assert "result" in reply, reply
    value: dict[str, Any] = json.loads(reply["result"]["content"][0]["text"])
    return value


async def started(gw: FlowClient, count: int = 1) -> dict[str, Any]:
    """The gateway's `count`-th "upstream started" log line."""
    with anyio.fail_after(10):
        while True:
            lines = [e for e in gw.log_events() if e.get("event") == "upstream started"]
            if len(lines) >= count:
                return lines[count - 1]
            await gw.logged.wait()


async def killed(gw: FlowClient) -> None:
    gw.process.kill()
    with anyio.fail_after(5):
        await gw.process.wait()


# -- the triggers of the issue ---------------------------------------------------
async def test_a_wrapped_busy_server_goes_when_the_gateway_is_killed() -> None:
    """`bash -c "python server.py; true"`: the parent-death signal reached only
    bash; the server, busy in a tool (not reading stdin, so the end of it did
    not reach it either), lived on."""
    wrapped = ["bash", "-c", " ".join(ORPHANS) + "; true"]
    async with flow_gateway(server=wrapped, upstream_exit_grace=GRACE) as gw:
        server = (await call(gw, 1, "whoami"))["pid"]
        start = await started(gw)
        assert start["pid"] != server  # bash's
        await gw.tool(2, "busy", {})
        await wait_for_log(gw, "upstream stderr", line="busy")
        with watching([server, start["pid"], start["keeper"]]) as watch:
            await killed(gw)
            await watch.all_gone(5)


async def test_a_forked_child_goes_when_the_gateway_is_killed() -> None:
    """A child the server started, still in its process group: the
    parent-death signal reached only the server."""
    async with flow_gateway(server=ORPHANS, upstream_exit_grace=GRACE) as gw:
        child = (await call(gw, 1, "spawn"))["pid"]
        server = (await call(gw, 2, "whoami"))["pid"]
        start = await started(gw)
        assert start["pid"] == server  # the log names the server, not the keeper
        with watching([child, server, start["keeper"]]) as watch:
            await killed(gw)
            await watch.all_gone(5)


async def test_a_forked_child_is_gone_when_the_gateway_exits_at_the_end_of_stdin() -> None:
    """A graceful exit: the gateway closes the server's stdin, the server
    exits, and what it left is stopped before the gateway's own exit."""
    async with flow_gateway(server=ORPHANS, upstream_exit_grace=GRACE) as gw:
        child = (await call(gw, 1, "spawn"))["pid"]
        server = (await call(gw, 2, "whoami"))["pid"]
        start = await started(gw)
        with watching([child, server, start["keeper"]]) as watch:
            await gw.close_stdin()
            with anyio.fail_after(8):
                assert await gw.process.wait() == 0
            watch.assert_gone()  # already, not eventually
        await wait_for_log(gw, "stopping what the upstream left running", pid=server)


# -- variants ---------------------------------------------------------------------
@pytest.mark.parametrize("ignore_term", [False, True], ids=["plain", "ignores-sigterm"])
async def test_a_child_that_left_the_group_goes_when_the_gateway_is_killed(
    ignore_term: bool,
) -> None:
    """setsid(): out of the server's process group, out of reach of any group
    signal; the keeper, its subreaper, still finds it (and SIGKILLs it after
    the grace when it ignores SIGTERM)."""
    async with flow_gateway(server=ORPHANS, upstream_exit_grace=GRACE) as gw:
        child = (await call(gw, 1, "spawn", setsid=True, ignore_term=ignore_term))["pid"]
        server = (await call(gw, 2, "whoami"))["pid"]
        start = await started(gw)
        assert os.getpgid(child) == child != server
        with watching([child, server, start["keeper"]]) as watch:
            await killed(gw)
            await watch.all_gone(GRACE + 5)


async def test_a_daemon_goes_when_the_gateway_is_killed() -> None:
    """A double fork: the sleeper left the group and lost its parent while the
    server runs (re-parented to the keeper, not to init)."""
    async with flow_gateway(server=ORPHANS, upstream_exit_grace=GRACE) as gw:
        daemon = (await call(gw, 1, "daemon"))["pid"]
        start = await started(gw)
        assert _ppid(daemon) == start["keeper"]
        with watching([daemon, start["pid"], start["keeper"]]) as watch:
            await killed(gw)
            await watch.all_gone(5)


async def test_a_server_that_ignores_sigterm_goes_when_the_gateway_is_killed() -> None:
    """SIGTERM first, SIGKILL after the exit grace: a busy server (the end of
    its stdin does not reach it) and its child ignore SIGTERM, and so does a
    child that left the group, which gets its SIGTERM once the server is gone
    and its SIGKILL one grace later."""
    server_cmd = [*ORPHANS, "--ignore-term"]
    async with flow_gateway(server=server_cmd, upstream_exit_grace=GRACE) as gw:
        child = (await call(gw, 1, "spawn", ignore_term=True))["pid"]
        daemon = (await call(gw, 2, "spawn", setsid=True, ignore_term=True))["pid"]
        start = await started(gw)
        await gw.tool(3, "busy", {})
        await wait_for_log(gw, "upstream stderr", line="busy")
        with watching([child, daemon, start["pid"], start["keeper"]]) as watch:
            began = anyio.current_time()
            await killed(gw)
            await watch.all_gone(GRACE * 2 + 5)
            took = anyio.current_time() - began
            assert GRACE * 2 <= took < GRACE * 2 + 3, took


async def test_a_sigterm_to_the_gateway_leaves_nothing_behind() -> None:
    async with flow_gateway(server=ORPHANS, upstream_exit_grace=GRACE) as gw:
        child = (await call(gw, 1, "spawn", setsid=True))["pid"]
        grandchild = (await call(gw, 2, "daemon"))["pid"]
        start = await started(gw)
        with watching([child, grandchild, start["pid"], start["keeper"]]) as watch:
            gw.process.send_signal(signal.SIGTERM)
            with anyio.fail_after(8):
                assert await gw.process.wait() == 0
            watch.assert_gone()


async def test_what_a_crashed_server_left_goes_while_the_gateway_runs() -> None:
    """The server exits (code 3) and leaves a child that left its group and
    ignores SIGTERM: the call fails at once, the log says the server's code,
    the child is killed after the grace, and the next call starts a server
    that the log names by its own pid."""
    async with flow_gateway(server=ORPHANS, upstream_exit_grace=GRACE) as gw:
        child = (await call(gw, 1, "spawn", setsid=True, ignore_term=True))["pid"]
        first = await started(gw)
        with watching([child, first["pid"], first["keeper"]]) as watch:
            await gw.tool(2, "exit", {"code": 3})
            failed = await gw.reply(2, timeout=5)
            assert failed["error"]["data"]["reason"] == "upstream-failed", failed
            assert "code 3" in failed["error"]["message"], failed
            await watch.all_gone(GRACE + 5)
        exited = await wait_for_log(gw, "upstream exited; the next request restarts it")
        assert exited["returncode"] == 3, exited
        again = (await call(gw, 3, "whoami"))["pid"]
        second = await started(gw, 2)
        assert second["pid"] == again != first["pid"], (first, second, again)


async def test_a_killed_keeper_leaves_the_server_to_the_gateway() -> None:
    """The keeper SIGKILLed (by hand, by the OOM killer) while the gateway
    runs: the gateway takes that as the server's end and stops its group."""
    async with flow_gateway(server=ORPHANS, upstream_exit_grace=GRACE) as gw:
        child = (await call(gw, 1, "spawn"))["pid"]
        start = await started(gw)
        with watching([child, start["pid"], start["keeper"]]) as watch:
            os.kill(start["keeper"], signal.SIGKILL)
            await watch.all_gone(GRACE + 5)
        await wait_for_log(gw, "stopping what the upstream left running", pid=start["pid"])
        assert (await call(gw, 2, "whoami"))["pid"] == (await started(gw, 2))["pid"]


# -- the keeper alone -------------------------------------------------------------
def _ppid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat.rpartition(b")")[2].split()[1])


def _keep(
    command: list[str], *, parent: int | None = None, ctype: str = "-", **kwargs: Any
) -> tuple[subprocess.CompletedProcess[bytes], list[str]]:
    """Run the keeper over `command` to its end: what it did, what it said."""
    assert KEEPER is not None
    report_r, report_w = os.pipe()
    args = [str(report_w), "0.5", str(os.getpid() if parent is None else parent), ctype]
    with os.fdopen(report_r, "rb") as report:
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-S", str(KEEPER), *args, "--", *command],
                pass_fds=(report_w,),
                capture_output=True,
                timeout=10,
                check=False,
                **kwargs,
            )
        finally:
            os.close(report_w)
        said = report.read().decode().splitlines()
    return done, said


def test_the_keeper_passes_the_server_bytes_and_status_through() -> None:
    """The server's stdout, stderr and exit code, as if it ran alone; the
    keeper's own words go to the report pipe only."""
    code = "import os, sys; print('out'); print('err', file=sys.stderr)\n"
    code += "print(os.getpid()); sys.exit(3)"
    done, said = _keep([sys.executable, "-c", code])
    lines = done.stdout.decode().splitlines()
    assert lines[0] == "out" and done.stderr == b"err\n"
    assert said == [f"pid {lines[1]}", "exit 3"]
    assert done.returncode == 3


def test_the_server_gets_the_keepers_stdio_and_no_other_file() -> None:
    """Not the report pipe, nor the keeper's own: what the gateway gave."""
    done, _ = _keep(["sh", "-c", "ls /proc/$$/fd; readlink /proc/$$/fd/0"], input=b"")
    *fds, stdin = done.stdout.decode().split()
    assert fds == ["0", "1", "2"] and stdin.startswith("pipe:")


def test_the_keeper_dies_of_the_signal_its_server_died_of() -> None:
    done, said = _keep(["sh", "-c", "kill -TERM $$"])
    assert said[-1] == "exit -15" and done.returncode == -signal.SIGTERM


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_the_keeper_goes_to_the_server(sig: signal.Signals) -> None:
    """A supervisor's signal to the keeper reaches the server's group; the
    keeper ends with the server's status."""
    assert KEEPER is not None
    code = (
        "import signal, sys, time\n"
        f"signal.signal({int(sig)}, lambda *a: sys.exit(7))\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)"
    )
    report_r, report_w = os.pipe()
    args = [str(report_w), "5", str(os.getpid()), "-", "--", sys.executable, "-c", code]
    with (
        os.fdopen(report_r, "rb") as report,
        subprocess.Popen(
            [sys.executable, "-I", "-S", str(KEEPER), *args],
            pass_fds=(report_w,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        ) as keeper,
    ):
        os.close(report_w)
        try:
            assert keeper.stdout is not None
            assert keeper.stdout.readline() == b"ready\n"  # its handler is set
            keeper.send_signal(sig)
            assert keeper.wait(timeout=5) == 7
            assert report.read().decode().splitlines()[1:] == ["exit 7"]
        finally:
            if keeper.poll() is None:
                keeper.kill()


def test_the_keeper_says_why_a_server_could_not_start() -> None:
    done, said = _keep(["/no/such/server"])
    assert said == ["error 2"] and done.returncode == 127  # ENOENT


def test_the_keeper_starts_nothing_once_its_gateway_is_gone(tmp_path: Path) -> None:
    """Its parent is not the gateway it was told of: that one died before the
    parent-death signal was set (and the keeper was re-parented)."""
    marker = tmp_path / "started"
    done, said = _keep(["touch", str(marker)], parent=1)
    assert done.returncode == 1 and said == [] and not marker.exists()


@pytest.mark.parametrize("ctype", ["-", "=C", "=C.UTF-8"])
def test_the_server_gets_the_locale_the_gateway_gave_it(ctype: str) -> None:
    """The keeper's Python sets LC_CTYPE when it finds the C locale (PEP 538);
    the server still gets what the gateway gave it (the shell shows it)."""
    env = {"PATH": os.environ["PATH"]}
    if ctype != "-":
        env["LC_CTYPE"] = ctype[1:]
    done, _ = _keep(["sh", "-c", 'echo "${LC_CTYPE-unset}"'], ctype=ctype, env=env)
    assert done.stdout.decode().strip() == ("unset" if ctype == "-" else ctype[1:])


# -- the gateway's own exit paths -------------------------------------------------
@pytest.mark.parametrize("where", ["in-shutdown", "in-a-task"])
async def test_a_fatal_error_in_the_gateway_still_stops_its_servers(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error nobody handles ends the stdio gateway (in its shutdown, or in
    one of its tasks, which cancels the rest): on its way out it still stops
    and reaps its servers and what they started. It did not: they lived on
    until the gateway's process ended (and, before the keeper, past it)."""
    fail = anyio.Event()  # set once the server and its child run

    async def broken_drain(*args: object) -> None:
        raise RuntimeError("a bug")

    async def broken_watch(self: object) -> None:
        await fail.wait()
        raise RuntimeError("a bug")

    if where == "in-shutdown":
        monkeypatch.setattr(stdio_app, "_drain", broken_drain)
    else:
        monkeypatch.setattr(stdio_app._Stopping, "watch_signals", broken_watch)
    config = Config(command=tuple(ORPHANS), upstream_exit_grace=GRACE)
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    params = {"name": "spawn", "arguments": {"setsid": True}, "_meta": MODERN_META}
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    os.write(in_w, orjson.dumps(request) + b"\n")
    watch = Watch([])
    pids: list[int] = []

    async def fail_after_the_reply() -> None:
        with anyio.fail_after(10):
            await anyio.wait_readable(out_r)
        reply = orjson.loads(os.read(out_r, 1 << 16).splitlines()[0])
        pids.append(json.loads(reply["result"]["content"][0]["text"])["pid"])
        start = next(e for e in logs if e["event"] == "upstream started")
        pids.extend([start["pid"], start["keeper"]])
        watch.fds.update({pid: os.pidfd_open(pid) for pid in pids})
        if where == "in-shutdown":
            os.close(in_w)  # the end of stdin: shutdown begins, and fails
        else:
            fail.set()

    try:
        with capture_logs() as logs, pytest.raises(BaseExceptionGroup) as failed:
            async with anyio.create_task_group() as tg:
                tg.start_soon(fail_after_the_reply)
                with anyio.fail_after(10):
                    await stdio_app.serve_stdio(config, in_r, out_w)
        assert failed.group_contains(RuntimeError, match="a bug")
        assert len(pids) == 3
        watch.assert_gone()  # by the time the error reached the caller
        assert any(e["event"].startswith("the gateway is ending on an error") for e in logs)
    finally:
        watch.close()
        for fd in (in_r, in_w, out_r, out_w):
            with contextlib.suppress(OSError):
                os.close(fd)
