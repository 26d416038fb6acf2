"""Issue #29, class 5: what waits to be written to an HTTP client is bounded
in bytes, per stream and per principal. "A client that never reads its
stream while the server sends 1 MB notifications: gateway RSS 34 -> 419 MiB
(400 messages) ... the same on 2025-06-18 POST streams and the legacy GET
stream".

Over real sockets against the gateway as a process
(tests/http_flow_harness.py) in front of tests/servers/flood_server.py (the
accounting itself, without sockets: tests/test_client_queues.py). The
server answers one call at a time,
in order, so a call made after a flood is answered only once the gateway has
taken every message of the flood: that is what the tests wait on."""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway import wire
from tests.http_flow_harness import (
    CLIENT_DROPS,
    HttpFlowGateway,
    LegacySession,
    http_flow_gateway,
    legacy_session,
    modern_call,
    unread,
)

pytestmark = pytest.mark.anyio

KIB = 1024
# Small bounds, so that a flood of a few MiB shows them: a stream holds at
# most 512 KiB (notifications of any kind alike), a principal 1 MiB over its
# streams.
BOUNDS = """
[gateway]
max_message_bytes = 262144
max_queued_bytes = 524288
max_queued_notification_bytes = 524288
[http]
max_queued_bytes_per_principal = 1048576
"""
STREAM_BOUND = 512 * KIB
PRINCIPAL_BOUND = 1024 * KIB
NOTE_SIZE = 33 * KIB  # a notification of the floods, encoded, at most
# ~20 MB: far more than the kernel takes for a connection nobody reads (the
# gateway's send buffer autotunes up to tcp_wmem's 4 MiB) and the bounds.
FLOOD = {"count": 600, "size": 32 * KIB}
# Unbounded, what the kernel did not take of FLOOD stayed in the gateway's
# memory: 17 MiB more (with the 1,024-message cap of before).
RSS_GROWTH_KIB = 8 * KIB
ROUND = {"count": 100, "size": 32 * KIB}


def _progress(messages: list[dict[str, Any]]) -> list[int]:
    return [
        m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"
    ]


def _logs(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m.get("method") == "notifications/message"]


def _text(reply: dict[str, Any]) -> str:
    return str(reply["result"]["content"][0]["text"])


def _full(queued: int, bound: int) -> bool:
    """Whether queues nobody reads hold `bound`: the next notification of
    the floods would go past it."""
    return bound - NOTE_SIZE < queued <= bound


async def _modern_echo(gw: HttpFlowGateway, msg_id: int) -> None:
    """A call behind the flood: once it is answered, the gateway has taken
    every message the server sent before it."""
    headers, body = modern_call(msg_id, "echo", {"n": msg_id})
    assert "result" in await gw.post(headers, body)


async def _fill(gw: HttpFlowGateway, session: LegacySession, bound: int) -> tuple[int, int]:
    """Flood the server's log toward the session's principal in rounds
    until its unread streams hold `bound`; the bytes queued then, and the
    rounds it took. (How much the kernel takes first, and how much is
    dropped while the gateway reads faster than it writes, depends on the
    machine; that the streams then fill does not.)"""
    with anyio.fail_after(20):
        for n in itertools.count(1):  # each pass floods once, and ends once full
            flood = {"name": "flood", "arguments": ROUND}
            assert _text(await session.request(100 + n, "tools/call", flood)) == "flooded 100"
            queued = await gw.queued_bytes()
            if _full(queued, bound):
                return queued, n
    raise AssertionError("unreachable")


# -- each trigger of the issue, over real sockets ------------------------------------
async def test_a_modern_post_stream_nobody_reads(tmp_path: Path) -> None:
    """A 2026-07-28 POST whose client stops reading while the server sends
    ~20 MB of progress: the gateway holds at most its stream's bound for it
    (its memory stays flat), drops the rest with one log line, and the reply
    arrives once the client reads."""
    async with http_flow_gateway(tmp_path, BOUNDS) as gw:
        before = gw.rss_kib()
        headers, body = modern_call(1, "flood", FLOOD, token="p")
        async with unread(gw, "POST", headers, body) as stream:
            await _modern_echo(gw, 2)
            queued = await gw.queued_bytes()
            grown = gw.rss_kib() - before
            dropped = await gw.wait_for_log(CLIENT_DROPS)
            messages = await stream.read_all()
        assert queued <= STREAM_BOUND and grown < RSS_GROWTH_KIB, (queued, grown)
        assert dropped["kind"] == "lossy" and dropped["bound"] == "stream"
        assert dropped["peer"] == "http" and dropped["principal"] == "local"
        assert _text(messages[-1]) == "flooded 600" and messages[-1]["id"] == 1
        steps = _progress(messages)
        assert 0 < len(steps) < 600 and steps == sorted(steps)  # in order, less what went
        assert await gw.dropped("lossy") == 600 - len(steps)
        assert await gw.queued_bytes() == 0  # released as it was written
    assert [e["event"] for e in gw.log_events()].count(CLIENT_DROPS) == 1


