"""The front's direct path answers exactly as the ASGI app it shortcuts,
whatever the client sends (issue #12: "No change to behaviour").

- The front's direct path: a POST /mcp whose body is in reaches
  fronts/direct_posts.py first, in the front's own server, and is answered
  there when it is the plain case; every other request is declined and
  answered by the ASGI app. tests/test_fuzz_fronts.py fuzzes the front as an
  ASGI app only, so those checks decide alone which hostile request skips
  the app's own.
(The runtime has one call path since issue #30: tests/test_client_call_path.py
tests it directly.)

Two gateways, on the same scripted upstream, get the same hostile sequence:
one through the ASGI app, the other through the server a deployed gateway
runs (fronts/limited_protocol.py with the direct path on, raw HTTP/1.1 over
an in-memory transport). Every answer must be the same: status, headers, JSON-RPC body
(session ids and request states, random by design, named by order of
appearance), and keep tests/test_fuzz_fronts.py's invariants (no 5xx but a
JSON 503, a JSON-RPC error body on every refusal).
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import httptools
import orjson
from hypothesis import given
from hypothesis import strategies as st
from uvicorn.config import Config as UvicornConfig
from uvicorn.server import ServerState

from gateway import era
from gateway.fronts import http_limits
from gateway.fronts.http_front import HttpFront
from tests.fake_transport import FakeTransport
from tests.fuzz_profiles import FUZZ
from tests.fuzz_requests import (
    OPEN_SESSION,
    PATHS,
    REPLACEMENTS,
    _set,
    check_http_response,
    http_posts,
)
from tests.inprocess import ACCEPT, MODERN_META, Exchange, HttpGateway, http_gateway
from tests.well_behaved_upstreams import upstream_of

# Headers of the server, not of the front's answer.
_SERVER_HEADERS = {"date", "server", "content-length", "transfer-encoding", "connection"}


class Answer:
    """One response as the test compares it."""

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status_code = status
        self.fields = [(k, v) for k, v in headers if k not in _SERVER_HEADERS]
        self.headers = dict(self.fields)
        self.body = body

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")

    def json(self) -> Any:
        return orjson.loads(self.body)


class _Responses:
    """httptools' callbacks, collecting whole responses."""

    def __init__(self) -> None:
        self.done: list[Answer] = []
        self._headers: list[tuple[str, str]] = []
        self._body = bytearray()
        self.parser = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.decode("latin-1").lower(), value.decode("latin-1")))

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        status = self.parser.get_status_code()
        self.done.append(Answer(status, self._headers, bytes(self._body)))
        self._headers, self._body = [], bytearray()


class ServedFront:
    """The front behind the server a deployed gateway runs: uvicorn's
    httptools protocol as fronts/http_limits.py binds it, direct path on, fed
    raw HTTP/1.1 over an in-memory transport, one keep-alive connection at a
    time (a new one once the server closed the last)."""

    def __init__(self, front: HttpFront) -> None:
        config = UvicornConfig(front, lifespan="off", log_level="warning", proxy_headers=False)
        config.load()
        self._config = config
        self._state = ServerState()
        # The server's own limits (tests/test_http_limits.py) are not the
        # front's answers: a head as big as the fuzz's biggest passes here.
        limits = http_limits.HttpLimits(max_header_bytes=1 << 20)
        guard = http_limits.ConnectionGuard(limits, http_limits.RefusalLog(), lambda status: None)
        self._protocol = http_limits.protocol_class(guard, front.direct)
        self._connect()

    def _connect(self) -> None:
        self.proto = self._protocol(self._config, self._state, {})
        self.transport = FakeTransport()
        self.proto.connection_made(self.transport)
        self._read = 0
        self._responses = _Responses()

    async def exchange(self, verb: str, body: bytes, headers: Headers) -> Answer:
        if self.transport.closed:
            self._connect()
        head = f"{verb} /mcp HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
        self.proto.data_received(head.encode("latin-1") + b"\r\n" + body)
        with anyio.fail_after(5):
            while not self._responses.done:  # ends at the whole answer (or the bound)
                written = self.transport.written[self._read :]
                self._read += len(written)
                if written:
                    self._responses.parser.feed_data(written)
                else:
                    await anyio.lowlevel.checkpoint()
        return self._responses.done.pop(0)


async def asgi_exchange(g: HttpGateway, verb: str, body: bytes, headers: Headers) -> Answer:
    """The same request through the front as an ASGI app (uvicorn's scope:
    lower-case names, every field in order, duplicates kept)."""
    exchange = Exchange(verb, {}, body)
    exchange.scope["headers"] = [
        (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers
    ]
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(exchange.run, g.front)
            await exchange.wait_until(exchange.ended.is_set)
            exchange.gone.set()
    head = exchange.sent[0]
    fields = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in head["headers"]]
    return Answer(head["status"], fields, exchange.body())


