"""The HTTP back resumes a legacy call's SSE stream that the server closed
before the reply (2025-11-25 basic/transports, "Sending Messages to the
Server" 6 and "Resumability and Redelivery", SEP-1699): the server primes the
stream with an event id (and maybe a `retry` hint), closes it, and the client
GETs it back with `Last-Event-ID`; "disconnection is not cancellation".

Before, `_read_answer` failed such a call with "stream ended without a reply".
The scripted server (tests/servers/scripted_http.py) plays a legacy session;
each test scripts the call's POST stream and the answers to the resuming GETs.
The last test drives the TS SDK 2.x conformance fixture's `test_reconnection`
tool (which does exactly this) with mcp 1.30's ClientSession through the gateway.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import orjson
import pytest
import structlog
from anyio.streams.memory import MemoryObjectSendStream

from gateway import wire
from gateway.backs.http_back import HttpConnectionEnded, HttpServerConnection
from tests.http_back_support import (
    CONFORMANCE,
    Peer,
    connection,
    exchange,
    free_port,
    legacy_handshake,
    modern,
    reply_of,
    until_reply,
)
from tests.push_peers import legacy_client
from tests.servers.scripted_http import (
    COMMENT,
    HttpRequest,
    HttpServer,
    LegacyHttp,
    ModernHttp,
    Reply,
    serve,
)

pytestmark = pytest.mark.anyio

Out = MemoryObjectSendStream[bytes]
Script = Callable[[Out], Awaitable[None]]


def event(event_id: str, msg: wire.Message) -> bytes:
    return f"id: {event_id}\nevent: message\ndata: ".encode() + orjson.dumps(msg) + b"\n\n"


def priming(event_id: str, retry_ms: int | None = None) -> bytes:
    retry = f"retry: {retry_ms}\n" if retry_ms is not None else ""
    return f"id: {event_id}\n{retry}data: \n\n".encode()


def done(msg_id: wire.RequestId, text: str = "done") -> wire.Message:
    return wire.result_response(msg_id, {"content": [{"type": "text", "text": text}]})


def writes(*chunks: bytes) -> Script:
    """A stream that sends `chunks`, then closes."""

    async def work(out: Out) -> None:
        for chunk in chunks:
            await out.send(chunk)

    return work


@dataclass
class Resuming:
    """A legacy session server whose tools/call stream is `post` and whose
    answers to GETs with Last-Event-ID are `gets`, in order (an int is a bare
    status; past the end, an SSE stream that closes at once). Answers to
    server requests are kept in `answers`."""

    post: Script
    gets: list[Script | int] = field(default_factory=list)
    legacy: LegacyHttp = field(default_factory=LegacyHttp)
    resumed: list[HttpRequest] = field(default_factory=list)
    answers: list[wire.Message] = field(default_factory=list)
    answered: anyio.Event = field(default_factory=anyio.Event)

    async def __call__(self, req: HttpRequest, server: HttpServer) -> Reply:
        if req.method == "GET" and req.header("last-event-id") is not None:
            self.resumed.append(req)
            answer = self.gets.pop(0) if self.gets else writes()
            if isinstance(answer, int):
                return Reply(answer, b"no", {"content-type": "text/plain"})
            return server.feed(answer)
        msg = req.message if req.method == "POST" else None
        if isinstance(msg, dict) and req.header("mcp-session-id") in self.legacy.sessions:
            if msg.get("method") == "tools/call":
                return server.feed(self.post)
            if "method" not in msg:
                self.answers.append(msg)
                self.answered.set()
                return Reply(202)
        return await self.legacy(req, server)


class Delays:
    """Stands in for the connection's sleep: records each requested delay
    and returns at once (no test waits out a retry hint)."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        await anyio.lowlevel.checkpoint()


def observe(c: HttpServerConnection) -> Delays:
    delays = Delays()
    c.sleep = delays
    return delays


CALL = wire.request(2, "tools/call", {"name": "slow", "arguments": {}})


async def test_a_stream_closed_after_priming_is_resumed_and_the_reply_delivered() -> None:
    """2025-11-25 "Resumability and Redelivery": the client resumes with an HTTP GET
    carrying Last-Event-ID (the last id it saw on that stream); the server
    replays what followed, the reply included. Before: "stream ended without
    a reply"."""
    behaviour = Resuming(writes(priming("p-0")), [writes(event("e-1", done(2)))])
    async with (
        serve(behaviour) as server,
        connection(server.url, Authorization="Bearer t") as c,
    ):
        delays = observe(c)
        await legacy_handshake(c)
        reply = reply_of(await exchange(c, CALL))
    assert reply == done(2)
    (get,) = behaviour.resumed
    assert get.header("last-event-id") == "p-0"
    assert get.header("accept") == "text/event-stream"
    assert get.header("mcp-session-id") == "sess-1"
    assert get.header("mcp-protocol-version") == "2025-11-25"
    assert get.header("authorization") == "Bearer t"
    assert get.header("content-type") is None
    assert delays.asked == [1.0]  # no retry hint: the default wait


