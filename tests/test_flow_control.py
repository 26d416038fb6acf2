"""Issue #29, class 1: flow control that cannot deadlock. A slow reader slows
(or, past a bounded queue, fails) only the traffic headed to it; progress and
log notifications toward a slow client go first, in one log line; every call
ends; closing stdin always ends the gateway. Over real pipes, against a real
process (tests/servers/flood_server.py), and the rule itself as pure code."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compat_matrix.environment import INSTALL_HINT, missing_peers, peers_dir
from gateway import flow_control, wire
from gateway.flow_control import ERROR_ALLOWANCE, QueueBounds, Verdict
from gateway.pipes import PipeReader, PipeWriter
from tests.flow_harness import FLOOD, MODERN_META, flow_gateway, wait_for_log
from tests.http_gateway_process import _gateway, _until_readyz
from tests.stdio_gateway_process import alive

pytestmark = pytest.mark.anyio

SERVERS = Path(__file__).parent / "servers"
CLIENT_DROPS = "messages dropped for a client that reads too slowly"
BOUNDS = QueueBounds(queue_bytes=4096, notification_bytes=1024)


def _progress(size: int) -> wire.Message:
    return wire.notification("notifications/progress", {"progressToken": 1, "message": "x" * size})


# -- the rule, as pure code ----------------------------------------------------
def test_lossy_notifications_go_first() -> None:
    note = _progress(10)
    assert flow_control.verdict(note, 100, 900, BOUNDS) is Verdict.SEND
    assert flow_control.verdict(note, 100, 1000, BOUNDS) is Verdict.DROP
    reply = wire.result_response(1, {})
    assert flow_control.verdict(reply, 100, 1000, BOUNDS) is Verdict.SEND
    other = wire.notification("notifications/resources/updated", {"uri": "a"})
    assert flow_control.verdict(other, 100, 1000, BOUNDS) is Verdict.SEND


def test_past_the_bound_replies_are_replaced_requests_refused_notifications_dropped() -> None:
    full = BOUNDS.queue_bytes
    assert flow_control.verdict(wire.result_response(1, {}), 10, full, BOUNDS) is Verdict.REPLACE
    assert flow_control.verdict(wire.request(1, "ping"), 10, full, BOUNDS) is Verdict.REFUSE
    note = wire.notification("notifications/tools/list_changed")
    assert flow_control.verdict(note, 10, full, BOUNDS) is Verdict.DROP
    stand_in = flow_control.not_read_reply(wire.result_response(7, {}), 5000, full)
    assert stand_in["id"] == 7 and stand_in["error"]["data"]["reason"] == "peer-not-reading"


MESSAGES = st.one_of(
    st.builds(lambda n: wire.result_response(1, {"x": "y" * n}), st.integers(0, 3000)),
    st.builds(lambda n: wire.request(1, "ping", {"x": "y" * n}), st.integers(0, 3000)),
    st.builds(_progress, st.integers(0, 3000)),
    st.builds(
        lambda n: wire.notification("notifications/message", {"data": "y" * n}),
        st.integers(0, 3000),
    ),
    st.builds(
        lambda n: wire.notification("notifications/resources/updated", {"uri": "y" * n}),
        st.integers(0, 3000),
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(MESSAGES, st.integers(0, 6000)), max_size=200))
def test_a_queue_never_holds_more_than_its_bound_and_the_allowance(
    traffic: list[tuple[wire.Message, int]],
) -> None:
    """Whatever arrives and however little the peer reads, the bytes queued
    stay within `queue_bytes + ERROR_ALLOWANCE` (plus one message), and a
    reply either goes or has a stand-in while the allowance lasts."""
    queued = 0
    for msg, read in traffic:
        size = len(wire.encode(msg))
        verdict = flow_control.verdict(msg, size, queued, BOUNDS)
        if verdict is Verdict.SEND:
            queued += size
        elif verdict is Verdict.REPLACE:
            stand_in = flow_control.not_read_reply(msg, size, BOUNDS.queue_bytes)
            stand_in_size = len(wire.encode(stand_in))
            if flow_control.allowance_left(queued, stand_in_size, BOUNDS):
                queued += stand_in_size
        assert queued <= BOUNDS.queue_bytes + ERROR_ALLOWANCE
        queued = max(0, queued - read)


# -- the pipe writer ----------------------------------------------------------
async def test_a_cork_held_across_an_await_does_not_stop_the_pipe() -> None:
    """The wedge of issue #29: a task corked a writer and then waited for
    bytes that only the writer could send. A cork now holds bytes back for
    the rest of the loop step at most."""
    read_fd, write_fd = os.pipe()
    writer, reader = PipeWriter(write_fd), PipeReader(read_fd)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run_flusher)
            writer.cork()
            writer.write(b"hello\n")
            with anyio.fail_after(5):
                assert await reader.read() == b"hello\n"  # still corked
            writer.uncork()
            tg.cancel_scope.cancel()
    finally:
        reader.release()
        os.close(read_fd)
        os.close(write_fd)


async def test_writes_never_wait_for_a_peer_that_does_not_read() -> None:
    read_fd, write_fd = os.pipe()
    writer = PipeWriter(write_fd)
    try:
        for _ in range(64):
            writer.write(b"x" * 65536)  # 4 MiB at once: queued, not awaited
        assert writer.queued >= 4 * 1024 * 1024 - 65536 * 2
    finally:
        os.close(read_fd)
        os.close(write_fd)


# -- the whole gateway over real pipes ----------------------------------------
@pytest.mark.parametrize("modern", [True, False], ids=["modern", "legacy"])
async def test_a_progress_flood_toward_a_paused_client(modern: bool) -> None:
    """Issue #29 trigger: 3,000 progress messages of 1 KB while the client does
    not read. The call's reply and the next call's arrive; progress past the
    notification bound is dropped, said in one log line."""
    async with flow_gateway(modern=modern) as gw:
        gw.pause()
        await gw.tool(1, "flood", {"count": 3000, "size": 1000}, "p")
        await wait_for_log(gw, "upstream stderr", line="flood done")
        await gw.tool(2, "echo", {"after": "flood"})
        dropped = await wait_for_log(gw, CLIENT_DROPS)
        gw.resume()
        replies = await gw.all_replies([1, 2])
        assert replies[1]["result"]["content"][0]["text"] == "flooded 3000"
        assert "flood" in replies[2]["result"]["content"][0]["text"]
        progress = [m for m in gw.messages if m.get("method") == "notifications/progress"]
        assert 0 < len(progress) < 3000
        steps = [p["params"]["progress"] for p in progress]
        assert steps == sorted(steps)  # what is delivered is in order
        assert dropped["kind"] == "lossy"
        await gw.tool(3, "echo", {"still": "served"})
        assert "served" in (await gw.reply(3))["result"]["content"][0]["text"]
    assert [e["event"] for e in gw.log_events()].count(CLIENT_DROPS) == 1


async def test_log_messages_toward_a_paused_client_are_dropped_not_queued() -> None:
    """The same for notifications/message (a call with no progress token)."""
    async with flow_gateway(modern=False) as gw:
        await gw.request(9, "logging/setLevel", {"level": "info"})
        await gw.reply(9)
        gw.pause()
        await gw.tool(1, "flood", {"count": 3000, "size": 1000})
        await wait_for_log(gw, "upstream stderr", line="flood done")
        await wait_for_log(gw, CLIENT_DROPS)
        gw.resume()
        assert (await gw.reply(1))["result"]["content"][0]["text"] == "flooded 3000"
        logs = [m for m in gw.messages if m.get("method") == "notifications/message"]
        assert 0 < len(logs) < 3000


async def test_requests_queued_for_a_server_that_is_briefly_not_reading(tmp_path: Path) -> None:
    """Issue #29 trigger: a legacy client queues more than 1 MiB of requests
    while a sync tool blocks the server's loop, then sends a notification:
    every reply arrives, the busy call's too."""
    release = tmp_path / "release"
    async with flow_gateway(modern=False) as gw:
        await gw.tool(1, "hold", {"release_file": str(release)})
        for msg_id in range(2, 28):
            await gw.tool(msg_id, "echo", {"pad": "y" * 50_000})
        await gw.send({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
        await gw.tool(28, "echo", {"last": True})
        release.touch()
        replies = await gw.all_replies(list(range(1, 29)))
        assert replies[1]["result"]["content"][0]["text"] == "released"
        assert all("result" in replies[i] for i in range(2, 29))


@pytest.mark.parametrize("modern", [True, False], ids=["modern", "legacy"])
async def test_unread_replies_then_an_invalid_request(modern: bool) -> None:
    """Issue #29 trigger: more than 1 MiB of replies unread by the client,
    then a request with an invalid param: everything is delivered once the
    client reads, and closing stdin then ends the gateway."""
    async with flow_gateway(modern=modern) as gw:
        gw.pause()
        for msg_id in range(1, 16):
            await gw.tool(msg_id, "echo", {"pad": "z" * 100_000})
        await gw.request(16, "tools/call", {"name": 5})
        await gw.tool(17, "echo", {"after": "invalid"})
        gw.resume()
        replies = await gw.all_replies(list(range(1, 18)))
        assert all("result" in replies[i] for i in range(1, 16))
        assert replies[16]["error"]["code"] == wire.INVALID_PARAMS
        assert "result" in replies[17]
        await gw.close_stdin()
        with anyio.fail_after(5):
            assert await gw.process.wait() == 0


async def test_a_client_that_never_reads_gets_stand_ins_past_the_bound() -> None:
    """Past `max_queued_bytes` a reply is replaced by a short error under its
    id (the call still ends), said in one log line; when the client reads at
    last, every call has exactly one answer."""
    async with flow_gateway(
        modern=True,
        gateway_max_message_bytes=262144,
        gateway_max_queued_bytes=262144,
        gateway_max_queued_notification_bytes=65536,
    ) as gw:
        await gw.tool(100, "echo", {})
        await gw.reply(100)
        gw.pause()
        for msg_id in range(1, 31):
            await gw.tool(msg_id, "echo", {"reply_pad": 40_000})
        dropped = await wait_for_log(gw, CLIENT_DROPS)
        assert dropped["kind"] == "reply"
        gw.resume()
        replies = await gw.all_replies(list(range(1, 31)))
        answered = [m["id"] for m in gw.messages if "method" not in m]
        assert sorted(answered) == [*range(1, 31), 100]
        stood_in = [i for i in range(1, 31) if "error" in replies[i]]
        assert stood_in, "some replies went past the bound"
        assert all(replies[i]["error"]["data"]["reason"] == "peer-not-reading" for i in stood_in)
        assert "result" in replies[1]  # the first fitted
        await gw.tool(40, "echo", {"reads": "again"})
        assert "result" in await gw.reply(40)


async def test_closing_stdin_ends_the_gateway_whatever_is_queued() -> None:
    """A client that never reads and closes stdin: the gateway and its server
    are gone within shutdown_grace + the exit grace, not at SIGTERM."""
    async with flow_gateway(modern=False, gateway_shutdown_grace=1, upstream_exit_grace=1) as gw:
        gw.pause()
        for msg_id in range(1, 40):
            await gw.tool(msg_id, "echo", {"pad": "v" * 100_000})
        await gw.close_stdin()
        started = time.monotonic()
        with anyio.fail_after(6):
            assert await gw.process.wait() == 0
        assert time.monotonic() - started < 1 + 1 + 2  # grace, exit grace, start-up slack


# -- a property over real pipes ------------------------------------------------
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("flood"), st.integers(1, 1500), st.integers(10, 3000)),
        st.tuples(st.just("burst"), st.integers(1, 30), st.integers(10, 60_000)),
        st.tuples(st.just("pause"), st.just(0), st.just(0)),
        st.tuples(st.just("resume"), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=200 if PROFILE == "deep" else 6, deadline=None, derandomize=PROFILE != "deep"
)
@given(STEPS, st.booleans())
def test_random_interleavings_never_lose_a_reply_and_always_progress(
    steps: list[tuple[str, int, int]], modern: bool
) -> None:
    """Issue #29: random interleavings of client reads paused and resumed,
    server bursts (progress floods) and client bursts (many requests), over
    real pipes: every request gets its own reply (all fit the queue), the
    delivered progress of each call is in order, and a last call is answered."""
    anyio.run(_interleave, steps, modern)


async def _interleave(steps: list[tuple[str, int, int]], modern: bool) -> None:
    async with flow_gateway(modern=modern) as gw:
        ids: list[int] = []
        floods: dict[int, int] = {}
        for kind, count, size in steps:
            if kind == "pause":
                gw.pause()
            elif kind == "resume":
                gw.resume()
            elif kind == "flood":
                msg_id = len(ids) + 1
                ids.append(msg_id)
                floods[msg_id] = count
                await gw.tool(msg_id, "flood", {"count": count, "size": size}, f"t{msg_id}")
            else:
                for _ in range(count):
                    msg_id = len(ids) + 1
                    ids.append(msg_id)
                    await gw.tool(msg_id, "echo", {"pad": "q" * size})
        last = len(ids) + 1
        await gw.tool(last, "echo", {"last": True})
        gw.resume()
        replies = await gw.all_replies([*ids, last], timeout=60)
        for msg_id in [*ids, last]:
            assert "result" in replies[msg_id], replies[msg_id]
        answered = [m["id"] for m in gw.messages if "method" not in m and m["id"] != 0]
        assert sorted(answered) == sorted([*ids, last])  # one reply each
        for msg_id, count in floods.items():
            steps_seen = _progress_of(gw.messages, f"t{msg_id}")
            assert steps_seen == sorted(steps_seen) and len(steps_seen) <= count


def _progress_of(messages: list[dict[str, Any]], token: str) -> list[int]:
    return [
        m["params"]["progress"]
        for m in messages
        if m.get("method") == "notifications/progress" and m["params"]["progressToken"] == token
    ]


# -- real peers ---------------------------------------------------------------
@pytest.mark.peers
def test_real_sdk_progress_flood_through_the_gateway() -> None:
    """Issue #29's real-peer trigger: an mcp 1.30 FastMCP tool reporting
    progress 1,000 times with 100 KB messages to an mcp 1.30 client reading
    normally (before: the client saw 172, then its own timeout, and the next
    call hung too). The call ends, the next call is answered."""
    missing = missing_peers()
    if missing:
        pytest.fail(f"real peers missing ({', '.join(missing)}): {INSTALL_HINT}", pytrace=False)
    python = str(peers_dir() / "py1" / "bin" / "python")
    gateway = [sys.executable, "-m", "gateway", "--log-format", "json", "--"]
    server = [python, str(SERVERS / "py1_progress_flood.py")]
    flood_args = ["1000", "100000", "--"]
    done = subprocess.run(
        [python, str(SERVERS / "py1_progress_client.py"), *flood_args, *gateway, *server],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = orjson.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["flood"] == ["flooded 1000"]
    assert outcome["after"] == ["pong"]
    assert outcome["in_order"] and 0 < outcome["progress_seen"] <= 1000


# -- class 2: a server's exit while a child holds its stdout --------------------
async def _exited(pid: int, timeout: float = 10) -> None:
    """Not our child, but its pidfd turns readable when it exits."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        with anyio.fail_after(timeout):
            await anyio.wait_readable(fd)
    finally:
        os.close(fd)
    assert not alive(pid)


@pytest.mark.parametrize("modern", [True, False], ids=["modern", "legacy"])
async def test_a_server_exit_is_seen_while_its_child_holds_stdout(
    modern: bool, tmp_path: Path
) -> None:
    """Issue #29, class 2: a tool forks a child that inherits stdout, and the
    server exits. The call in flight fails at once with upstream-failed (not
    at its request_timeout), the child goes with the server's process group,
    and the next request restarts the server."""
    pid_file = tmp_path / "child.pid"
    async with flow_gateway(modern=modern, upstream_request_timeout=60) as gw:
        await gw.tool(1, "echo", {})
        await gw.reply(1)
        await gw.tool(2, "fork_and_exit", {"pid_file": str(pid_file)})
        failed = await gw.reply(2, timeout=10)
        assert failed["error"]["data"]["reason"] == "upstream-failed"
        child = int(pid_file.read_text())
        await _exited(child)
        await gw.tool(3, "echo", {"after": "restart"})
        assert "restart" in (await gw.reply(3))["result"]["content"][0]["text"]


async def test_readyz_turns_503_when_the_server_exits_while_its_child_holds_stdout(
    tmp_path: Path,
) -> None:
    """Class 2 on the HTTP front: before, /readyz said 200 for as long as the
    child lived. Now the exit is the crash it is: 503, then the restart."""
    slow_restart = "[upstream]\nhealth_interval = 0.2\nrestart_backoff_initial = 3\n"
    pid_file = tmp_path / "child.pid"
    async with _gateway(tmp_path, ["--", *FLOOD], slow_restart) as (_, client):
        await _until_readyz(client, 200)
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "fork_and_exit",
                "arguments": {"pid_file": str(pid_file)},
                "_meta": MODERN_META,
            },
        }
        headers = {
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": "tools/call",
            "mcp-name": "fork_and_exit",
        }
        answer = await client.post("/mcp", json=call, headers=headers)
        assert answer.json()["error"]["data"]["reason"] == "upstream-failed"
        await _until_readyz(client, 503, within=3)
        await _until_readyz(client, 200, within=15)


async def test_metrics_count_what_a_slow_reader_was_not_sent(tmp_path: Path) -> None:
    """Issue #29 class 1: a drop is "said in one rate-limited log line and a
    metric". A stdio server behind the HTTP front stops reading its stdin;
    requests past the bound fail at once (`upstream-not-reading`), the others
    are answered once it reads again, and /metrics counts the refusals."""
    small = (
        "[gateway]\nmax_message_bytes = 65536\nmax_queued_bytes = 65536\n"
        "max_queued_notification_bytes = 16384\n"
    )
    release = tmp_path / "release"
    headers = {
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
    }
    answers: dict[int, dict[str, Any]] = {}
    first_refusal = anyio.Event()

    async def call(client: Any, msg_id: int, name: str, arguments: dict[str, Any]) -> None:
        params = {"name": name, "arguments": arguments, "_meta": MODERN_META}
        msg = {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": params}
        reply = await client.post(
            "/mcp", json=msg, headers={**headers, "mcp-name": name}, timeout=30
        )
        answers[msg_id] = reply.json()
        if _reason(answers[msg_id]) == "upstream-not-reading":
            first_refusal.set()

    async with _gateway(tmp_path, ["--", *FLOOD], small) as (_, client):
        await _until_readyz(client, 200)
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, client, 1, "hold", {"release_file": str(release)})
            for msg_id in range(2, 10):
                tg.start_soon(call, client, msg_id, "echo", {"pad": "y" * 40_000})
            with anyio.fail_after(20):  # the refusals come back at once, by the rule
                await first_refusal.wait()
            release.touch()
        metrics = (await client.get("/metrics")).text
    refused = [i for i, a in answers.items() if _reason(a) == "upstream-not-reading"]
    assert refused and all("result" in answers[i] for i in answers if i not in refused), answers
    line = 'mcp_gateway_messages_dropped_total{toward="server",kind="request"}'
    counted = [float(x.split()[-1]) for x in metrics.splitlines() if x.startswith(line)]
    assert counted and counted[0] >= len(refused), metrics


def _reason(answer: dict[str, Any]) -> str | None:
    reason = ((answer.get("error") or {}).get("data") or {}).get("reason")
    return reason if isinstance(reason, str) else None
