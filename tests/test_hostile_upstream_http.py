"""Hostile and broken upstream servers over Streamable HTTP.

The issue, for the HTTP back: "non-JSON bodies, wrong content-type, SSE junk,
5xx, connection reset mid-stream". Each answer the server gets wrong fails
the request it belongs to with a gateway error under that request's id, at
once, and the connection goes on serving the next request."""

from __future__ import annotations

import re
import ssl
import time
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
import structlog.testing
from anyio.abc import SocketStream
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.https_back import self_signed
from gateway import era, wire
from gateway.backs import http_failures
from gateway.backs.http_wire import SseParser
from gateway.core.upstream_checks import MAX_DEPTH
from gateway.log_limit import LogLimiter
from tests.http_back_support import (
    META,
    MRTR_CAPS,
    connection,
    exchange,
    http_gateway,
    modern,
    reply_of,
)
from tests.raw_http_server import json_answer, raw_server, reply_to
from tests.servers.scripted_http import (
    Ask,
    HttpRequest,
    HttpServer,
    LegacyHttp,
    Reply,
    serve,
    sse,
)

pytestmark = pytest.mark.anyio


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


async def answers(req: HttpRequest, server: HttpServer) -> Reply:
    """Each tool name is one kind of broken answer."""
    msg = req.message
    msg_id = msg["id"]
    name = (msg.get("params") or {}).get("name")
    if name == "html":
        return Reply(200, b"<html>hi</html>", {"content-type": "text/html"})
    if name == "int-result":
        return Reply.json({"jsonrpc": "2.0", "id": msg_id, "result": 5})
    if name == "deep":
        body = b'{"jsonrpc":"2.0","id":' + orjson.dumps(msg_id) + b',"result":{"x":'
        return Reply(200, body + _deep(300) + b"}}", {"content-type": "application/json"})
    if name == "no-content":
        return Reply(202)
    if name == "sse-junk":

        async def junk(stream: Any) -> None:
            await stream.send(b"event: message\ndata: not json\n\n")
            await stream.send(b"event: message\ndata: [1, 2]\n\n")
            await stream.send(b'event: message\ndata: {"jsonrpc": "2.0"}\n\n')
            await stream.send(b"event: other\ndata: {}\n\n")
            await stream.send(b"garbage line without a colon\n\n")
            result = {"content": [{"type": "text", "text": "made it"}]}
            await stream.send(sse(wire.result_response(msg_id, result)))

        return server.feed(junk)
    if name == "sse-deep":

        async def deep(stream: Any) -> None:
            head = b'event: message\ndata: {"jsonrpc":"2.0","id":' + orjson.dumps(msg_id)
            await stream.send(head + b',"result":{"x":' + _deep(300) + b"}}\n\n")

        return server.feed(deep)
    if name == "sse-silent":

        async def nothing(stream: Any) -> None:
            await stream.send(b": keep-alive\n\n")

        return server.feed(nothing)
    if name == "503":
        return Reply(503, b"overloaded", {"content-type": "text/plain"})
    if msg["method"] == "tools/list":
        return Reply.json(
            {
                "jsonrpc": "2.0",
                "id": msg_id,
                "result": {"tools": "not a list", "resultType": "complete"},
            }
        )
    return Reply.json(
        {"jsonrpc": "2.0", "id": msg_id, "result": {"content": [], "resultType": "complete"}}
    )


@pytest.fixture
def fresh_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """The limiter of the one line for a server writing past its answers is
    the module's: a new one for each test."""
    fresh = LogLimiter(structlog.get_logger("gateway.backs.http"))
    monkeypatch.setattr(http_failures, "past_answer_log", fresh)


