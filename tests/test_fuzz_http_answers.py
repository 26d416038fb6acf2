"""Whatever a server answers to one POSTed call, the HTTP back's one path
ends that call once, as the answer says, and the next call is never hurt
(2026-07-28 and 2025-11-25 Streamable HTTP "Sending Messages to the Server";
RFC 9112 message framing; RFC 9110 §15.4 redirects; issue #30).

Hypothesis writes the answer to one call byte by byte -- a status (3xx
included, with a Location on the server's own origin or another), a content
type, a JSON body or an event stream (the reply, notifications, junk,
comments, other fields, either line end), framed by length, chunks or the
connection's close, cut into pieces, sometimes after an informational answer
or with bytes after it -- and a well-formed answer to every request after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio
import orjson
from hypothesis import given
from hypothesis import strategies as st

from gateway import wire
from tests.fuzz_profiles import FUZZ
from tests.http_back_support import connection, exchange, modern
from tests.raw_http_server import json_answer, raw_server

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
# Where a redirect points: the server's own origin (relative, or absolute
# with its address filled in), or another origin, which is never followed.
LOCATIONS = ["/moved", "moved", "{origin}/moved", "http://elsewhere.invalid/mcp", "ftp://x/"]
GATEWAY_REASONS = {"upstream-malformed", "upstream-unreachable", "upstream-http", "upstream-failed"}


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


@dataclass(frozen=True)
class Answer:
    status: int
    ctype: str | None
    body: bytes
    framing: str  # length, chunked, close, none
    junk: bool  # bytes after a framed answer
    location: str | None
    whole: bytes  # the bytes written, {origin} not yet filled in
    cuts: list[int]  # where they are cut into pieces
    close: bool

    def written(self, origin: str) -> list[bytes]:
        whole = self.whole.replace(b"{origin}", origin.encode())
        ends = [min(cut, len(whole)) for cut in self.cuts]
        pieces = [whole[a:b] for a, b in zip([0, *ends], [*ends, len(whole)], strict=True)]
        return [piece for piece in pieces if piece]


@st.composite
def answers(draw: st.DrawFn) -> Answer:
    """One call's answer as a server writes it."""
    status = draw(
        st.sampled_from([200, 200, 200, 202, 204, 301, 302, 303, 307, 308, 400, 404, 500, 503])
    )
    location = draw(st.sampled_from(LOCATIONS)) if 300 <= status < 400 else None
    stream = status < 300 and draw(st.booleans())
    ctype = draw(
        st.sampled_from(
            ["text/event-stream", "TEXT/EVENT-STREAM; charset=utf-8"]
            if stream
            else ["application/json", "application/json; charset=utf-8", "text/html", None]
        )
    )
    body = draw(events()) if stream else draw(st.sampled_from(JSON_BODIES))
    first = b"HTTP/1.1 100 Continue\r\n\r\n" if draw(st.integers(0, 5)) == 0 else b""
    head = [b"HTTP/1.1 %d Whatever" % status]
    if ctype is not None:
        head.append(b"Content-Type: " + ctype.encode())
    if location is not None:
        head.append(b"Location: " + location.encode())
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
    junk = framing != "close" and draw(st.integers(min_value=0, max_value=4)) == 0
    if junk:
        whole += b"junk after the answer\r\n\r\n"
    cuts = sorted(draw(st.lists(st.integers(min_value=0, max_value=len(whole)), max_size=4)))
    return Answer(status, ctype, body, framing, junk, location, whole, cuts, close)


def outcome(seen: list[wire.Message], msg_id: int) -> tuple[str, Any]:
    """A call's one reply: ("result", result) or ("error", (code, reason, status))."""
    replies = [m for m in seen if m.get("id") == msg_id and "method" not in m]
    assert len(replies) == 1, seen
    reply = replies[0]
    if "result" in reply:
        return "result", reply["result"]
    error = reply["error"]
    data = error.get("data")
    info = data if isinstance(data, dict) else {}
    return "error", (error.get("code"), info.get("reason"), info.get("status"), error["message"])


async def run(answer: Answer) -> None:
    heads: list[bytes] = []

    def script(n: int, msg: wire.Message) -> tuple[list[bytes], bool]:
        heads.append(server.heads[-1])
        if n == 1:
            return answer.written(server.url.rsplit("/", 1)[0]), answer.close
        return [json_answer(msg)], False

    async with raw_server(script) as server, connection(server.url) as c:
        first = outcome(await exchange(c, modern(1, "tools/call", name="echo")), 1)
        second = outcome(await exchange(c, modern(2, "tools/call", name="echo")), 2)
    assert second == ("result", {"echo": 2})  # the next call is never hurt
    judge(answer, first, heads)


def judge(answer: Answer, first: tuple[str, Any], heads: list[bytes]) -> None:
    """What the first call must have come to, by what was drawn."""
    kind, value = first
    if kind == "error":
        code, reason, _, _ = value
        assert isinstance(code, int)
        assert reason in GATEWAY_REASONS or code in (-32000, -32601), first
    status, location = answer.status, answer.location
    followed = [h for h in heads if h.startswith(b"POST /moved ")]
    if status in (307, 308) and location in ("/moved", "moved", "{origin}/moved"):
        # Same origin: sent again there, with its body, and that answer stands.
        assert len(followed) == 1 and first == ("result", {"echo": 1}), (first, heads)
        return
    assert not followed, heads
    if status in (307, 308) and location is not None:
        assert kind == "error" and value[1] == "upstream-unreachable", first
        assert "redirected" in value[3], first
        return
    if status >= 300:
        # A redirect a POST cannot follow, or a refusal: a JSON-RPC error in
        # the body is kept, else the status is said.
        if answer.body == JSON_BODIES[2]:
            assert kind == "error" and value[0] == -32601, first
        else:
            assert kind == "error" and value[1] == "upstream-http" and value[2] == status, first
        return
    framed = answer.framing in ("length", "chunked", "close")
    if (
        status == 200
        and answer.ctype is not None
        and answer.ctype.startswith("application/json")
        and answer.body in (REPLY, JSON_BODIES[3])
        and framed
    ):
        assert first == ("result", {"echo": "first"}), first


@FUZZ
@given(answer=answers())
def test_one_call_ends_once_as_its_answer_says_and_the_next_is_never_hurt(
    answer: Answer,
) -> None:
    anyio.run(run, answer)