def wire_headers(verb: str, body: bytes, drawn: Headers) -> Headers:
    """What a client's HTTP/1.1 request carries: a Host, the POST defaults
    unless drawn, the length of the body, values without surrounding
    whitespace (HTTP strips it)."""
    names = {k for k, _ in drawn}
    fields: Headers = [] if "host" in names else [("host", "127.0.0.1")]
    if verb == "POST":
        defaults = (("accept", ACCEPT), ("content-type", "application/json"))
        fields += [(k, v) for k, v in defaults if k not in names]
    fields += [(k, v.strip(" \t")) for k, v in drawn if k != "content-length"]
    if verb == "POST":
        fields.append(("content-length", str(len(body))))
    return fields


class Names:
    """Random values (session ids, request states) named by their order of
    appearance, so that two gateways' answers compare."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}

    def name(self, value: str) -> str:
        return self._names.setdefault(value, f"<{len(self._names)}>")

    def scrub(self, value: Any) -> Any:
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                if key == "requestState" and isinstance(item, str):
                    out[key] = "<state>"
                else:
                    out[key] = self.scrub(item)
            return out
        if isinstance(value, list):
            return [self.scrub(item) for item in value]
        if isinstance(value, str) and value in self._names:
            return self._names[value]
        return value


def _events(text: str) -> list[Any]:
    out = []
    for block in text.split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: ") and line[6:]:
                out.append(orjson.loads(line[6:]))
    return out


def comparable(answer: Answer, names: Names) -> tuple[Any, ...]:
    fields = [(k, names.name(v) if k == "mcp-session-id" else v) for k, v in answer.fields]
    ctype = answer.headers.get("content-type", "")
    body: Any
    if ctype.startswith("application/json"):
        body = names.scrub(orjson.loads(answer.text))
    elif ctype.startswith("text/event-stream"):
        body = names.scrub(_events(answer.text))
    else:
        body = answer.text
    return answer.status_code, sorted(fields), body


def _session(answer: Answer, current: str) -> str:
    return str(answer.headers.get("mcp-session-id", current))


async def run_both(posts: list[Post], upstream: str, tokens: bool = False) -> int:
    """The sequence through both gateways, the second through its own
    server with the direct path on; how many requests that path took.
    `tokens`: bearer tokens configured (two principals)."""
    settings: dict[str, Any] = {"request_timeout": 2, "state_key": "k" * 32}
    if tokens:
        settings["http_tokens"] = {"alice": "alice-token", "bob": "bob-token"}
    async with (
        http_gateway(upstream_of(upstream), **settings) as first,
        http_gateway(upstream_of(upstream), **settings) as other,
    ):
        fast = Counted(other)
        by_other = ServedFront(other.front).exchange

        first_names, other_names = Names(), Names()
        first_session = other_session = "none-yet"
        for verb, drawn_body, drawn in posts:
            body = drawn_body if verb == "POST" else b""  # no length, no body
            fields = wire_headers(verb, body, drawn)
            by_first = await asgi_exchange(first, verb, body, _with_session(fields, first_session))
            answer = await by_other(verb, body, _with_session(fields, other_session))
            check_http_response(answer)
            first_session = _session(by_first, first_session)
            other_session = _session(answer, other_session)
            assert comparable(answer, other_names) == comparable(by_first, first_names), (
                verb,
                body[:300],
                fields,
            )
        await _idle(first)
        await _idle(other)
        return fast.taken


class Counted:
    """How many requests the front's direct path (DirectPosts.take) takes."""

    def __init__(self, g: HttpGateway) -> None:
        self.taken = 0
        direct: Any = g.front.direct
        method = direct.take

        def counted(*args: Any) -> bool:
            took: bool = method(*args)
            self.taken += took
            return took

        direct.take = counted


def _with_session(fields: Headers, session: str) -> Headers:
    return [(k, session if v == OPEN_SESSION else v) for k, v in fields]


async def _idle(g: HttpGateway) -> None:
    with anyio.fail_after(3):
        while g.front.access.busy or g.front.direct.live:  # ends when all is answered
            await anyio.lowlevel.checkpoint()


Headers = list[tuple[str, str]]
Post = tuple[str, bytes, Headers]  # verb, body, drawn headers


def _plain(method: str, n: int, modern: bool = True) -> tuple[dict[str, Any], Headers]:
    """A request the direct path takes: a modern call with its headers, or a
    call of the legacy session opened last."""
    known: dict[str, dict[str, Any]] = {
        "tools/call": {"name": "echo", "arguments": {"text": f"t{n}"}},
        "prompts/get": {"name": "p"},
        "resources/read": {"uri": "mem://a"},
    }
    params = known.get(method, {})
    if not modern:
        body = {"jsonrpc": "2.0", "id": n, "method": method, "params": params}
        return body, [("mcp-session-id", OPEN_SESSION), ("mcp-protocol-version", "2025-11-25")]
    params = {**params, "_meta": orjson.loads(orjson.dumps(MODERN_META))}  # mutated by the fuzz
    headers = [("mcp-protocol-version", era.NEWEST_MODERN), ("mcp-method", method)]
    name = params.get("name") or params.get("uri")
    if name is not None:
        headers.append(("mcp-name", name))
    return {"jsonrpc": "2.0", "id": n, "method": method, "params": params}, headers