@pytest.mark.parametrize(
    ("name", "reason", "words"),
    [
        ("html", "upstream-malformed", "text/html"),
        ("int-result", "upstream-malformed", "not an object"),
        ("deep", "upstream-malformed", f"nested deeper than {MAX_DEPTH}"),
        ("no-content", "upstream-malformed", "HTTP 202"),
        ("sse-deep", "upstream-malformed", f"nested deeper than {MAX_DEPTH}"),
        ("sse-silent", "upstream-unreachable", "stream ended without a reply"),
        ("503", None, "overloaded"),
    ],
)
async def test_a_broken_answer_fails_its_request_and_the_connection_goes_on(
    name: str, reason: str | None, words: str, fresh_log: None
) -> None:
    """2026-07-28 Streamable HTTP "Sending Messages": the answer to a POSTed
    request is one JSON object (application/json) or an SSE stream that
    carries the response. Anything else fails that request, under its id."""
    async with serve(answers) as server, connection(server.url) as c:
        reply = reply_of(await exchange(c, modern("bad", "tools/call", name=name)))
        after = reply_of(await exchange(c, modern("ok", "tools/call", name="fine")))
    assert reply["id"] == "bad"
    error = reply["error"]
    assert words in error["message"]
    if reason is not None:
        assert error["data"] == {"source": "mcp-era-gateway", "reason": reason}
    assert after["result"]["content"] == []


async def test_an_answer_head_that_never_ends_fails_its_call(fresh_log: None) -> None:
    """Issue #12's "limits as today": an answer's head is bounded at 64 KiB
    (the connection counts, as llhttp buffers a header without end): the
    call fails, the next one goes through."""

    def script(n: int, msg: wire.Message) -> tuple[list[bytes], bool]:
        if n == 1:
            return [b"HTTP/1.1 200 OK\r\nX-Long: " + b"y" * (1 << 17)], False
        return [json_answer(msg)], False

    async with raw_server(script) as server, connection(server.url) as c:
        seen = await exchange(c, modern(1, "tools/call", name="echo"))
        error = reply_to(seen, 1)["error"]
        assert error["data"]["reason"] == "upstream-unreachable"
        assert error["message"].endswith("the answer's head is over 65536 bytes"), error
        seen = await exchange(c, modern(2, "tools/call", name="echo"))
        assert reply_to(seen, 2)["result"] == {"echo": 2}


FORGED = orjson.dumps(wire.result_response(2, {"echo": "forged"}))


@pytest.mark.parametrize(
    "after",
    [
        b"junk that is no answer\r\n\r\n",
        # As an attack: a whole second answer, carrying what the next call
        # would be answered.
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + b"Content-Length: %d\r\n\r\n" % len(FORGED)
        + FORGED,
    ],
    ids=["junk", "a-second-answer"],
)
async def test_bytes_after_a_whole_answer_are_never_the_next_ones(
    after: bytes, fresh_log: None
) -> None:
    """RFC 9112 §9.3: a server sends one answer per request. Bytes after a
    whole answer are not the next request's answer: the
    answer stands, the connection is not reused, and the next call gets its
    own server's answer (the h11 client before it read them as the next
    answer: junk failed that call, a second answer was delivered to it)."""

    def script(n: int, msg: wire.Message) -> tuple[list[bytes], bool]:
        return [json_answer(msg) + (after if n == 1 else b"")], False

    with structlog.testing.capture_logs() as logs:
        async with raw_server(script) as server, connection(server.url) as c:
            for n in (1, 2):
                seen = await exchange(c, modern(n, "tools/call", name="echo"))
                assert reply_to(seen, n)["result"] == {"echo": n}
    assert server.connections == 2
    # What the operator sees: one warning, naming the server.
    (line,) = [e for e in logs if e["log_level"] == "warning"]
    assert line["event"].startswith("upstream wrote past an answer")
    assert line["upstream"] == server.url.split("/")[2]