async def test_a_server_request_on_the_resumed_stream_belongs_to_the_call() -> None:
    """Messages on the resumed stream are the original stream's: a server
    request there is tied to the call (2025-11-25 "Sending Messages to the
    Server" 5: the server MAY send requests on the call's stream), and so is
    a notification; the answer goes back by POST and the reply follows."""
    ask = wire.request("s-1", "elicitation/create", {"message": "Name?", "requestedSchema": {}})
    note = wire.notification("notifications/message", {"level": "info", "data": "x"})
    behaviour: Resuming

    async def resumed(out: Out) -> None:
        await out.send(event("e-1", note) + event("e-2", ask))
        with anyio.fail_after(3):
            await behaviour.answered.wait()
        name = behaviour.answers[0]["result"]["content"]["name"]
        await out.send(event("e-3", done(2, name)))

    behaviour = Resuming(writes(priming("p-0") + COMMENT), [resumed])
    async with serve(behaviour) as server, connection(server.url) as c:
        observe(c)
        await legacy_handshake(c)
        await c.send(CALL)
        seen: list[wire.Message] = []
        streams: dict[str, wire.RequestId | None] = {}
        with anyio.fail_after(3):
            while not any(m.get("id") == "s-1" for m in seen):
                batch = await c.receive_batch()
                streams |= {m["method"]: c.stream_of(m) for m in batch if "id" not in m}
                seen += batch
        assert streams == {"notifications/message": 2}  # on the call's stream
        assert not c.outside_calls("s-1")  # not a GET-stream request: it has a call
        answer = {"action": "accept", "content": {"name": "Ada"}}
        await c.send(wire.result_response("s-1", answer))
        reply = reply_of(await until_reply(c, 2))
    assert [m.get("method") for m in seen] == ["notifications/message", "elicitation/create"]
    assert reply == done(2, "Ada")


async def test_a_resumed_stream_closed_again_is_resumed_from_its_newer_id() -> None:
    """2025-11-25 "Resumability and Redelivery": the server may close the resumed stream
    too; the client resumes again with the last id it saw, now one of the
    resumed stream's events."""
    progress = wire.notification("notifications/progress", {"progressToken": 1, "progress": 1})
    behaviour = Resuming(
        writes(priming("p-0", retry_ms=10)),
        [writes(event("e-1", progress)), writes(event("e-2", done(2)))],
    )
    async with serve(behaviour) as server, connection(server.url) as c:
        delays = observe(c)
        await legacy_handshake(c)
        seen = await exchange(c, CALL)
    assert [r.header("last-event-id") for r in behaviour.resumed] == ["p-0", "e-1"]
    assert [m.get("method") for m in seen] == ["notifications/progress", None]
    assert reply_of(seen) == done(2)
    assert delays.asked == [0.01, 0.01]  # the hint stays until the server changes it


