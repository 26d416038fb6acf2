"""The HTTP front as an ASGI app, in process: HttpFront called with scope,
receive and send (or through httpx's ASGI transport, which buffers whole
responses), the gateway service behind it on a scripted legacy upstream. No
socket, no process; on trio's MockClock, so the priming delay and every other
timer fire when all tasks wait, never by the wall clock.

The same cases as tests/test_http_front.py (which runs the gateway as a
subprocess against tests/servers/flaky_server.py): 2026-07-28
basic/transports/streamable-http "Security Warning", "Sending Messages",
"Protocol Version Header", "Request Metadata", "Server Validation";
2025-11-25 basic/transports "Session Management", "Resumability and
Redelivery"."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import orjson

from gateway import wire
from gateway.fronts import legacy_streams
from tests.http_answers import answer_of
from tests.inprocess import ACCEPT, Exchange, HttpGateway, V, http_gateway
from tests.mock_clock import on_mock_clock
from tests.scripted import Recorder, ScriptedServer, legacy_server

JSON = {"accept": ACCEPT, "content-type": "application/json"}
BOUND = 60.0  # seconds of virtual time: every wait of a test is bounded


class Upstream:
    """The scripted legacy server behind the gateway, as flaky_server.py
    behaves: `echo`, `progress` (a progress notification first) and `slow`
    (answers once the test releases it). `seen` records what it received."""

    def __init__(self) -> None:
        self.seen = Recorder()
        self.release = anyio.Event()

    async def echo(self, server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": "echo"}]}

    async def call(self, server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        params = msg["params"]
        if params["name"] == "progress":
            token = params["_meta"]["progressToken"]
            await server.emit(
                wire.notification(
                    "notifications/progress", {"progressToken": token, "progress": 1, "total": 1}
                )
            )
        if params["name"] == "slow":
            await self.release.wait()
        return await self.echo(server, msg)

    def behaviour(self) -> Callable[[ScriptedServer], Any]:
        return legacy_server({"tools/call": self.call}, log=self.seen)

    def cancelled(self) -> list[wire.Message]:
        return [m for m in self.seen if m.get("method") == "notifications/cancelled"]


@asynccontextmanager
async def gateway(**config: Any) -> AsyncIterator[tuple[HttpGateway, Upstream]]:
    upstream = Upstream()
    # request_timeout: a slow call waits for the test, never for this timer.
    async with http_gateway(upstream.behaviour(), request_timeout=3600, **config) as gw:
        yield gw, upstream


def modern_headers(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    headers = {**JSON, "mcp-protocol-version": V, "mcp-method": method}
    if name is not None:
        headers["mcp-name"] = name
    return {**headers, **extra}


def call(msg_id: int, method: str, **params: Any) -> dict[str, Any]:
    meta = {"io.modelcontextprotocol/protocolVersion": V}
    meta["io.modelcontextprotocol/clientCapabilities"] = {}  # type: ignore[assignment]
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": {**params, "_meta": meta}}


async def post(
    c: httpx.AsyncClient, body: dict[str, Any] | bytes, headers: dict[str, str]
) -> httpx.Response:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return await c.post("/mcp", content=content, headers=headers)


async def legacy_session(c: httpx.AsyncClient, version: str = "2025-11-25") -> dict[str, str]:
    init = await post(
        c,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        JSON,
    )
    sh = {**JSON, "mcp-session-id": init.headers["mcp-session-id"]}
    sh["mcp-protocol-version"] = version
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await post(c, note, sh)).status_code == 202
    return sh


def slow(msg_id: int) -> bytes:
    return orjson.dumps(
        {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": {"name": "slow"}}
    )


# -- the cases of test_http_front.py ------------------------------------------------------
@on_mock_clock
async def test_health_ready_and_metrics() -> None:
    async with gateway() as (gw, _):
        c = gw.client
        assert (await c.get("/healthz")).json() == {"status": "alive"}
        ready = (await c.get("/readyz")).json()
        assert ready["era"] == "legacy" and ready["server"]["name"] == "scripted-legacy"
        await post(c, call(1, "tools/call", name="echo"), modern_headers("tools/call", "echo"))
        text = (await c.get("/metrics")).text
    assert "mcp_gateway_upstream_ready 1" in text
    assert 'mcp_gateway_requests_total{path="modern->' in text


@on_mock_clock
async def test_every_400_is_counted_in_the_metrics() -> None:
    """/metrics counts the requests refused at the HTTP layer by status; a
    defect found splitting the front: a modern POST without its per-request
    `_meta` fields got its 400 uncounted (every other 400 was counted)."""
    async with gateway() as (gw, _):
        c = gw.client
        bare = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        refused = await post(c, bare, modern_headers("tools/list"))
        text = (await c.get("/metrics")).text
    assert refused.status_code == 400
    assert 'mcp_gateway_http_errors_total{status="400"} 1' in text


@on_mock_clock
async def test_modern_call_and_spec_status_codes() -> None:
    """2026-07-28 streamable-http "Server Validation" and "Sending Messages":
    a header that contradicts the body is -32020 with HTTP 400, an unknown
    method 404, an unsupported version 400 naming the supported ones."""
    async with gateway() as (gw, _):
        c = gw.client
        ok = await post(c, call(1, "tools/call", name="echo"), modern_headers("tools/call", "echo"))
        assert ok.status_code == 200 and ok.json()["result"]["resultType"] == "complete"
        ping = await post(c, call(2, "ping"), modern_headers("ping"))
        assert ping.status_code == 404 and ping.json()["error"]["code"] == -32601
        wrong_name = await post(
            c, call(3, "tools/call", name="echo"), modern_headers("tools/call", "other")
        )
        assert wrong_name.status_code == 400 and wrong_name.json()["error"]["code"] == -32020
        assert wrong_name.json()["id"] == 3
        no_method = await post(c, call(4, "tools/list"), {**JSON, "mcp-protocol-version": V})
        assert no_method.status_code == 400 and no_method.json()["error"]["code"] == -32020
        body = {"jsonrpc": "2.0", "id": 5, "method": "tools/list"}
        no_meta = await post(c, body, modern_headers("tools/list"))
        assert no_meta.status_code == 400 and no_meta.json()["error"]["code"] == -32602
        old = call(6, "tools/list")
        old["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2099-01-01"
        unsupported = await post(
            c, old, modern_headers("tools/list", **{"mcp-protocol-version": "2099-01-01"})
        )
        assert unsupported.status_code == 400
        assert unsupported.json()["error"]["data"] == {"supported": [V], "requested": "2099-01-01"}
        b64 = await post(
            c,
            call(7, "tools/call", name="echo"),
            modern_headers("tools/call", "=?base64?ZWNobw==?="),
        )
        assert b64.status_code == 200
        assert (await c.get("/mcp", headers={"accept": "text/event-stream"})).status_code == 405
        assert (await c.delete("/mcp")).status_code == 405


@on_mock_clock
async def test_bad_http_input() -> None:
    """Malformed JSON -32700; 406 without both media types in Accept; 415
    for a body that is not JSON; 413 beyond the message limit; a foreign
    Origin or Host 403 ("Security Warning": DNS rebinding)."""
    async with gateway(max_message_bytes=2048) as (gw, _):
        c = gw.client
        h = modern_headers("tools/list")
        parse = await post(c, b"{nope", h)
        assert parse.status_code == 400 and parse.json()["error"]["code"] == -32700
        no_accept = {**h, "accept": "application/json"}
        assert (await post(c, call(1, "tools/list"), no_accept)).status_code == 406
        text = {**h, "content-type": "text/plain"}
        assert (await post(c, call(1, "tools/list"), text)).status_code == 415
        big = call(1, "tools/call", name="echo", arguments={"x": "a" * 5000})
        too_big = await post(c, big, h)
        assert too_big.status_code == 413 and too_big.headers["connection"] == "close"
        echo = call(1, "tools/call", name="echo")
        h = modern_headers("tools/call", "echo")
        evil = await post(c, echo, {**h, "origin": "http://evil.example"})
        assert evil.status_code == 403
        assert evil.json()["error"]["data"]["reason"] == "origin-not-allowed"
        rebind = await post(c, echo, {**h, "host": "evil.example"})
        assert rebind.status_code == 403
        assert rebind.json()["error"]["data"]["source"] == "mcp-era-gateway"
        fine = {**h, "origin": "http://127.0.0.1"}
        assert (await post(c, echo, fine)).status_code == 200


@on_mock_clock
async def test_bearer_tokens_name_principals() -> None:
    """RFC 6750 §3: 401 with a challenge, `invalid_token` when one was given."""
    async with gateway(http_tokens={"alice": "s3cret"}) as (gw, _):
        c = gw.client
        h = modern_headers("tools/call", "echo")
        echo = call(1, "tools/call", name="echo")
        none = await post(c, echo, h)
        assert none.status_code == 401
        assert none.headers["www-authenticate"] == 'Bearer realm="mcp-era-gateway"'
        wrong = await post(c, echo, {**h, "authorization": "Bearer nope"})
        assert wrong.status_code == 401 and "invalid_token" in wrong.headers["www-authenticate"]
        right = await post(c, echo, {**h, "authorization": "Bearer s3cret"})
        assert right.status_code == 200


@on_mock_clock
async def test_legacy_session_lifecycle() -> None:
    """2025-11-25 "Session Management": the id is visible ASCII; requests
    without it 400, with an unknown one 404; DELETE ends the session, after
    which it is 404."""
    async with gateway() as (gw, _):
        c = gw.client
        init = await post(
            c,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
            JSON,
        )
        sid = init.headers["mcp-session-id"]
        assert len(sid) >= 16 and all(0x21 <= ord(ch) <= 0x7E for ch in sid)
        sh = {**JSON, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await post(c, note, sh)).status_code == 202
        ping = await post(c, {"jsonrpc": "2.0", "id": 2, "method": "ping"}, sh)
        assert ping.headers["content-type"].startswith("text/event-stream")
        assert answer_of(ping)["result"] == {}
        tool = await post(
            c, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo"}}, sh
        )
        assert "resultType" not in answer_of(tool)["result"]
        missing = await post(c, {"jsonrpc": "2.0", "id": 4, "method": "tools/list"}, JSON)
        assert missing.status_code == 400
        unknown = await post(
            c,
            {"jsonrpc": "2.0", "id": 5, "method": "tools/list"},
            {**JSON, "mcp-session-id": "nope"},
        )
        assert unknown.status_code == 404
        assert (await c.delete("/mcp", headers={"mcp-session-id": sid})).status_code == 200
        gone = await post(c, {"jsonrpc": "2.0", "id": 6, "method": "ping"}, sh)
        assert gone.status_code == 404
        assert gw.front.sessions == {}


@on_mock_clock
async def test_progress_comes_on_an_sse_stream_before_the_result() -> None:
    async with gateway() as (gw, _):
        msg = call(1, "tools/call", name="progress")
        msg["params"]["_meta"]["progressToken"] = "tok"
        reply = await post(gw.client, msg, modern_headers("tools/call", "progress"))
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in reply.text.splitlines() if line.startswith("data: ")]
    assert '"progressToken":"tok"' in events[0]
    assert '"resultType":"complete"' in events[-1]


@on_mock_clock
async def test_closing_the_response_stream_cancels_upstream() -> None:
    """2026-07-28: a client that closes the response's stream cancels its
    request; the gateway tells the upstream (notifications/cancelled)."""
    async with gateway() as (gw, upstream):
        body = orjson.dumps(call(1, "tools/call", name="slow"))
        post_ = Exchange("POST", modern_headers("tools/call", "slow"), body)
        async with anyio.create_task_group() as tg:
            tg.start_soon(post_.run, gw.front)
            sent = await upstream.seen.wait_for("tools/call", timeout=BOUND)
            post_.gone.set()
            cancelled = await upstream.seen.wait_for("notifications/cancelled", timeout=BOUND)
    assert cancelled["params"]["requestId"] == sent["id"]
    assert post_.sent == []  # nothing was answered to a client that left


@on_mock_clock
async def test_closing_a_legacy_sessions_stream_cancels_upstream() -> None:
    """The request's disconnect watcher wins before any reply: the front must
    still cancel upstream (the session's link lives on, so nothing else
    does); the session stays usable."""
    async with gateway() as (gw, upstream):
        sh = await legacy_session(gw.client)
        post_ = Exchange("POST", sh, slow(2))
        async with anyio.create_task_group() as tg:
            tg.start_soon(post_.run, gw.front)
            sent = await upstream.seen.wait_for("tools/call", timeout=BOUND)
            post_.gone.set()
            cancelled = await upstream.seen.wait_for("notifications/cancelled", timeout=BOUND)
        assert cancelled["params"]["requestId"] == sent["id"]
        ping = await post(gw.client, {"jsonrpc": "2.0", "id": 3, "method": "ping"}, sh)
        assert answer_of(ping) == {"jsonrpc": "2.0", "id": 3, "result": {}}


@on_mock_clock
async def test_a_2025_11_25_call_outlives_its_stream_and_is_resumed() -> None:
    """2025-11-25 basic/transports, "Resumability and Redelivery": the stream
    is primed with an event id and `retry`; "Disconnection SHOULD NOT be
    interpreted as the client cancelling its request"; GET with
    Last-Event-ID gets the rest of the stream, the reply included; an id
    with nothing left to resume is 400."""
    async with gateway() as (gw, upstream):
        sh = await legacy_session(gw.client)
        post_ = Exchange("POST", sh, slow(2))
        async with anyio.create_task_group() as tg:
            tg.start_soon(post_.run, gw.front)
            started = anyio.current_time()
            await post_.wait_until(lambda: bool(post_.events()))  # the priming event
            assert anyio.current_time() - started == legacy_streams.PRIME_AFTER
            assert post_.status == 200
            assert post_.header(b"content-type") == b"text/event-stream"
            (priming,) = post_.events()
            assert priming["data"] == "" and priming["retry"] == "1000"
            post_.gone.set()
            # Virtual time: passes once every task waits (the POST has seen
            # the disconnect), far within the 30 s resume window.
            await anyio.sleep(1)
            session = gw.front.sessions[sh["mcp-session-id"]]
            assert [s.attached for s in session.streams.live.values()] == [False]
            upstream.release.set()
            resume = {**sh, "accept": "text/event-stream", "last-event-id": priming["id"]}
            get = Exchange("GET", resume)
            with anyio.fail_after(BOUND):
                await get.run(gw.front)
        assert get.status == 200
        assert get.messages() == [
            {"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "echo"}]}}
        ]
        again = await gw.client.get("/mcp", headers=resume)
        assert again.status_code == 400  # delivered whole: nothing left to resume
        assert again.json()["error"]["data"]["reason"] == "unknown-event-id"
    assert upstream.cancelled() == []


@on_mock_clock
async def test_a_fast_reply_goes_out_with_its_priming_event() -> None:
    """2025-11-25 "Resumability and Redelivery": even a reply that comes at
    once is primed with an event id, in the same response."""
    async with gateway() as (gw, _):
        sh = await legacy_session(gw.client)
        ping = Exchange("POST", sh, orjson.dumps({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
        await ping.run(gw.front)
    events = ping.events()
    assert events[0]["data"] == "" and events[0]["id"]
    assert ping.messages() == [{"jsonrpc": "2.0", "id": 3, "result": {}}]


@on_mock_clock
async def test_older_sessions_keep_json_answers() -> None:
    """Priming events (empty data) are for 2025-11-25 clients: an older
    session's requests are answered in JSON, as before."""
    async with gateway() as (gw, _):
        sh = await legacy_session(gw.client, "2025-06-18")
        ping = await post(gw.client, {"jsonrpc": "2.0", "id": 3, "method": "ping"}, sh)
    assert ping.headers["content-type"] == "application/json"
    assert ping.json() == {"jsonrpc": "2.0", "id": 3, "result": {}}