async def test_an_https_answer_is_read_whole_and_alone(
    fresh_log: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over TLS (a CA of the operator's, through SSL_CERT_FILE as the README
    says): calls go through, a second answer written with the
    first is never the next call's, and a kept-alive connection serves the
    call after; without the CA, the call fails with the reason."""
    cert, key = self_signed(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)

    def script(n: int, msg: wire.Message) -> tuple[list[bytes], bool]:
        forged = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        forged += b"Content-Length: %d\r\n\r\n" % len(FORGED) + FORGED
        return [json_answer(msg) + (forged if n == 1 else b"")], False

    async with raw_server(script, tls) as server:
        async with connection(server.url) as c:
            refused = reply_to(await exchange(c, modern(1, "tools/call", name="echo")), 1)
        assert refused["error"]["data"]["reason"] == "upstream-unreachable"
        assert "TLS with 127.0.0.1" in refused["error"]["message"]
        assert "CERTIFICATE_VERIFY_FAILED" in refused["error"]["message"]
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        async with connection(server.url) as c:
            for n in (1, 2, 3):
                seen = await exchange(c, modern(n, "tools/call", name="echo"))
                assert reply_to(seen, n)["result"] == {"echo": n}
    # Served (past the handshake): the one the second answer closed, the kept one.
    assert server.connections == 2


async def test_sse_junk_is_skipped_and_the_reply_still_arrives(fresh_log: None) -> None:
    """Events that are not JSON or not JSON-RPC messages are skipped, with one
    log line however many come; the reply after them reaches its caller."""
    with structlog.testing.capture_logs() as logs:
        async with serve(answers) as server, connection(server.url) as c:
            reply = reply_of(await exchange(c, modern(1, "tools/call", name="sse-junk")))
    assert reply["result"]["content"][0]["text"] == "made it"
    lines = [e for e in logs if e["event"] == "upstream sent a malformed message"]
    assert len(lines) == 1
    assert not [e for e in logs if e.get("exc_info")]


async def test_tools_that_are_not_a_list_pass_through_untouched(fresh_log: None) -> None:
    """The HTTP back reads tools/list results for x-mcp-header annotations; a
    `tools` of the wrong type is not its to fix: the result passes as it came."""
    async with serve(answers) as server, connection(server.url) as c:
        reply = reply_of(await exchange(c, modern(1, "tools/list")))
    assert reply["result"]["tools"] == "not a list"


async def test_deeply_nested_tool_schema_fails_the_listing_not_the_gateway(fresh_log: None) -> None:
    """Reading annotations walks the inputSchema recursively: a schema nested
    past the limit is refused before that walk (the call fails with a clear
    error), one within it is walked and listed."""

    def listing(levels: int) -> Any:
        # Each level is two JSON objects deep (the schema and its properties).
        schema = b'{"type":"object","properties":{"a":' * levels
        schema += b'{"type":"object"}' + b"}}" * levels

        async def handler(req: HttpRequest, server: HttpServer) -> Reply:
            head = b'{"jsonrpc":"2.0","id":' + orjson.dumps(req.message["id"])
            body = head + b',"result":{"resultType":"complete","tools":[{"name":"t","inputSchema":'
            return Reply(200, body + schema + b"}]}}", {"content-type": "application/json"})

        return handler

    async with serve(listing(90)) as server, connection(server.url) as c:
        ok = reply_of(await exchange(c, modern(1, "tools/list")))
    async with serve(listing(150)) as server, connection(server.url) as c:
        refused = reply_of(await exchange(c, modern(1, "tools/list")))
    assert ok["result"]["tools"][0]["name"] == "t"
    assert refused["error"]["data"]["reason"] == "upstream-malformed"


async def test_connection_reset_mid_stream_fails_the_request(fresh_log: None) -> None:
    """A server that drops the connection in the middle of an SSE answer:
    the request fails at once with an upstream error under its id."""

    async def reset(client: SocketStream) -> None:
        async with client:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await client.receive()
            await client.send(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            event = sse(
                wire.notification("notifications/progress", {"progressToken": 1, "progress": 1})
            )
            await client.send(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            await client.send(b"5\r\nev")  # a chunk cut short, then the connection goes

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, reset)
        async with connection(f"http://127.0.0.1:{port}/mcp") as c:
            seen = await exchange(c, modern("r", "tools/call", name="x"))
        tg.cancel_scope.cancel()
    reply = reply_of(seen)
    assert reply["id"] == "r"
    assert reply["error"]["data"]["source"] == "mcp-era-gateway"


async def test_reply_with_a_float_id_is_not_taken_for_the_call(fresh_log: None) -> None:
    """JSON-RPC ids are strings or integers. On main a reply with `"id": 7.0`
    on call 7's stream passed for its reply (7.0 == 7), ended the stream's
    reading, and the real reply after it was never read."""

    async def float_first(req: HttpRequest, server: HttpServer) -> Reply:
        msg_id = req.message["id"]

        async def events(stream: Any) -> None:
            forged = b'{"jsonrpc":"2.0","id":%d.0,"result":{"content":"forged"}}' % msg_id
            await stream.send(b"event: message\ndata: " + forged + b"\n\n")
            real = {"content": "real", "resultType": "complete"}
            await stream.send(sse(wire.result_response(msg_id, real)))

        return server.feed(events)

    async with serve(float_first) as server, connection(server.url) as c:
        reply = reply_of(await exchange(c, modern(7, "tools/call", name="x")))
    assert reply["result"]["content"] == "real"


async def test_bad_server_request_over_http_is_answered_by_post_and_get_junk_skipped(
    fresh_log: None,
) -> None:
    """The same treatment over a legacy HTTP session: an elicitation/create
    without `message` on the call's stream is answered -32602 (POSTed back);
    junk on the GET stream is skipped; the call completes."""

    async def ask_badly(ask: Ask, args: dict[str, Any]) -> dict[str, Any]:
        session = behaviour.sessions[ask.session.sid]
        with anyio.fail_after(3):
            await session.get_opened.wait()
        assert session.get_stream is not None
        await session.get_stream.send(b"event: message\ndata: {not json\n\n")
        await session.get_stream.send(b'event: message\ndata: {"jsonrpc": "2.0", "id": 1}\n\n')
        answer = await ask.ask("elicitation/create", {"requestedSchema": {"type": "object"}})
        return {"content": [{"type": "text", "text": str(answer["error"]["code"])}]}

    behaviour = LegacyHttp(tools={"ask": ask_badly})
    async with serve(behaviour) as server, http_gateway(server.url) as c:
        meta = {**META, era.CLIENT_CAPABILITIES: MRTR_CAPS}
        reply = await c.call("tools/call", {"name": "ask", "arguments": {}, "_meta": meta})
    assert reply["result"]["content"][0]["text"] == str(wire.INVALID_PARAMS)


def _reference_events(data: bytes) -> list[tuple[str, str, str | None, int | None]]:
    """WHATWG "Parsing an event stream", the plain way: split the whole stream
    into lines (CRLF, CR or LF), dispatch on each blank line and at the end."""
    events: list[tuple[str, str, str | None, int | None]] = []
    lines: list[str] = []
    event, last_id, retry = "", None, None
    for raw in [*re.split(rb"\r\n|\r|\n", data), b""]:
        if not raw:
            if lines or retry is not None:
                events.append((event or "message", "\n".join(lines), last_id, retry))
            lines, event, retry = [], "", None
            continue
        if raw.startswith(b":"):
            continue
        name, _, value = raw.decode().partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            lines.append(value)
        elif name == "event":
            event = value
        elif name == "id":
            last_id = value
        elif name == "retry" and value.isdigit():
            retry = int(value)
    return events


sse_pieces = st.lists(
    st.sampled_from(
        [b"data: a", b'data: {"x": 1}', b"event: message", b"id: 7", b": c", b"retry: 5", b""]
    ).flatmap(lambda line: st.sampled_from([b"\n", b"\r", b"\r\n"]).map(lambda end: line + end)),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(pieces=sse_pieces, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_sse_parser_gives_the_same_events_however_the_stream_is_cut(
    pieces: list[bytes], cuts: list[int]
) -> None:
    """The parser searches each byte once (see the next test); it must still
    find every line end, a CRLF split across chunks included."""
    data = b"".join(pieces)
    parser = SseParser(1 << 30)
    got: list[Any] = []
    at = 0
    for cut in sorted(c for c in cuts if c <= len(data)):
        got += parser.feed(data[at:cut])
        at = cut
    got += parser.feed(data[at:]) + parser.close()
    assert [(e.event, e.data, e.id, e.retry) for e in got] == _reference_events(data)


def test_sse_parser_time_grows_with_the_stream_not_its_square() -> None:
    """Each line end was searched from the current line to the end of the
    buffer, twice (CR, LF): a 5 MB chunk of short events, from a chatty or a
    hostile server, took over ten seconds of CPU. Now each byte is searched
    once."""
    event = b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n'
    chunk = event * 60000
    parser = SseParser(64 << 20)
    started = time.perf_counter()
    events = parser.feed(chunk)
    assert len(events) == 60000
    assert time.perf_counter() - started < 4
