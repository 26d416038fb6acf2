"""The HTTP back's two call paths come to the same end whatever a server
answers (issue #12: "No change to behaviour"; 2026-07-28 and 2025-11-25
Streamable HTTP "Sending Messages to the Server").

A POSTed call travels the direct path (http_direct: httptools, in the loop's
callbacks) on asyncio, and the general one (http_client: h11, in a task) on
another event loop; the general one also carries the back's other exchanges.
Hypothesis writes the answer to one call
byte by byte -- a status, a content type, a JSON body or an event stream
(the reply, notifications, junk, comments, other fields, either line end),
framed by length, chunks or the connection's close, cut into pieces,
sometimes with bytes after it -- and a well-formed answer to the call after
it. Through each path, on a connection of its own: the messages the first
call brings and how it ends (its result, or the gateway error's code and
reason), and the second call's answer, must be the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import anyio
import orjson
from hypothesis import given
from hypothesis import strategies as st

from gateway import wire
from gateway.backs.http_client import HttpClient
from tests.test_fuzz_fronts import FUZZ
from tests.test_http_back import connection, exchange, modern
from tests.test_http_direct import json_answer, raw_server

REPLY = orjson.dumps(wire.result_response(1, {"echo": "first"}))
EVENT_DATA = [
    REPLY,
    orjson.dumps(wire.result_response(99, {"echo": "other"})),
    orjson.dumps(wire.error_response(1, -32000, "server says no")),
    orjson.dumps(wire.notification("notifications/message", {"level": "info", "data": "x"})),
    orjson.dumps(wire.notification("notifications/progress", {"progressToken": 1, "progress": 1})),
    b"not json",
    b"[1, 2]",
    b"{}",
    b"",
]
JSON_BODIES = [
    REPLY,
    orjson.dumps(wire.result_response(99, {"echo": "other"})),
    orjson.dumps(wire.error_response(1, -32601, "no such method")),
    orjson.dumps([orjson.loads(REPLY)]),
    b'{"jsonrpc":"2.0","id":1,"result":7}',  # a result that is not an object
    b"<html>nope</html>",
    b"",
]


@st.composite
def events(draw: st.DrawFn) -> bytes:
    """An event stream's body: events, comments, other fields, CRLF or LF."""
    end = draw(st.sampled_from([b"\n", b"\r\n"]))
    out = b""
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        kind = draw(st.sampled_from(["event", "event", "comment", "fields"]))
        if kind == "comment":
            out += b": keep-alive" + end + end
            continue
        lines = []
        if kind == "fields":
            lines += [b"id: 7", b"retry: 10", b"event: other"]
        data = draw(st.sampled_from(EVENT_DATA))
        if data and draw(st.booleans()):
            lines.append(b"event: message")
        # One data line, or the same data split over several.
        cut = draw(st.integers(min_value=0, max_value=len(data)))
        lines += [b"data: " + data] if cut == 0 else [b"data: " + data[:cut], b"data:" + data[cut:]]
        out += end.join(lines) + end + end
    return out


@st.composite
def answers(draw: st.DrawFn) -> tuple[list[bytes], bool]:
    """One call's answer, as the bytes a server writes, in pieces, and
    whether it then closes the connection."""
    status = draw(st.sampled_from([200, 200, 200, 202, 204, 400, 404, 500, 503]))
    stream = draw(st.booleans())
    ctype = draw(
        st.sampled_from(
            ["text/event-stream", "TEXT/EVENT-STREAM; charset=utf-8"]
            if stream
            else ["application/json", "application/json; charset=utf-8", "text/html", None]
        )
    )
    body = draw(events()) if stream else draw(st.sampled_from(JSON_BODIES))
    # Sometimes an informational answer first.
    first = b"HTTP/1.1 100 Continue\r\n\r\n" if draw(st.integers(0, 5)) == 0 else b""
    head = [b"HTTP/1.1 %d Whatever" % status]
    if ctype is not None:
        head.append(b"Content-Type: " + ctype.encode())
    framing = "none" if status == 204 else draw(st.sampled_from(["length", "chunked", "close"]))
    if framing == "length":
        head.append(b"Content-Length: %d" % len(body))
        payload = body
    elif framing == "chunked":
        head.append(b"Transfer-Encoding: chunked")
        sizes = draw(st.lists(st.integers(min_value=1, max_value=40), max_size=6))
        payload, rest = b"", body
        for size in sizes:
            if not rest:
                break
            payload += b"%x\r\n" % len(rest[:size]) + rest[:size] + b"\r\n"
            rest = rest[size:]
        if rest:
            payload += b"%x\r\n" % len(rest) + rest + b"\r\n"
        payload += b"0\r\n\r\n"
    else:
        payload = body if framing == "close" else b""
    whole = first + b"\r\n".join(head) + b"\r\n\r\n" + payload
    close = framing == "close" or draw(st.integers(min_value=0, max_value=4)) == 0
    if framing != "close" and draw(st.integers(min_value=0, max_value=4)) == 0:
        whole += b"junk after the answer\r\n\r\n"
    cuts = sorted(draw(st.lists(st.integers(min_value=0, max_value=len(whole)), max_size=4)))
    pieces = [whole[a:b] for a, b in zip([0, *cuts], [*cuts, len(whole)], strict=True)]
    return [piece for piece in pieces if piece], close


@contextmanager
def on_path(path: str) -> Iterator[None]:
    if path == "direct":
        yield
        return
    with mock.patch.object(HttpClient, "direct_pool", lambda self, url, max_bytes: None):
        yield


def outcome(seen: list[wire.Message], msg_id: int) -> tuple[Any, ...]:
    """What a call came to: the messages before its reply, and the reply
    (a gateway error by code and reason: the words may say what each parser
    saw)."""
    before = [m.get("method") for m in seen if "method" in m]
    reply = next(m for m in seen if m.get("id") == msg_id and "method" not in m)
    if "error" in reply:
        error = reply["error"]
        data = error.get("data")
        reason = data.get("reason") if isinstance(data, dict) else None
        return before, "error", error.get("code"), reason
    return before, "result", reply.get("result")


async def run_path(answer: tuple[list[bytes], bool], path: str) -> tuple[Any, ...]:
    pieces, close = answer

    def script(n: int, msg: wire.Message) -> tuple[list[bytes], bool]:
        if n == 1:
            return pieces, close
        return [json_answer(msg)], False

    with on_path(path):
        async with raw_server(script) as server, connection(server.url) as c:
            first = outcome(await exchange(c, modern(1, "tools/call", name="echo")), 1)
            second = outcome(await exchange(c, modern(2, "tools/call", name="echo")), 2)
    return first, second


async def both(answer: tuple[list[bytes], bool]) -> None:
    direct = await run_path(answer, "direct")
    general = await run_path(answer, "general")
    assert direct == general, (answer, direct, general)
    assert direct[1] == ([], "result", {"echo": 2})  # the next call is never hurt


@FUZZ
@given(answer=answers())
def test_both_paths_come_to_the_same_end_whatever_the_server_answers(
    answer: tuple[list[bytes], bool],
) -> None:
    anyio.run(both, answer)