def _plain_call(n: int) -> Post:
    msg, headers = _plain("tools/call", n)
    return "POST", orjson.dumps(msg), headers


INITIALIZE: Post = (
    "POST",
    orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "fuzz", "version": "1"},
            },
        }
    ),
    [],
)
PLAIN_METHODS = [
    "tools/call",
    "tools/list",
    "prompts/get",
    "resources/read",
    "ping",
    "server/discover",
    "vendor/unknown",
]
# Header values near the ones the direct path accepts.
NEAR_VALUES: dict[str, list[str]] = {
    "mcp-protocol-version": ["2025-11-25", "2025-06-18", "2099-01-01", "", "x", "2026-07-28,1"],
    "mcp-method": ["tools/list", "TOOLS/CALL", "", "tools/call,tools/call", "ping"],
    "mcp-name": ["ECHO", "", "other", "=?base64?ZWNobw==?=", "echo,echo"],
    "accept": [
        "application/json",
        "text/event-stream",
        "*/*",
        "application/json,text/event-stream",
        "text/event-stream, application/json;q=0.5",
        "",
    ],
    "content-type": [
        "application/json; charset=utf-8",
        "APPLICATION/JSON",
        "text/json",
        "application/json-rpc",
        "",
    ],
    "host": ["evil.example", "127.0.0.1:1", "localhost", "[::1]:8080", "127.0.0.1.", "", "a b"],
    "origin": ["http://evil.example", "null", "http://127.0.0.1", "http://localhost:3000", ""],
    "authorization": ["Bearer alice-token", "Bearer bob-token", "Bearer bad", "Basic x", ""],
    "mcp-session-id": [OPEN_SESSION, "nope", ""],
    "mcp-param-text": ["t1", "", "=?base64?dDE=?="],
}


@st.composite
def near_plain(draw: st.DrawFn) -> Post:
    """A request the direct path would take, with one to three things
    changed: a header set, dropped or sent twice, or a field of the body
    replaced as tests/test_fuzz_fronts.py replaces them."""
    msg, headers = _plain(
        draw(st.sampled_from(PLAIN_METHODS)),
        draw(st.integers(min_value=1, max_value=9)),
        modern=draw(st.integers(min_value=0, max_value=3)) > 0,
    )
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        if draw(st.booleans()):
            _set(msg, draw(st.sampled_from(PATHS)), draw(REPLACEMENTS))
            continue
        name = draw(st.sampled_from(sorted(NEAR_VALUES)))
        value = draw(st.sampled_from(NEAR_VALUES[name]))
        how = draw(st.sampled_from(["set", "drop", "twice"]))
        if how == "drop":
            headers = [(k, v) for k, v in headers if k != name]
        elif how == "twice":
            headers += [(name, value), (name, value if draw(st.booleans()) else "other")]
        else:
            headers = [(k, v) for k, v in headers if k != name] + [(name, value)]
    try:
        body = orjson.dumps(msg)
    except orjson.JSONEncodeError:  # e.g. an integer beyond 64 bits
        body = b"[" * 300 + b"]" * 300
    return "POST", body, headers


@st.composite
def hostile(draw: st.DrawFn) -> Post:
    """tests/test_fuzz_fronts.py's hostile requests (a GET stream stays open
    by design, as does subscriptions/listen: neither is ever offered)."""
    body, drawn = draw(
        http_posts().filter(
            lambda p: p[1].get(":method") != "GET" and b"subscriptions/listen" not in p[0]
        )
    )
    headers = dict(drawn)
    verb = headers.pop(":method", "POST")
    return verb, body, list(headers.items())


# Without plain calls among them, few sequences would reach the direct path
# at all (its checks must all pass); with them, hostile requests come between
# calls it does take, on the same connection.
PLAIN = st.integers(min_value=1, max_value=99).map(_plain_call)
POSTS = st.one_of(hostile(), near_plain(), near_plain(), PLAIN, st.just(INITIALIZE))


# Sequences of requests, in front of either era, with or without tokens.
SEQUENCES = given(
    posts=st.lists(POSTS, min_size=1, max_size=8),
    upstream=st.sampled_from(["legacy", "modern"]),
    tokens=st.booleans(),
)


@FUZZ
@SEQUENCES
def test_the_direct_path_answers_any_sequence_as_the_asgi_app_does(
    posts: list[Post], upstream: str, tokens: bool
) -> None:
    anyio.run(run_both, posts, upstream, tokens)


def test_the_comparison_sees_the_direct_path_at_work() -> None:
    """The fuzz above compares something: plain calls take the fast path
    under test (modern ones, and a legacy session's), and the two gateways'
    answers to them are the same."""
    modern = [_plain_call(n) for n in range(1, 4)]
    msg, headers = _plain("tools/call", 5, modern=False)
    legacy = [INITIALIZE, ("POST", orjson.dumps(msg), headers)]
    for upstream in ("legacy", "modern"):
        assert anyio.run(run_both, modern, upstream, False) == 3
        assert anyio.run(run_both, legacy, upstream, False) >= 1
