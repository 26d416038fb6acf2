"""Hostile input on both fronts, in-process (issue "Nothing a client, a server
or a connection sends can crash, wedge or exhaust the gateway", "Tests and
evidence").

The stdio gateway runs whole (`serve_stdio`) on two pipes of this process; the
HTTP front runs as an ASGI app. Behind both is a scripted upstream of either
era. Hypothesis feeds arbitrary bytes, arbitrary JSON and JSON-RPC envelopes
of both eras with a field the gateway reads replaced by something of another
shape (or removed, huge, deeply nested, duplicated), forged `requestState`s
and bad `inputResponses`, interleaved with a well-behaved client's requests.

Invariants:
- the gateway never crashes and raises nothing;
- stdio: the output is JSON-RPC lines and nothing else, every request is
  answered exactly once (those the client cancelled excepted);
- HTTP: every POST gets a 2xx or a 4xx with a JSON-RPC body, never a 5xx
  other than a JSON 503;
- the well-behaved client gets right answers throughout;
- afterwards nothing is held: in-flight calls, HTTP in-progress counts, lease
  shares, pending upstream calls, open file descriptors; memory stays flat.

`HYPOTHESIS_PROFILE=deep` runs many more examples (default: a fast profile
that CI runs in seconds).
"""

from __future__ import annotations

import gc
import os
import tracemalloc
from collections import Counter
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import era, wire
from gateway.config import Config
from gateway.runtime.stdio_app import serve_stdio
from tests.inprocess import ACCEPT, MODERN_META, Exchange, HttpGateway, http_gateway
from tests.scripted import Behaviour, ScriptedServer, Upstream, legacy_server, modern_server
from tests.test_release import NOTHING_HELD, held

settings.register_profile(
    "fast",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)
