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
from hypothesis import given
from hypothesis import strategies as st

from gateway import era, wire
from gateway.config import Config
from gateway.runtime.stdio_app import serve_stdio
from tests.fuzz_profiles import FUZZ
from tests.fuzz_requests import (
    HOSTILE_LINES,
    JSON,
    OPEN_SESSION,
    _expected_answers,
    _good_params,
    _raw_deep,
    check_http_response,
    http_posts,
)
from tests.held_counts import NOTHING_HELD, _released, held
from tests.inprocess import ACCEPT, MODERN_META, Exchange, HttpGateway, http_gateway
from tests.scripted import ScriptedServer, Upstream, legacy_server
from tests.well_behaved_upstreams import upstream_of

# -- the upstreams -------------------------------------------------------------------


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


async def _good_client(g: HttpGateway, stop: anyio.Event, seen: list[str]) -> None:
    n = 0
    while not stop.is_set():  # ends when the fuzz is done
        n += 1
        text = f"good-{n}"
        resp = await g.modern("tools/call", {"name": "echo", "arguments": {"text": text}})
        assert resp.status_code == 200, resp.text
        assert resp.json()["result"]["content"][0]["text"] == text
        seen.append(text)


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