class BreaksAfter:
    """An SSE body that sends `chunks`, then fails: the server drops the
    connection mid-body (uvicorn closes it when the app raises)."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)

    async def __aenter__(self) -> BreaksAfter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def __aiter__(self) -> BreaksAfter:
        return self

    async def __anext__(self) -> bytes:
        if self.chunks:
            return self.chunks.pop(0)
        raise ConnectionResetError("dropped mid-body")


async def test_a_broken_stream_is_resumed_as_a_closed_one() -> None:
    """2025-11-25 "Resumability and Redelivery": "If the stream is
    disconnected", not only closed, the client may resume it: a POST stream
    cut mid-body after its priming event is resumed too."""
    behaviour = Resuming(writes(), [writes(event("e-1", done(2)))])

    async def breaking(req: HttpRequest, server: HttpServer) -> Reply:
        if req.method == "POST" and (req.message or {}).get("method") == "tools/call":
            stream = cast(Any, BreaksAfter(priming("p-0")))
            return Reply(headers={"content-type": "text/event-stream"}, stream=stream)
        return await behaviour(req, server)

    async with serve(breaking) as server, connection(server.url) as c:
        observe(c)
        await legacy_handshake(c)
        reply = reply_of(await exchange(c, CALL))
    assert reply == done(2)
    assert [r.header("last-event-id") for r in behaviour.resumed] == ["p-0"]


@pytest.mark.parametrize(("retry_ms", "waited"), [(250, 0.25), (0, 0.0), (600_000, 3.0)])
async def test_the_retry_hint_is_honoured_but_capped(retry_ms: int, waited: float) -> None:
    """2025-11-25 "Resumability and Redelivery": the server MAY send a `retry` field and
    the client SHOULD wait that long before reconnecting; a hint of minutes
    would park the call, so it is capped at a few seconds."""
    behaviour = Resuming(writes(priming("p-0", retry_ms)), [writes(event("e-1", done(2)))])
    async with serve(behaviour) as server, connection(server.url) as c:
        delays = observe(c)
        await legacy_handshake(c)
        reply = reply_of(await exchange(c, CALL))
    assert reply == done(2)
    assert delays.asked == [waited]


async def test_a_get_the_server_refuses_fails_the_call_clearly() -> None:
    """A server that cannot resume (GET 405, as 2025-11-25 allows a server
    without a GET stream to answer) fails the call with a gateway error that
    says so, with one warning; the session goes on."""
    behaviour = Resuming(writes(priming("p-0")), [405])
    with structlog.testing.capture_logs() as logs:
        async with serve(behaviour) as server, connection(server.url) as c:
            observe(c)
            await legacy_handshake(c)
            reply = reply_of(await exchange(c, CALL))
            after = reply_of(await exchange(c, wire.request(3, "tools/list")))
    error = reply["error"]
    assert reply["id"] == 2 and error["code"] == wire.INTERNAL_ERROR
    assert "cannot resume the stream" in error["message"] and "HTTP 405" in error["message"]
    assert error["data"] == {"source": "mcp-era-gateway", "reason": "upstream-http", "status": 405}
    assert "result" in after
    warned = [e for e in logs if e["event"] == "upstream stream not resumed"]
    assert len(warned) == 1 and warned[0]["log_level"] == "warning"


async def test_a_get_the_server_fails_is_tried_again() -> None:
    """A 5xx on the resuming GET is an outage, not a refusal: the stream is
    asked for again, from the same id."""
    behaviour = Resuming(writes(priming("p-0")), [503, writes(event("e-1", done(2)))])
    async with serve(behaviour) as server, connection(server.url) as c:
        observe(c)
        await legacy_handshake(c)
        reply = reply_of(await exchange(c, CALL))
    assert reply == done(2)
    assert [r.header("last-event-id") for r in behaviour.resumed] == ["p-0", "p-0"]


async def test_a_get_404_ends_the_session_and_fails_the_call() -> None:
    """2025-11-25 "Session Management" 4: a 404 on our session id, here on
    the resuming GET, means the session is gone: the call fails and the
    connection ends (the pool opens a new session on demand)."""
    behaviour = Resuming(writes(priming("p-0")), [404])
    async with serve(behaviour) as server, connection(server.url) as c:
        observe(c)
        await legacy_handshake(c)
        await c.send(CALL)
        seen: list[wire.Message] = []
        with pytest.raises(HttpConnectionEnded, match="404"), anyio.fail_after(3):
            while True:  # ends when the connection does
                seen += await c.receive_batch()
    (reply,) = seen
    assert reply["id"] == 2 and reply["error"]["data"]["reason"] == "upstream-failed"


async def test_a_stream_closed_without_an_event_id_is_not_resumed() -> None:
    """Nothing to resume from: a stream that carried no event id cannot be
    asked for by Last-Event-ID, so the call fails as before, at once."""
    behaviour = Resuming(writes(COMMENT))
    async with serve(behaviour) as server, connection(server.url) as c:
        delays = observe(c)
        await legacy_handshake(c)
        reply = reply_of(await exchange(c, CALL))
    assert "stream ended without a reply" in reply["error"]["message"]
    assert reply["error"]["data"]["reason"] == "upstream-unreachable"
    assert behaviour.resumed == [] and delays.asked == []


async def test_resumptions_that_bring_nothing_give_up() -> None:
    """A server that keeps closing the resumed stream with nothing new would
    hold the call until its timeout: three empty resumptions in a row fail it,
    naming why; one that brings an event resets the count."""
    note = wire.notification("notifications/message", {"level": "info", "data": "x"})
    behaviour = Resuming(
        writes(priming("p-0")), [writes(), writes(), writes(event("e-1", note)), writes()]
    )
    async with serve(behaviour) as server, connection(server.url) as c:
        observe(c)
        await legacy_handshake(c)
        reply = reply_of(await exchange(c, CALL))
    assert "3 times in a row with nothing new" in reply["error"]["message"]
    assert reply["error"]["data"]["reason"] == "upstream-unreachable"
    ids = [r.header("last-event-id") for r in behaviour.resumed]
    assert ids == ["p-0", "p-0", "p-0", "e-1", "e-1", "e-1"]


async def test_a_call_cancelled_while_resuming_closes_the_resumed_stream() -> None:
    """The resumption runs inside the call: cancelling it (legacy:
    notifications/cancelled, also what the request timeout sends) closes the
    resumed stream as it would the POST's."""
    hold = anyio.Event()

    async def silent(out: Out) -> None:
        await hold.wait()

    behaviour = Resuming(writes(priming("p-0")), [silent])
    async with serve(behaviour) as server, connection(server.url) as c:
        observe(c)
        await legacy_handshake(c)
        await c.send(CALL)
        get = await server.wait_for(lambda r: r.header("last-event-id") is not None)
        cancel = wire.notification("notifications/cancelled", {"requestId": 2})
        await c.send(cancel)
        with anyio.fail_after(3):
            await get.disconnected.wait()
        await server.wait_for(lambda r: r.message == cancel)
        hold.set()