settings.register_profile(
    "deep",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ = settings.get_profile("deep" if os.environ.get("HYPOTHESIS_PROFILE") == "deep" else "fast")


# -- the upstreams -------------------------------------------------------------------


async def _echo(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    args = (msg.get("params") or {}).get("arguments")
    text = args.get("text") if isinstance(args, dict) else None
    return {"content": [{"type": "text", "text": text if isinstance(text, str) else "ok"}]}


async def _prompt(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": {"type": "text", "text": "p"}}]}


async def _read(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {"contents": [{"uri": "mem://a", "text": "a"}]}


async def _empty(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {}


async def _list(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}


_HANDLERS: dict[str, Any] = {
    "tools/call": _echo,
    "tools/list": _list,
    "prompts/get": _prompt,
    "resources/read": _read,
    "resources/subscribe": _empty,
    "resources/unsubscribe": _empty,
    "logging/setLevel": _empty,
    "completion/complete": _empty,
}
_CAPS = {
    "tools": {"listChanged": True},
    "prompts": {},
    "resources": {"subscribe": True, "listChanged": True},
    "logging": {},
}


def upstream_of(kind: str) -> Behaviour:
    if kind == "legacy":
        return legacy_server(_HANDLERS, capabilities=_CAPS)
    return modern_server(_HANDLERS, capabilities=_CAPS)


def config(**extra: Any) -> Config:
    return Config(
        command=("scripted",),
        probe_timeout=0.5,
        request_timeout=2,
        shutdown_grace=1,
        restart_backoff_initial=0.01,
        state_key="k" * 32,
        **extra,
    )


# -- strategies ---------------------------------------------------------------------------

JSON: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
# Ids the fuzz uses: few, so duplicates happen. Well-behaved ids never collide.
FUZZ_IDS = st.integers(min_value=0, max_value=4) | st.sampled_from(["a", "b", ""])
# Every method of both revisions, and a vendor request and notification.
METHODS = sorted(era.SPEC_METHODS | {"vendor/unknown", "notifications/vendor"})


def _good_params(method: str, modern: bool, features: bool) -> dict[str, Any]:
    good: dict[str, dict[str, Any]] = {
        "initialize": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}} if features else {},
            "clientInfo": {"name": "fuzz", "version": "1"},
        },
        "tools/call": {"name": "echo", "arguments": {"text": "t"}},
        "prompts/get": {"name": "p"},
        "resources/read": {"uri": "mem://a"},
        "resources/subscribe": {"uri": "mem://a"},
        "resources/unsubscribe": {"uri": "mem://a"},
        "logging/setLevel": {"level": "info"},
        "subscriptions/listen": {"notifications": {"toolsListChanged": True}},
        "notifications/cancelled": {"requestId": 1},
        "notifications/progress": {"progressToken": "t", "progress": 1},
        "completion/complete": {
            "ref": {"type": "ref/prompt", "name": "p"},
            "argument": {"name": "a", "value": "b"},
        },
    }
    params = dict(good.get(method, {}))
    if modern and method != "initialize":
        caps: dict[str, Any] = {"elicitation": {}, "sampling": {}} if features else {}
        params["_meta"] = {**MODERN_META, era.CLIENT_CAPABILITIES: caps}
    return params


# Where a mutation lands: the fields the gateway reads.
PATHS: list[tuple[str, ...]] = [
    ("id",),
    ("method",),
    ("jsonrpc",),
    ("params",),
    ("params", "_meta"),
    ("params", "_meta", era.PROTOCOL_VERSION),
    ("params", "_meta", era.CLIENT_CAPABILITIES),
    ("params", "_meta", era.CLIENT_INFO),
    ("params", "_meta", era.LOG_LEVEL),
    ("params", "_meta", "progressToken"),
    ("params", "name"),
    ("params", "uri"),
    ("params", "cursor"),
    ("params", "level"),
    ("params", "requestState"),
    ("params", "inputResponses"),
    ("params", "notifications"),
    ("params", "requestId"),
    ("params", "arguments"),
    ("params", "protocolVersion"),
    ("params", "capabilities"),
    ("params", "clientInfo"),
]

_DELETE = object()


def _deep(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


REPLACEMENTS = st.one_of(
    JSON,
    st.just(_DELETE),
    st.just("x" * 70_000),
    st.integers(min_value=100, max_value=240).map(_deep),
    st.sampled_from(["g1.AAAA", "g1." + "A" * 64 + "=", "not-a-state", "g1..", ""]),
    st.dictionaries(st.text(max_size=6), JSON, max_size=3),  # inputResponses-like
)


def _set(msg: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node: Any = msg
    for key in path[:-1]:
        if not isinstance(node, dict):
            return
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    if not isinstance(node, dict):
        return
    if value is _DELETE:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value


@st.composite
def envelopes(draw: st.DrawFn) -> bytes:
    """A JSON-RPC message of either era, with up to three fields mutated."""
    method = draw(st.sampled_from(METHODS))
    modern = draw(st.booleans())
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if not method.startswith("notifications/"):
        msg["id"] = draw(FUZZ_IDS)
    msg["params"] = _good_params(method, modern, draw(st.booleans()))
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        _set(msg, draw(st.sampled_from(PATHS)), draw(REPLACEMENTS))
    try:
        return orjson.dumps(msg)
    except orjson.JSONEncodeError:  # e.g. an integer beyond 64 bits
        return b'{"jsonrpc":"2.0","id":1,"method":"ping","params":' + b"[" * 300 + b"]" * 300 + b"}"


def _raw_deep(levels: int) -> bytes:
    """Deeper than orjson can encode: written by hand."""
    meta = orjson.dumps({**MODERN_META, era.CLIENT_CAPABILITIES: {"elicitation": {}}}).decode()
    args = "[" * levels + "]" * levels
    return (
        f'{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":'
        f'{{"name":"echo","arguments":{{"a":{args}}},"_meta":{meta}}}}}'
    ).encode()


HOSTILE_LINES = st.one_of(
    envelopes(),
    envelopes(),
    envelopes(),
    JSON.map(orjson.dumps),
    st.binary(max_size=64).map(lambda b: b.replace(b"\n", b" ")),
    st.integers(min_value=250, max_value=1100).map(_raw_deep),
)


# -- the stdio front ---------------------------------------------------------------------


def _good_request(n: int) -> bytes:
    params = {"name": "echo", "arguments": {"text": f"good-{n}"}, "_meta": MODERN_META}
    return orjson.dumps(wire.request(f"good-{n}", "tools/call", params))


async def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # ends when everything is written
        await anyio.wait_writable(fd)
        try:
            sent = os.write(fd, view)
        except BlockingIOError:
            continue
        view = view[sent:]


async def run_stdio(lines: list[bytes], upstream: str) -> tuple[bytes, Upstream]:
    """The whole stdio gateway on two pipes: `lines` in, then end of input."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    os.set_blocking(in_w, False)
    out = bytearray()
    try:
        async with anyio.create_task_group() as tg:
            up = Upstream(upstream_of(upstream), tg)

            async def feed() -> None:
                await _write_all(in_w, b"\n".join(lines) + b"\n")
                os.close(in_w)

            async def collect() -> None:
                while True:  # ends at the end of the gateway's output
                    await anyio.wait_readable(out_r)
                    chunk = os.read(out_r, 1 << 16)
                    if not chunk:
                        return
                    out.extend(chunk)

            tg.start_soon(feed)
            tg.start_soon(collect)
            with anyio.fail_after(30):
                code = await serve_stdio(config(), in_r, out_w, connect=up.connect)
            assert code == 0
            os.close(out_w)
            out_w = -1
        up.close()
    finally:
        for fd in (in_r, out_r, out_w):
            if fd >= 0:
                os.close(fd)
    return bytes(out), up


def _expected_answers(lines: list[bytes]) -> Counter[Any]:
    """How many answers each id must get: one per line that is not a
    response, except ids the client cancelled (2026-07-28 "Cancellation": no
    reply). JSON-RPC 2.0 §5: an invalid request is answered under its id when
    the id can be read."""
    expected: Counter[Any] = Counter()
    cancelled: set[Any] = set()
    for line in lines:
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(value, dict):
            continue
        # A well-formed response (result or error, not both) is never answered.
        is_response = "method" not in value and value.get("jsonrpc") == "2.0"
        if is_response and ("result" in value) != ("error" in value):
            continue
        params = value.get("params")
        if value.get("method") == "notifications/cancelled" and isinstance(params, dict):
            target = params.get("requestId")
            if wire.is_request_id(target):
                cancelled.add(target)
        if "id" in value and wire.is_request_id(value["id"]):
            expected[value["id"]] += 1
    for target in cancelled:
        expected.pop(target, None)
    return expected


def check_stdio_output(out: bytes, lines: list[bytes], goods: list[int]) -> None:
    assert out.endswith(b"\n") or not out
    answers: Counter[Any] = Counter()
    good_texts: dict[Any, str] = {}
    for line in out.split(b"\n")[:-1]:
        msg = wire.decode(line)  # JSON-RPC, one per line, nothing else
        if "method" not in msg:
            answers[msg.get("id")] += 1
            if isinstance(msg.get("id"), str) and msg["id"].startswith("good-"):
                good_texts[msg["id"]] = msg["result"]["content"][0]["text"]
    expected = _expected_answers(lines)
    for msg_id, count in expected.items():
        assert answers[msg_id] == count, (msg_id, answers[msg_id], count)
    for n in goods:
        assert good_texts.get(f"good-{n}") == f"good-{n}", (n, good_texts)


@FUZZ
@given(
    hostile=st.lists(HOSTILE_LINES, min_size=1, max_size=8),
    goods_at=st.lists(st.integers(min_value=0, max_value=8), max_size=3),
    upstream=st.sampled_from(["legacy", "modern"]),
    initialize=st.booleans(),
)
def test_stdio_front_survives_hostile_lines(
    hostile: list[bytes], goods_at: list[int], upstream: str, initialize: bool
) -> None:
    lines = list(hostile)
    if initialize:
        init = wire.request("init", "initialize", _good_params("initialize", False, False))
        lines[:0] = [orjson.dumps(init), b'{"jsonrpc":"2.0","method":"notifications/initialized"}']
    goods = []
    for n, at in enumerate(sorted(goods_at)):
        lines.insert(min(at + n, len(lines)), _good_request(n))
        goods.append(n)
    out, _ = anyio.run(run_stdio, lines, upstream)
    check_stdio_output(out, lines, goods)


# -- the HTTP front ---------------------------------------------------------------------------

HEADER_VALUES = st.one_of(
    st.sampled_from(["2026-07-28", "2025-11-25", "tools/call", "echo", "", "=?base64?AAA?="]),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=20),
)
HEADERS = st.dictionaries(
    st.sampled_from(
        ["mcp-protocol-version", "mcp-method", "mcp-name", "mcp-session-id", "mcp-param-text"]
    ),
    HEADER_VALUES,
    max_size=3,
)


# A header value that stands for "the session the fuzz opened last".
OPEN_SESSION = "<open session>"


@st.composite
def http_posts(draw: st.DrawFn) -> tuple[bytes, dict[str, str]]:
    body = draw(HOSTILE_LINES)
    headers = draw(HEADERS)
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        value = None
    if isinstance(value, dict) and draw(st.booleans()):
        # Headers that agree with the body, so it gets past the binding's checks.
        headers.setdefault("mcp-protocol-version", era.NEWEST_MODERN)
        if isinstance(value.get("method"), str):
            headers.setdefault("mcp-method", value["method"])
        params = value.get("params")
        name = params.get("name") or params.get("uri") if isinstance(params, dict) else None
        if isinstance(name, str) and name.isascii() and name.isprintable():
            headers.setdefault("mcp-name", name)
    if draw(st.integers(min_value=0, max_value=3)) == 0:
        headers["content-type"] = draw(st.sampled_from(["text/plain", "application/json; x=1"]))
    if draw(st.booleans()):
        headers["mcp-session-id"] = OPEN_SESSION
    if draw(st.integers(min_value=0, max_value=7)) == 0:
        headers[":method"] = draw(st.sampled_from(["GET", "DELETE", "PUT"]))
    return body, headers


async def _good_client(g: HttpGateway, stop: anyio.Event, seen: list[str]) -> None:
    n = 0
    while not stop.is_set():  # ends when the fuzz is done
        n += 1
        text = f"good-{n}"
        resp = await g.modern("tools/call", {"name": "echo", "arguments": {"text": text}})
        assert resp.status_code == 200, resp.text
        assert resp.json()["result"]["content"][0]["text"] == text
        seen.append(text)


def check_http_response(resp: Any) -> None:
    status = resp.status_code
    assert status < 500 or status == 503, (status, resp.text)
    ctype = resp.headers.get("content-type", "")
    if status >= 400:
        body = resp.json()
        assert body["error"]["code"] < 0
    elif ctype == "application/json":
        wire.validate(resp.json())
    elif ctype == "text/event-stream":
        for block in resp.text.split("\n\n"):
            for line in block.split("\n"):
                # An empty data field is 2025-11-25's priming event, no message.
                if line.startswith("data: ") and line[6:]:
                    wire.validate(orjson.loads(line[6:]))


async def run_http(posts: list[tuple[bytes, dict[str, str]]], upstream: str) -> None:
    async with http_gateway(upstream_of(upstream), request_timeout=2, state_key="k" * 32) as g:
        stop = anyio.Event()
        seen: list[str] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_good_client, g, stop, seen)
            session_id = "none-yet"
            for body, drawn in posts:
                headers = dict(drawn)
                verb = headers.pop(":method", "POST")
                if headers.get("mcp-session-id") == OPEN_SESSION:
                    headers["mcp-session-id"] = session_id
                resp = await _exchange(g, verb, body, headers)
                check_http_response(resp)
                session_id = resp.headers.get("mcp-session-id", session_id)
            await _at_least_one_good(seen)
            stop.set()
        assert g.front.access.busy == {}
        for session in list(g.front.sessions.values()):
            g.front.end_session(session, "fuzz over")
        await _released(g)


async def _exchange(
    g: HttpGateway, verb: str, body: bytes, headers: dict[str, str]
) -> httpx.Response:
    """One request through the front as an ASGI app; what it answered. A GET
    stream or a subscriptions/listen stays open by design: the client leaves
    it once it is open (its head sent), and gets what came so far."""
    if verb == "POST":
        defaults = {"accept": ACCEPT, "content-type": "application/json"}
        headers = {**defaults, "content-length": str(len(body)), **headers}
    else:
        headers, body = {"accept": "text/event-stream", **headers}, b""
    exchange = Exchange(verb, headers, body)
    stays_open = verb == "GET" or b"subscriptions/listen" in body

    def answered() -> bool:
        if exchange.ended.is_set():
            return True
        return stays_open and bool(exchange.sent) and exchange.status == 200

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(exchange.run, g.front)
            await exchange.wait_until(answered)
            exchange.gone.set()
    head = exchange.sent[0]
    return httpx.Response(head["status"], headers=head["headers"], content=exchange.body())


async def _at_least_one_good(seen: list[str]) -> None:
    with anyio.fail_after(5):
        while not seen:  # ends at the first good answer (or the bound)
            await anyio.lowlevel.checkpoint()


async def _released(g: HttpGateway) -> None:
    with anyio.fail_after(3):
        while held(g.service) != NOTHING_HELD:  # ends when all is released (or the bound)
            await anyio.lowlevel.checkpoint()


@FUZZ
@given(
    posts=st.lists(http_posts(), min_size=1, max_size=6),
    upstream=st.sampled_from(["legacy", "modern"]),
)
def test_http_front_survives_hostile_posts(
    posts: list[tuple[bytes, dict[str, str]]], upstream: str
) -> None:
    anyio.run(run_http, posts, upstream)


# -- nothing held afterwards: descriptors and memory ---------------------------------------

_BATCH = [
    _raw_deep(300),
    orjson.dumps(
        wire.request(1, "tools/call", {"name": "echo", "_meta": {**MODERN_META, era.LOG_LEVEL: []}})
    ),
    orjson.dumps(
        wire.request(
            2, "tools/call", {"name": "echo", "_meta": {**MODERN_META, "progressToken": {}}}
        )
    ),
    orjson.dumps(
        wire.request(
            3, "tools/call", {"name": "echo", "requestState": "g1.AAAA=", "_meta": MODERN_META}
        )
    ),
    orjson.dumps(
        wire.request(4, "tools/call", {"name": "echo", "inputResponses": [1], "_meta": MODERN_META})
    ),
    b"\xff\xfe not json",
    b"[]",
    _good_request(0),
]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


def test_fds_and_memory_return_to_baseline() -> None:
    """Issue invariant: "memory and file descriptors return to baseline".
    The same hostile batch, run repeatedly through both fronts, leaves no
    descriptor open and does not grow the heap."""
    posts: list[tuple[bytes, dict[str, str]]] = [(line, {}) for line in _BATCH]
    for _ in range(2):  # warm up caches, imports, interned strings
        out, _ = anyio.run(run_stdio, _BATCH, "legacy")
        anyio.run(run_http, posts, "legacy")
    gc.collect()
    fds = _fds()
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(6):
            out, _ = anyio.run(run_stdio, _BATCH, "legacy")
            check_stdio_output(out, _BATCH, [0])
            anyio.run(run_http, posts, "legacy")
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert _fds() == fds
    assert grown < 512 * 1024, f"heap grew by {grown} bytes over 6 rounds"


# -- MRTR retries: forged requestState, bad inputResponses ----------------------------------


def _mutate_state(state: str, how: int, data: st.DataObject) -> object:
    """Another requestState than the one the gateway sealed."""
    if how == 0:  # one character changed
        at = data.draw(st.integers(min_value=0, max_value=len(state) - 1))
        new = data.draw(st.sampled_from("AB_-.x"))
        return state[:at] + new + state[at + 1 :] if state[at] != new else state[:at] + "~"
    if how == 1:  # cut short
        return state[: data.draw(st.integers(min_value=0, max_value=len(state) - 1))]
    if how == 2:  # something appended (not padding: that one is wt-mrtr's item)
        return state + data.draw(st.sampled_from(["A", ".", "g1.", "x" * 100]))
    return data.draw(JSON)  # any JSON value at all


@FUZZ
@given(data=st.data())
def test_mrtr_retries_with_forged_state_or_bad_answers_are_refused(data: st.DataObject) -> None:
    """2026-07-28 MRTR: a retry carries `inputResponses` (InputResponses) and
    the exact `requestState`. A forged state or malformed answers are -32602
    and touch nothing: the parked call stays ready, and the right retry then
    completes it. docs/mrtr.md."""
    kinds = data.draw(st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=4))
    anyio.run(_mrtr_retries, kinds, data)


async def _ask_name(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    answer = await server.ask(
        "elicitation/create",
        {"message": "Name?", "requestedSchema": {"type": "object", "properties": {}}},
    )
    content = (answer.get("result") or {}).get("content") or {}
    return {"content": [{"type": "text", "text": f"Hello, {content.get('name')}"}]}


async def _mrtr_retries(kinds: list[int], data: st.DataObject) -> None:
    from tests.scripted import gateway

    meta = {**MODERN_META, era.CLIENT_CAPABILITIES: {"elicitation": {}}}
    base = {"name": "ask", "arguments": {}, "_meta": meta}
    good_answer = {"action": "accept", "content": {"name": "Ann"}}
    async with gateway(legacy_server({"tools/call": _ask_name}), state_key="k" * 32) as c:
        first = await _call(c, 1, base)
        state = first["result"]["requestState"]
        (key,) = first["result"]["inputRequests"]
        for n, kind in enumerate(kinds, start=10):
            params: dict[str, Any] = {**base, "requestState": state}
            if kind <= 3:
                params["requestState"] = _mutate_state(state, kind, data)
                params["inputResponses"] = {key: good_answer}
            elif kind == 4:
                # (an object without the key is no error: the request is asked again)
                params["inputResponses"] = data.draw(JSON.filter(lambda v: not isinstance(v, dict)))
            else:
                params["inputResponses"] = {
                    key: data.draw(JSON.filter(lambda v: not isinstance(v, dict)))
                }
            reply = await _call(c, n, params)
            assert reply["error"]["code"] == wire.INVALID_PARAMS, (kind, params, reply)
        final = await _call(
            c, 99, {**base, "requestState": state, "inputResponses": {key: good_answer}}
        )
        assert final["result"]["content"][0]["text"] == "Hello, Ann", final
        with anyio.fail_after(3):
            while held(c.service) != NOTHING_HELD:  # ends when all is released (or the bound)
                await anyio.lowlevel.checkpoint()


async def _call(c: Any, msg_id: int, params: dict[str, Any]) -> wire.Message:
    await c.send(wire.request(msg_id, "tools/call", params))
    with anyio.fail_after(5):
        while True:  # ends with the answer (or the bound)
            msg = await c.inbox.receive()
            if msg.get("id") == msg_id and "method" not in msg:
                return msg  # type: ignore[no-any-return]