@on_mock_clock
async def test_a_session_deleted_under_a_request_answers_it_404() -> None:
    async with gateway() as (gw, upstream):
        sh = await legacy_session(gw.client)
        post_ = Exchange("POST", sh, slow(2))
        async with anyio.create_task_group() as tg:
            tg.start_soon(post_.run, gw.front)
            await upstream.seen.wait_for("tools/call", timeout=BOUND)
            deleted = await gw.client.delete(
                "/mcp", headers={"mcp-session-id": sh["mcp-session-id"]}
            )
            assert deleted.status_code == 200
    assert post_.status == 404
    assert orjson.loads(post_.text())["id"] == 2


@on_mock_clock
async def test_a_last_event_id_with_non_ascii_digits_is_400_not_a_crash() -> None:
    """2025-11-25 "Resumability and Redelivery": a Last-Event-ID the server
    did not hand out resumes nothing. Found by hypothesis: "1/²" passed
    str.isdigit() and then int() raised, so the GET ended in a 500 with a
    traceback instead of the gateway's 400."""
    async with gateway() as (gw, _):
        sh = await legacy_session(gw.client)
        # The header's byte 0xB2 reads as "²" (header bytes are latin-1).
        resume = {**sh, "accept": "text/event-stream", "last-event-id": "1/\xb2"}
        get = Exchange("GET", resume)
        await get.run(gw.front)
    assert get.status == 400
    assert orjson.loads(get.text())["error"]["data"]["reason"] == "unknown-event-id"
