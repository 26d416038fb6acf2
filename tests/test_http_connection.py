"""The HTTP back's one connection (gateway/backs/http_connection.py):
requests written at once on keep-alive connections, answers parsed in the
loop's callbacks. Against a raw socket server on 127.0.0.1 that writes the answers
byte for byte as each test scripts them, so the framing cases (split
writes, chunks, informational answers, closes) are the test's to choose.
Issue #12: "the HTTP back at the speed of a bare relay ... keep-alive, one
connection per in-flight request", with no change of behaviour."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import wire
from gateway.backs.http_body_feed import BodyFeed
from gateway.backs.http_client import OriginPool
from gateway.backs.http_connection import (
    FEED,
    WHOLE,
    BodyChoice,
    EventSink,
    HttpConnection,
)
from tests.http_back_support import connection, exchange, modern
from tests.raw_http_server import json_answer, raw_server, reply_to

pytestmark = pytest.mark.anyio


async def test_calls_one_after_another_share_one_keep_alive_connection() -> None:
    """Issue #12: keep-alive. A defect found writing the direct path: the
    parser forgets whether a message keeps the connection alive once it has
    moved past it, so every call opened a new connection (5,102 connections
    for 5,102 calls in the bench; the server's CPU per call doubled)."""
    async with (
        raw_server(lambda n, msg: ([json_answer(msg)], False)) as server,
        connection(server.url) as c,
    ):
        for n in range(1, 6):
            seen = await exchange(c, modern(n, "tools/call", name="echo"))
            assert reply_to(seen, n)["result"] == {"echo": n}
    assert server.connections == 1 and len(set(server.peers)) == 1


@pytest.mark.parametrize(
    "split",
    [
        pytest.param(lambda raw: [raw], id="whole"),
        pytest.param(lambda raw: [raw[:1], raw[1:30], raw[30:-3], raw[-3:]], id="split-head"),
        pytest.param(lambda raw: [bytes([b]) for b in raw], id="byte-by-byte"),
    ],
)
async def test_an_answer_written_in_pieces_is_read_whole(
    split: Callable[[bytes], list[bytes]],
) -> None:
    """RFC 9112 §6: the message's framing, not how its bytes arrive, ends it;
    the connection then serves the next call."""
    async with (
        raw_server(lambda n, msg: (split(json_answer(msg)), False)) as server,
        connection(server.url) as c,
    ):
        for n in (1, 2):
            seen = await exchange(c, modern(n, "tools/call", name="echo"))
            assert reply_to(seen, n)["result"] == {"echo": n}
    assert server.connections == 1


async def test_chunked_informational_and_unframed_answers() -> None:
    """RFC 9112 §7.1 (chunked), RFC 9110 §15.2 (a 1xx precedes the final
    answer), RFC 9112 §6.3 item 8 (no length: the body ends with the
    connection, which is then not reused)."""

    def script(n: int, msg: wire.Message) -> tuple[list[bytes], bool]:
        body = orjson.dumps(wire.result_response(msg["id"], {"echo": msg["id"]}))
        if n == 1:
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            chunked = head + b"Transfer-Encoding: chunked\r\n\r\n"
            half = len(body) // 2
            chunks = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (
                half,
                body[:half],
                len(body) - half,
                body[half:],
            )
            return [chunked, chunks], False
        if n == 2:
            return [b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n", json_answer(msg)], False
        unframed = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + body
        return [unframed], True

    async with raw_server(script) as server, connection(server.url) as c:
        for n in (1, 2, 3):
            seen = await exchange(c, modern(n, "tools/call", name="echo"))
            assert reply_to(seen, n)["result"] == {"echo": n}
        seen = await exchange(c, modern(4, "tools/call", name="echo"))
        assert reply_to(seen, 4)["result"] == {"echo": 4}
    assert server.connections == 2


async def test_a_connection_the_server_closes_after_each_answer_still_serves_every_call() -> None:
    """RFC 9112 §9.3.1 ("a client ... MUST NOT automatically retry a request
    with a non-idempotent method unless it knows the request semantics are
    idempotent ... or the request was never received"): a pooled connection
    the server closed while idle is replaced, and nothing is lost."""
    async with (
        raw_server(lambda n, msg: ([json_answer(msg)], True)) as server,
        connection(server.url) as c,
    ):
        for n in range(1, 5):
            seen = await exchange(c, modern(n, "tools/call", name="echo"))
            assert reply_to(seen, n)["result"] == {"echo": n}
    assert server.connections == 4


async def test_a_broken_answer_fails_only_its_call() -> None:
    """Issue #12, "no change to behaviour": an answer that is not HTTP, or
    that stops mid-body, is the failed call's error reply under its id
    (reason upstream-unreachable, as on the general path); the next call
    goes through."""

    def script(n: int, msg: wire.Message) -> tuple[list[bytes], bool]:
        if n == 1:
            return [b"SPDY/9 what\r\n\r\n"], True
        if n == 2:
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            return [head + b'Content-Length: 500\r\n\r\n{"jsonrpc"'], True
        return [json_answer(msg)], False

    async with raw_server(script) as server, connection(server.url) as c:
        for n in (1, 2):
            seen = await exchange(c, modern(n, "tools/call", name="echo"))
            error = reply_to(seen, n)["error"]
            assert error["data"]["reason"] == "upstream-unreachable", error
        seen = await exchange(c, modern(3, "tools/call", name="echo"))
        assert reply_to(seen, 3)["result"] == {"echo": 3}


async def test_a_header_http_cannot_carry_is_never_written_by_hand() -> None:
    """RFC 9110 §5.5: a field value holds no CR or LF. The client writes
    requests itself, so a value it cannot vouch for is refused before a
    byte is written: the call fails under its id, and nothing (no injected
    header) reaches the server. An odd value HTTP can carry still goes out."""
    async with raw_server(lambda n, msg: ([json_answer(msg)], False)) as server:
        async with connection(server.url, **{"X-Evil": "a\r\nInjected: 1"}) as c:
            seen = await exchange(c, modern(1, "tools/call", name="echo"))
            error = reply_to(seen, 1)["error"]
            assert "cannot send this request" in error["message"], error
        assert server.peers == []
        async with connection(server.url, **{"X-Odd": "a\x7fb"}) as c:
            seen = await exchange(c, modern(2, "tools/call", name="echo"))
            assert reply_to(seen, 2)["result"] == {"echo": 2}
        assert len(server.peers) == 1


async def test_a_big_event_stream_written_at_once_leaves_the_connection_usable() -> None:
    """2025-11-25 "Sending Messages to the Server": the answer to a POST may
    be an SSE stream, here with a notification over a megabyte before the
    reply, all in one write: the stream is read to its end (reading pauses
    while the reader catches up), and the connection serves the next call."""
    big = "x" * (3 << 19)

    def script(n: int, msg: wire.Message) -> tuple[list[bytes], bool]:
        if n == 2:
            return [json_answer(msg)], False
        note = orjson.dumps(wire.notification("notifications/message", {"data": big}))
        reply = orjson.dumps(wire.result_response(msg["id"], {"echo": msg["id"]}))
        body = b"event: message\ndata: %s\n\nevent: message\ndata: %s\n\n" % (note, reply)
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        return [head + b"Content-Length: %d\r\n\r\n" % len(body) + body], False

    async with raw_server(script) as server, connection(server.url) as c:
        seen = await exchange(c, modern(1, "tools/call", name="echo"))
        assert reply_to(seen, 1)["result"] == {"echo": 1}
        assert any(m.get("params", {}).get("data") == big for m in seen)
        seen = await exchange(c, modern(2, "tools/call", name="echo"))
        assert reply_to(seen, 2)["result"] == {"echo": 2}
    assert server.connections == 1


async def test_a_configured_header_a_modern_request_sets_itself_is_sent_once() -> None:
    """2026-07-28 "Standard Headers": Mcp-Method is the request's own. A
    configured header of that name is replaced by it, as on the general
    path, never sent next to it (the direct path writes headers by hand)."""
    async with (
        raw_server(lambda n, msg: ([json_answer(msg)], False)) as server,
        connection(server.url, **{"Mcp-Method": "configured"}) as c,
    ):
        for n in (1, 2):
            seen = await exchange(c, modern(n, "tools/call", name="echo"))
            assert reply_to(seen, n)["result"] == {"echo": n}
    for head in server.heads:
        methods = [h for h in head.split(b"\r\n") if h.lower().startswith(b"mcp-method:")]
        assert methods == [b"Mcp-Method: tools/call"], head


class _Transport(asyncio.Transport):
    """Just what a HttpConnection asks of its transport."""

    def __init__(self) -> None:
        super().__init__()
        self.paused = False
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        return None

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def close(self) -> None:
        self.closed = True


class _Refusing:
    """An Exchange for which every report is unexpected; each fake allows its own."""

    def body_for(self, status: int, headers: dict[str, str]) -> EventSink | BodyChoice:
        return WHOLE

    def answered(self, status: int, headers: dict[str, str], body: bytes | None, size: int) -> None:
        raise AssertionError("not an answer read whole")

    def streaming(self, status: int, headers: dict[str, str], feed: BodyFeed) -> None:
        raise AssertionError("not a body read in a task")

    def failed(self, why: str) -> None:
        raise AssertionError(why)

    def retry(self) -> None:
        raise AssertionError("no retry")


@dataclass
class _Call(_Refusing):
    streamed: list[BodyFeed] = field(default_factory=list)

    def body_for(self, status: int, headers: dict[str, str]) -> EventSink | BodyChoice:
        return FEED  # read in a task, through the feed

    def streaming(self, status: int, headers: dict[str, str], feed: BodyFeed) -> None:
        self.streamed.append(feed)


async def test_a_stream_that_fills_its_feed_and_ends_in_one_read_is_pooled_reading() -> None:
    """A defect found writing the direct path: a stream whose unread body
    passes the feed's mark pauses the socket, and one that also ended in
    that same read went back to the pool paused, where the next call's
    answer would never have been read."""
    pool = OriginPool("127.0.0.1", 1, max_idle=4)
    connection = HttpConnection(pool)
    transport = _Transport()
    connection.connection_made(transport)
    call = _Call()
    connection.send(b"POST / HTTP/1.1\r\n\r\n", call, 1.0, 1 << 20)
    body = b"data: " + b"x" * (3 << 19) + b"\n\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    connection.data_received(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    assert len(call.streamed) == 1
    assert pool.take() is connection and not transport.paused and not transport.closed


@dataclass
class _Whole(_Refusing):
    answers: list[tuple[int, bytes | None]] = field(default_factory=list)

    def answered(self, status: int, headers: dict[str, str], body: bytes | None, size: int) -> None:
        self.answers.append((status, body))


@settings(max_examples=200, deadline=None)
@given(
    body=st.binary(min_size=1, max_size=300),
    chunked=st.booleans(),
    status=st.sampled_from([200, 202, 400, 404, 500]),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8),
)
def test_any_split_of_any_framed_answer_is_read_once_and_whole(
    body: bytes, chunked: bool, status: int, cuts: list[int]
) -> None:
    """RFC 9112 §6.3: the framing (Content-Length, or chunks) says where an
    answer ends, however its bytes arrive; each answer is reported once,
    whole, and the connection goes back to the pool for the next."""
    pool = OriginPool("127.0.0.1", 1, max_idle=4)
    connection = HttpConnection(pool)
    connection.connection_made(_Transport())
    raw = framed(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\n" % status, body, chunked)
    for _ in range(2):  # the second answer on the connection the first left idle
        call = _Whole()
        connection.send(b"POST / HTTP/1.1\r\n\r\n", call, 1.0, 1 << 20)
        feed_split(connection, raw, cuts)
        assert call.answers == [(status, body)]
        assert pool.take() is connection


def framed(head: bytes, body: bytes, chunked: bool) -> bytes:
    """An answer: `head`'s lines, then `body` with a Content-Length or in chunks."""
    if not chunked:
        return head + b"Content-Length: %d\r\n\r\n" % len(body) + body
    raw = head + b"Transfer-Encoding: chunked\r\n\r\n"
    for i in range(0, len(body), 7):
        piece = body[i : i + 7]
        raw += b"%x\r\n%s\r\n" % (len(piece), piece)
    return raw + b"0\r\n\r\n"


def feed_split(connection: HttpConnection, raw: bytes, cuts: list[int]) -> None:
    """`raw` into the connection, cut at `cuts` (each taken modulo its length)."""
    points = sorted({cut % (len(raw) + 1) for cut in cuts} | {0, len(raw)})
    for start, end in itertools.pairwise(points):
        if end > start:
            connection.data_received(raw[start:end])


@dataclass
class _Sink:
    """Takes an event stream's body; done (needs no more) after `enough` bytes."""

    enough: int = 1 << 30
    body: bytes = b""
    ends: list[str | None] = field(default_factory=list)

    def feed(self, chunk: bytes) -> bool:
        assert not self.ends, "fed after its end"
        self.body += chunk
        return len(self.body) >= self.enough

    def end(self, error: str | None) -> None:
        self.ends.append(error)


@dataclass
class _Sinking(_Refusing):
    sink: _Sink = field(default_factory=_Sink)

    def body_for(self, status: int, headers: dict[str, str]) -> EventSink | BodyChoice:
        return self.sink


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


@settings(max_examples=200, deadline=None)
@given(
    body=st.binary(min_size=1, max_size=300),
    chunked=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8),
)
def test_an_event_stream_read_in_the_callbacks_reaches_its_sink_whole_once(
    body: bytes, chunked: bool, cuts: list[int]
) -> None:
    """An event-stream answer taken by a sink (no task, issue #12): however
    its bytes arrive, the sink gets the body in order, then one end; the
    connection then goes back to the pool for the next call."""
    pool = OriginPool("127.0.0.1", 1, max_idle=4)
    connection = HttpConnection(pool)
    connection.connection_made(_Transport())
    raw = framed(SSE_HEAD, body, chunked)
    for _ in range(2):
        call = _Sinking()
        connection.send(b"POST / HTTP/1.1\r\n\r\n", call, 1.0, 1 << 20)
        feed_split(connection, raw, cuts)
        assert call.sink.body == body and call.sink.ends == [None]
        assert pool.take() is connection


async def test_a_stream_that_goes_on_after_its_sink_is_done_is_closed_after_the_linger() -> None:
    """The general path reads a stream on for 0.2 s after the reply, then
    gives the connection up: so does the callback path (the timer is fired
    here, not waited for). A stream that breaks before the sink is done is
    its end, with the reason."""
    pool = OriginPool("127.0.0.1", 1, max_idle=4)
    connection = HttpConnection(pool)
    transport = _Transport()
    connection.connection_made(transport)
    call = _Sinking(_Sink(enough=5))
    connection.send(b"POST / HTTP/1.1\r\n\r\n", call, 1.0, 1 << 20)
    connection.data_received(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
    assert call.sink.body == b"hello" and call.sink.ends == []
    linger = connection._linger
    assert linger is not None and not transport.closed
    linger.cancel()
    connection._linger_over()
    assert transport.closed and pool.take() is None
    connection.connection_lost(None)
    assert call.sink.ends == []  # it was done: nothing more to say

    broken = HttpConnection(pool)
    broken.connection_made(_Transport())
    cut = _Sinking()
    broken.send(b"POST / HTTP/1.1\r\n\r\n", cut, 1.0, 1 << 20)
    broken.data_received(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
    broken.connection_lost(None)
    assert cut.sink.body == b"abc"
    assert cut.sink.ends == ["the upstream closed the connection mid-body"]


async def test_each_redirect_hop_resolves_against_the_one_before() -> None:
    """RFC 9110 §15.4: a Location is relative to the request it answers.
    /mcp → 307 /a/x → 307 y is /a/y, not /y: a call's second hop resolves
    against its first one's target, and the answer there stands."""

    def script(n: int, msg: wire.Message) -> tuple[list[bytes], bool]:
        line = server.heads[-1].split(b"\r\n")[0]
        moved = b"HTTP/1.1 307 Moved\r\nContent-Length: 0\r\nLocation: "
        if line.startswith(b"POST /mcp "):
            return [moved + b"/a/x\r\n\r\n"], False
        if line.startswith(b"POST /a/x "):
            return [moved + b"y\r\n\r\n"], False
        return [json_answer(msg)], False

    async with raw_server(script) as server, connection(server.url) as c:
        seen = await exchange(c, modern(1, "tools/call", name="echo"))
    assert reply_to(seen, 1)["result"] == {"echo": 1}
    lines = [head.split(b"\r\n")[0] for head in server.heads]
    assert lines == [b"POST /mcp HTTP/1.1", b"POST /a/x HTTP/1.1", b"POST /a/y HTTP/1.1"]