async def test_a_2025_06_18_post_stream_nobody_reads(tmp_path: Path) -> None:
    """The same on a legacy session's POST stream (2025-06-18: no resumable
    streams, the answer is the POST's own SSE stream)."""
    async with http_flow_gateway(tmp_path, BOUNDS) as gw:
        session = await legacy_session(gw, "2025-06-18")
        before = gw.rss_kib()
        headers, body = session.call(5, "flood", FLOOD, token="p")
        async with unread(gw, "POST", headers, body) as stream:
            assert "result" in await session.request(6, "tools/call", {"name": "echo"})
            queued = await gw.queued_bytes()
            grown = gw.rss_kib() - before
            await gw.wait_for_log(CLIENT_DROPS)
            messages = await stream.read_all()
        assert queued <= STREAM_BOUND and grown < RSS_GROWTH_KIB, (queued, grown)
        assert _text(messages[-1]) == "flooded 600" and messages[-1]["id"] == 5
        steps = _progress(messages)
        assert 0 < len(steps) < 600 and steps == sorted(steps)
        assert await gw.dropped("lossy") == 600 - len(steps)
        assert await gw.queued_bytes() == 0


async def test_a_legacy_get_stream_nobody_reads(tmp_path: Path) -> None:
    """A legacy session's GET stream, unread, while the server logs outside
    of any call's stream: it fills up to its bound and no further however
    much more comes (20 MB more here, the memory flat), and what was kept
    arrives once the client reads."""
    async with http_flow_gateway(tmp_path, BOUNDS) as gw:
        session = await legacy_session(gw, "2025-06-18")
        async with unread(gw, "GET", session.headers(accept="text/event-stream")) as stream:
            _, rounds = await _fill(gw, session, STREAM_BOUND)
            before = gw.rss_kib()
            flood = {"name": "flood", "arguments": FLOOD}
            reply = await session.request(5, "tools/call", flood)
            assert _text(reply) == "flooded 600"  # the call's reply is on its own stream
            queued = await gw.queued_bytes()
            grown = gw.rss_kib() - before
            await gw.wait_for_log(CLIENT_DROPS)
            dropped = await gw.dropped("lossy")
            kept = rounds * ROUND["count"] + FLOOD["count"] - dropped
            messages = await stream.read_until(lambda got: len(_logs(got)) == kept)
            assert await gw.queued_bytes() == 0
        assert _full(queued, STREAM_BOUND) and grown < RSS_GROWTH_KIB, (queued, grown)
        # Full before it, the stream took none of the last flood.
        assert dropped >= FLOOD["count"] and len(_logs(messages)) == kept


async def test_the_bound_of_a_principal_over_its_streams(tmp_path: Path) -> None:
    """Four unread GET streams of one principal's sessions, each of which
    could hold 512 KiB, hold 1 MiB together, the principal's bound. That
    principal's next call loses its progress, and its reply is replaced by
    `peer-not-reading` if it does not fit; another principal's call gets all
    of its progress and its reply. Closing the streams releases their bytes."""
    config = BOUNDS + """tokens = { alice = "alice-token", bob = "bob-token" }\n"""
    alice = {"authorization": "Bearer alice-token"}
    bob = {"authorization": "Bearer bob-token"}
    async with http_flow_gateway(tmp_path, config, token="alice-token") as gw:
        sessions = [await legacy_session(gw, "2025-06-18", "alice-token") for _ in range(4)]
        async with contextlib.AsyncExitStack() as stack:
            for session in sessions:
                get = session.headers(accept="text/event-stream")
                await stack.enter_async_context(unread(gw, "GET", get))
            # The server's log goes to every session of the principal.
            queued, _ = await _fill(gw, sessions[0], PRINCIPAL_BOUND)
            assert queued < 4 * STREAM_BOUND
            small = {"count": 200, "size": 1000, "reply_pad": 200_000}
            headers, body = modern_call(11, "flood", small, token="a")
            got_alice = await gw.post_all({**headers, **alice}, body)
            headers, body = modern_call(12, "flood", small, token="b")
            got_bob = await gw.post_all({**headers, **bob}, body)
            assert len(_progress(got_bob)) == 200  # another principal: untouched
            assert _text(got_bob[-1]).startswith("flooded 200")
            assert len(_progress(got_alice)) < 200  # the principal's bound
            last = got_alice[-1]
            assert last["id"] == 11 and last["error"]["code"] == wire.INTERNAL_ERROR
            assert last["error"]["data"]["reason"] == "peer-not-reading"
            assert await gw.dropped("reply") == 1
        assert await gw.queued_bytes() == 0  # the four streams closed: nothing counted