async def test_a_modern_stream_closed_after_priming_is_not_resumed() -> None:
    """2026-07-28 has no resumption (a modern stream closing is the end of
    the exchange): a modern call whose stream ends without the reply fails,
    and no GET is sent."""

    async def primed_then_closed(msg: wire.Message, req: HttpRequest, server: HttpServer) -> Reply:
        return server.feed(writes(priming("p-0")))

    async with (
        serve(ModernHttp(calls={"slow": primed_then_closed})) as server,
        connection(server.url) as c,
    ):
        delays = observe(c)
        reply = reply_of(await exchange(c, modern(1, "tools/call", name="slow")))
    assert "stream ended without a reply" in reply["error"]["message"]
    assert [r.method for r in server.requests] == ["POST"] and delays.asked == []


# -- the real peer: the TS SDK 2.x conformance fixture --------------------------------


@pytest.fixture(scope="module")
def ts2_http() -> Iterator[str]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed (run `bash peers/install.sh`)", pytrace=False)
    port = free_port()
    server = Peer([node, str(CONFORMANCE / "ts2_fixture_server.mjs"), "--http", str(port)], port)
    server.start()
    try:
        server.wait_listening(time.monotonic() + 30)
        yield server.url
    finally:
        server.stop()


@pytest.mark.peers
def test_ts2_reconnection_through_the_gateway(ts2_http: str) -> None:
    """SEP-1699 with real peers: the TS SDK 2.x server closes the call's
    stream (`ctx.http.closeSSE()`, MemoryEventStore, retry 1000 ms) and
    replies 100 ms later; mcp 1.30's ClientSession calling it through the
    gateway (stdio front, HTTP back) gets the reply. Before: "Upstream HTTP
    exchange failed: stream ended without a reply"."""
    gateway = [sys.executable, "-m", "gateway", "--log-level", "warning", "--upstream", ts2_http]
    out = legacy_client(gateway, "test_reconnection")
    assert out["text"] == ["Reconnection test completed successfully."], out
    assert not out["isError"] and out["protocolVersion"] == "2025-11-25"


# -- the session's GET stream: reopened with the one backoff ---------------------------


@dataclass
class GetStreams:
    """A legacy session server whose answers to plain GETs (no Last-Event-ID)
    are `gets`, in order (an int is a bare status); past the end, 405, which
    ends the client's GET loop and sets `over`."""

    gets: list[Script | int]
    legacy: LegacyHttp = field(default_factory=LegacyHttp)
    over: anyio.Event = field(default_factory=anyio.Event)

    async def __call__(self, req: HttpRequest, server: HttpServer) -> Reply:
        if req.method == "GET" and req.header("last-event-id") is None:
            if not self.gets:
                self.over.set()
                return Reply(405)
            answer = self.gets.pop(0)
            if isinstance(answer, int):
                return Reply(answer, b"no", {"content-type": "text/plain"})
            reply = server.feed(answer)
            reply.headers["content-type"] = "text/event-stream"
            return reply
        return await self.legacy(req, server)


@pytest.mark.parametrize(
    ("gets", "waits"),
    [
        # Doubling from 1 s while it fails; from the server's retry hint after
        # a stream that gave one; from 1 s again after one that did not.
        (
            [500, 500, writes(priming("g-1", 5000)), 500, writes(COMMENT), 500],
            [1.0, 2.0, 5.0, 10.0, 1.0, 2.0],
        ),
        # Capped at 30 s...
        ([500] * 7, [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]),
        # ...but never sooner than the server asked.
        ([writes(priming("g-1", 60000)), 500, 500], [60.0, 60.0, 60.0]),
    ],
)
async def test_the_get_stream_is_reopened_with_backoff(
    gets: list[Script | int], waits: list[float]
) -> None:
    """2025-11-25 "Listening for Messages from the Server" and SSE `retry`:
    the session's GET stream is reopened when it ends or fails, with the
    gateway's one backoff formula (issue #11 item 3: this loop had its own),
    starting from the server's `retry` hint when it gave one."""
    behaviour = GetStreams(list(gets))
    async with serve(behaviour) as server, connection(server.url) as c:
        delays = observe(c)
        await legacy_handshake(c)
        with anyio.fail_after(5):
            await behaviour.over.wait()
    assert delays.asked == waits
