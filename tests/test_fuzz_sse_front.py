"""Hostile input on the HTTP+SSE front (issue #15; the invariants of
tests/test_fuzz_fronts.py, which this reuses): hypothesis POSTs arbitrary
bytes, arbitrary JSON and JSON-RPC envelopes of both eras with fields of
the wrong shape to `/messages`, under a session id that is the hostile
client's own, malformed, unknown or repeated, with odd content types, while
a well-behaved SSE client uses its own session.

Invariants:
- every POST gets 202, or a 4xx with a JSON-RPC error body (never a 5xx);
- every request a 202 accepted is answered exactly once on its session's
  stream, and every event there is one valid JSON-RPC message;
- the well-behaved client gets right answers throughout;
- afterwards nothing is held: sessions, in-progress counts, in-flight calls.
"""

from __future__ import annotations

from collections import Counter
from urllib.parse import quote

import anyio
import httpx
import orjson
from hypothesis import given
from hypothesis import strategies as st

from gateway import wire
from tests.fuzz_profiles import FUZZ
from tests.fuzz_requests import HOSTILE_LINES, _expected_answers
from tests.held_counts import _released
from tests.inprocess import Exchange, HttpGateway, http_gateway
from tests.well_behaved_upstreams import upstream_of

INIT = wire.request(
    "init",
    "initialize",
    {
        "protocolVersion": "2024-11-05",
        "capabilities": {},
        "clientInfo": {"name": "fuzz", "version": "1"},
    },
)
OWN, OTHER_ID = "<own>", "A" * 32
QUERIES = st.sampled_from([OWN, OWN, OWN, "", "session_id=", "session_id=short", OTHER_ID]) | (
    st.text(max_size=40).map(lambda t: "session_id=" + quote(t))
)
CONTENT_TYPES = st.sampled_from(
    ["application/json", "application/json", "text/plain", "application/json; charset=utf-8", ""]
)


def sse_get() -> Exchange:
    exchange = Exchange("GET", {"accept": "text/event-stream"})
    exchange.scope["path"] = "/sse"
    exchange.scope["raw_path"] = b"/sse"
    return exchange


def stream_messages(exchange: Exchange) -> list[wire.Message]:
    """The `message` events on a stream, each checked to be one JSON-RPC message."""
    out = []
    for event in exchange.events():
        if event.get("event") == "message":
            msg = orjson.loads(event["data"])
            wire.validate(msg)
            out.append(msg)
    return out


async def post(g: HttpGateway, query: str, body: bytes, ctype: str) -> httpx.Response:
    headers = {"content-type": ctype} if ctype else {}
    return await g.client.post(f"/messages?{query}", content=body, headers=headers)


def check_answer(resp: httpx.Response) -> None:
    assert resp.status_code == 202 or 400 <= resp.status_code < 500, (resp.status_code, resp.text)
    if resp.status_code >= 400:
        assert resp.json()["error"]["code"] < 0, resp.text


async def good_client(
    g: HttpGateway, endpoint: str, stream: Exchange, stop: anyio.Event, done: anyio.Event
) -> None:
    """An SSE client that initializes and calls echo until told to stop
    (one call at least), checking each answer; `done` once it stopped."""
    assert (await g.client.post(endpoint, json=INIT)).status_code == 202
    await stream.wait_until(lambda: len(stream_messages(stream)) == 1, timeout=5)
    initialized = wire.notification("notifications/initialized")
    assert (await g.client.post(endpoint, json=initialized)).status_code == 202
    n = 0
    while not stop.is_set() or n == 0:  # ends when the fuzz is done (after one call at least)
        n += 1
        call = wire.request(f"good-{n}", "tools/call", {"name": "echo", "arguments": {"text": n}})
        assert (await g.client.post(endpoint, json=call)).status_code == 202

        def answered(n: int = n) -> bool:
            return any(m.get("id") == f"good-{n}" for m in stream_messages(stream))

        await stream.wait_until(answered, timeout=5)
        (reply,) = [m for m in stream_messages(stream) if m.get("id") == f"good-{n}"]
        assert "result" in reply, reply
    done.set()


async def endpoint_of(stream: Exchange) -> str:
    await stream.wait_until(lambda: bool(stream.events()), timeout=5)
    event = stream.events()[0]
    assert event["event"] == "endpoint"
    return event["data"]


async def run_sse(posts: list[tuple[bytes, str, str]], upstream: str, initialize: bool) -> None:
    async with http_gateway(upstream_of(upstream), request_timeout=2) as g:
        assert g.front.sse is not None
        hostile, good = sse_get(), sse_get()
        accepted: list[bytes] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(hostile.run, g.front)
            tg.start_soon(good.run, g.front)
            own = (await endpoint_of(hostile)).partition("?")[2]
            good_endpoint = await endpoint_of(good)
            stop, done = anyio.Event(), anyio.Event()
            tg.start_soon(good_client, g, good_endpoint, good, stop, done)
            if initialize:
                first = orjson.dumps(INIT)
                assert (await post(g, own, first, "application/json")).status_code == 202
                accepted.append(first)
            for body, query, ctype in posts:
                resp = await post(g, own if query == OWN else query, body, ctype)
                check_answer(resp)
                if resp.status_code == 202:
                    assert query == OWN, (query, resp.status_code)
                    accepted.append(body)
            # Every request accepted is answered exactly once, on its stream;
            # a subscriptions/listen (served to a link that sent no
            # initialize, as on the stdio front) by design only when it ends.
            expected = _expected_answers([b for b in accepted if b"subscriptions/listen" not in b])

            def all_answered() -> bool:
                got = Counter(m.get("id") for m in stream_messages(hostile) if "method" not in m)
                return all(got[i] >= n for i, n in expected.items())

            await hostile.wait_until(all_answered, timeout=5)
            got = Counter(m.get("id") for m in stream_messages(hostile) if "method" not in m)
            for msg_id, n in expected.items():
                assert got[msg_id] == n, (msg_id, got[msg_id], n, accepted)
            stop.set()
            with anyio.fail_after(10):
                await done.wait()
            hostile.gone.set()
            good.gone.set()
        assert not g.front.sse.sessions.by_id
        assert g.front.access.busy == {}
        await _released(g)


@FUZZ
@given(
    posts=st.lists(st.tuples(HOSTILE_LINES, QUERIES, CONTENT_TYPES), min_size=1, max_size=6),
    upstream=st.sampled_from(["legacy", "modern"]),
    initialize=st.booleans(),
)
def test_sse_front_survives_hostile_posts(
    posts: list[tuple[bytes, str, str]], upstream: str, initialize: bool
) -> None:
    anyio.run(run_sse, posts, upstream, initialize)


def test_stream_messages_checks_each_event() -> None:
    """The helper itself: a stream event that is no JSON-RPC message fails."""
    exchange = sse_get()
    exchange.sent.append({"type": "http.response.start", "status": 200, "headers": []})
    exchange.sent.append({"type": "http.response.body", "body": b"event: message\ndata: {}\n\n"})
    try:
        stream_messages(exchange)
    except wire.InvalidMessage:
        return
    raise AssertionError("an invalid message passed")
