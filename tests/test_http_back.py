"""The Streamable HTTP back over real HTTP on 127.0.0.1: the connection alone,
then the whole gateway (GatewayService with `upstream_url`), against scripted
servers (tests/servers/scripted_http.py) and, at the end, the real peers
(mcp 1.30.0 and 2.3.0 fixture servers, TS server-everything, FastMCP on the
deprecated HTTP+SSE transport). Each test names the spec rule it checks."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import structlog.testing

from gateway import era, wire
from gateway.backs import http_back, http_requests
from gateway.backs.http_back import HttpConnectionEnded, HttpServerConnection
from gateway.backs.http_stream import StreamReader
from gateway.core import http_binding
from gateway.log_limit import LogLimiter
from tests.http_back_support import (
    CONFORMANCE,
    META,
    MRTR_CAPS,
    PEERS,
    REPO,
    Peer,
    connection,
    exchange,
    free_port,
    http_gateway,
    legacy_handshake,
    modern,
    reply_of,
    traced_connection,
    until_reply,
)
from tests.log_events import log_events
from tests.scripted import Client
from tests.servers.scripted_http import (
    COMMENT,
    PRIMING,
    Ask,
    DualHttp,
    HttpRequest,
    HttpServer,
    LegacyHttp,
    ModernHttp,
    OldSseHttp,
    Reply,
    serve,
    sse,
)

pytestmark = pytest.mark.anyio

ELICIT = {
    "message": "Your name?",
    "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
}
REGION_TOOL = {
    "name": "query",
    "inputSchema": {
        "type": "object",
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "opts": {
                "type": "object",
                "properties": {
                    "dry": {"type": "boolean", "x-mcp-header": "Dry"},
                    "n": {"type": "integer", "x-mcp-header": "N"},
                },
            },
            "q": {"type": "string"},
        },
    },
}


# -- modern servers (2026-07-28 streamable-http) --------------------------------------


async def test_modern_request_carries_the_metadata_headers() -> None:
    async with serve(ModernHttp()) as server, connection(server.url, Authorization="Bearer t") as c:
        reply = reply_of(await exchange(c, modern(1, "server/discover")))
    assert reply["result"]["supportedVersions"] == ["2026-07-28"]
    req = server.posts("server/discover")[0]
    assert req.header("mcp-protocol-version") == "2026-07-28"
    assert req.header("mcp-method") == "server/discover"
    assert req.header("accept") == "application/json, text/event-stream"
    assert req.header("content-type") == "application/json"
    assert req.header("authorization") == "Bearer t"
    assert req.header("mcp-session-id") is None


async def test_name_and_param_headers_follow_the_listed_schema() -> None:
    async def ok(msg: wire.Message, req: HttpRequest, server: HttpServer) -> dict[str, Any]:
        return {"content": []}

    behaviour = ModernHttp(tools=[REGION_TOOL], calls={"query": ok})
    async with serve(behaviour) as server, connection(server.url) as c:
        await exchange(c, modern(1, "tools/list"))
        args = {"region": "Zürich", "opts": {"dry": True, "n": 42}, "q": "SELECT"}
        reply = reply_of(await exchange(c, modern(2, "tools/call", name="query", arguments=args)))
        # A null value means no header at all.
        none = {"region": None, "opts": {"n": -7}}
        await exchange(c, modern(3, "tools/call", name="query", arguments=none))
    assert "result" in reply
    first, second = server.posts("tools/call")
    assert first.header("mcp-name") == "query"
    assert first.header("mcp-param-region") == http_binding.encode_value("Zürich")
    assert first.header("mcp-param-dry") == "true"
    assert first.header("mcp-param-n") == "42"
    assert second.header("mcp-param-region") is None and second.header("mcp-param-n") == "-7"
    assert behaviour.listed == 1  # the observed tools/list was enough


async def test_header_mismatch_refreshes_the_tools_once_and_retries() -> None:
    async def ok(msg: wire.Message, req: HttpRequest, server: HttpServer) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": msg["params"]["arguments"]["region"]}]}

    behaviour = ModernHttp(tools=[REGION_TOOL], calls={"query": ok})
    async with serve(behaviour) as server, connection(server.url) as c:
        # Nothing listed yet: the first POST lacks Mcp-Param-Region and is refused.
        call = modern(1, "tools/call", name="query", arguments={"region": "eu"})
        reply = reply_of(await exchange(c, call))
        again = reply_of(await exchange(c, {**call, "id": 2}))
    assert reply["result"]["content"][0]["text"] == "eu" and reply["id"] == 1
    assert "result" in again
    assert behaviour.listed == 1
    own = server.posts("tools/list")[0]
    assert own.message["params"]["_meta"] == META and own.header("mcp-method") == "tools/list"
    assert [r.header("mcp-param-region") for r in server.posts("tools/call")] == [None, "eu", "eu"]


async def test_header_mismatch_that_persists_reaches_the_caller() -> None:
    tool = {"name": "query", "inputSchema": {"type": "object"}}  # the schema hides the header
    behaviour = ModernHttp(tools=[tool], calls={})
    behaviour.tools = [REGION_TOOL]  # ...but the server checks the real one

    async def listed(req: HttpRequest, server: HttpServer) -> Reply:
        if req.message.get("method") == "tools/list":
            msg_id = req.message["id"]
            return Reply.json(wire.result_response(msg_id, {"tools": [tool]}))
        return await behaviour(req, server)

    async with serve(listed) as server, connection(server.url) as c:
        call = modern(1, "tools/call", name="query", arguments={"region": "eu"})
        reply = reply_of(await exchange(c, call))
    assert reply["error"]["code"] == wire.HEADER_MISMATCH and reply["id"] == 1
    assert len(server.posts("tools/call")) == 2 and len(server.posts("tools/list")) == 1


async def test_tools_with_invalid_annotations_are_left_out_of_tools_list() -> None:
    bad = {
        "name": "bad",
        "inputSchema": {"properties": {"x": {"type": "number", "x-mcp-header": "X"}}},
    }
    async with serve(ModernHttp(tools=[REGION_TOOL, bad])) as server, connection(server.url) as c:
        reply = reply_of(await exchange(c, modern(1, "tools/list")))
    assert [t["name"] for t in reply["result"]["tools"]] == ["query"]


async def test_sse_answer_skips_priming_and_comments_and_keeps_notifications() -> None:
    async def streamed(msg: wire.Message, req: HttpRequest, server: HttpServer) -> Reply:
        async def work(out: Any) -> None:
            token = msg["params"]["_meta"]["progressToken"]
            await out.send(PRIMING + COMMENT)
            progress = {"progressToken": token, "progress": 1}
            await out.send(sse(wire.notification("notifications/progress", progress)))
            await out.send(
                sse(wire.result_response(msg["id"], {"resultType": "complete", "content": []}))
            )

        return server.feed(work)

    call = wire.request(5, "tools/call", {"name": "s", "_meta": {**META, "progressToken": "p"}})
    async with serve(ModernHttp(calls={"s": streamed})) as server, connection(server.url) as c:
        seen = await exchange(c, call)
    assert [m.get("method", "reply") for m in seen] == ["notifications/progress", "reply"]
    assert seen[1]["result"]["resultType"] == "complete"


async def test_modern_cancel_closes_the_stream_and_posts_nothing() -> None:
    """2026-07-28 "Cancellation": closing the response stream is the signal."""
    started = anyio.Event()

    async def slow(msg: wire.Message, req: HttpRequest, server: HttpServer) -> Reply:
        async def work(out: Any) -> None:
            await out.send(PRIMING)
            started.set()
            await anyio.sleep_forever()

        return server.feed(work)

    async with serve(ModernHttp(calls={"slow": slow})) as server, connection(server.url) as c:
        await c.send(modern(1, "tools/call", name="slow"))
        with anyio.fail_after(3):
            await started.wait()
        await c.send(wire.notification("notifications/cancelled", {"requestId": 1}))
        req = server.posts("tools/call")[0]
        with anyio.fail_after(3):
            await req.disconnected.wait()
    assert not server.posts("notifications/cancelled")


async def test_http_failures_become_error_replies_under_the_request_id() -> None:
    async def handler(req: HttpRequest, server: HttpServer) -> Reply:
        name = req.message["params"]["name"]
        if name == "gone":
            return Reply(404)
        if name == "teapot":
            return Reply(418, b"short and stout", {"content-type": "text/plain"})
        if name == "boom":
            return Reply(500, b"<html>oops</html>", {"content-type": "text/html"})
        if name == "rpc":
            body = wire.error_response(None, -32021, "needs elicitation", {"x": 1})
            return Reply.json(body, 400)
        return Reply(200, b"not json", {"content-type": "application/json"})

    async with serve(handler) as server, connection(server.url) as c:
        replies = {
            name: reply_of(await exchange(c, modern(name, "tools/call", name=name)))
            for name in ("gone", "teapot", "boom", "rpc", "junk")
        }
    assert replies["gone"]["error"]["code"] == wire.METHOD_NOT_FOUND
    assert replies["gone"]["error"]["data"]["status"] == 404
    assert replies["teapot"]["error"]["code"] == wire.INVALID_REQUEST
    assert "short and stout" in replies["teapot"]["error"]["message"]
    assert replies["boom"]["error"]["code"] == wire.INTERNAL_ERROR
    assert replies["rpc"] == {
        "jsonrpc": "2.0",
        "id": "rpc",
        "error": {"code": -32021, "message": "needs elicitation", "data": {"x": 1}},
    }
    # A 200 whose body is not JSON is the server's malformed reply, not an outage.
    assert replies["junk"]["error"]["data"]["reason"] == "upstream-malformed"
    assert all(r["id"] == name for name, r in replies.items())


async def test_unreachable_server_gives_an_error_reply() -> None:
    async with connection(f"http://127.0.0.1:{free_port()}/mcp") as c:
        reply = reply_of(await exchange(c, modern(1, "server/discover")))
    assert reply["error"]["code"] == wire.INTERNAL_ERROR
    assert reply["error"]["data"]["reason"] == "upstream-unreachable"


async def test_a_header_http_cannot_carry_fails_each_exchange_and_spares_the_rest() -> None:
    """RFC 9110 §5.5: a configured header value that is not ASCII cannot be
    sent. Each exchange fails with that reason, before a byte is written (a
    call under its id, a notification in one warning), and the connection
    goes on: the next call is answered as the first was."""
    bad = {"X-Bad": "caf\u00e9"}
    with log_events() as logs:
        async with serve(ModernHttp()) as server, connection(server.url, **bad) as c:
            reply = reply_of(await exchange(c, modern(1, "server/discover")))
            await c.send(wire.notification("notifications/x"))
            failed = await logs.wait_until(lambda e: e["event"] == "upstream POST failed")
            again = reply_of(await exchange(c, modern(2, "server/discover")))
    why = "cannot send this request: header 'X-Bad' is not valid"
    assert reply["error"]["data"]["reason"] == "upstream-unreachable"
    assert reply["error"]["message"].endswith(why)
    assert failed["log_level"] == "warning" and failed["error"] == why
    assert again["id"] == 2 and again["error"]["message"].endswith(why)
    assert server.requests == []
    assert not [e for e in logs.entries if e["log_level"] == "error"]


async def test_a_redirect_to_another_origin_is_followed_only_where_configured() -> None:
    """Issue #30: `[upstream] headers` (the gateway's own credential) go with
    a followed redirect, so one to another origin fails the call, saying how
    to allow it, until `[upstream] redirect_origins` names that origin; then
    it is followed like one on the upstream's own."""
    async with serve(ModernHttp()) as far:

        async def moved(request: HttpRequest, server: HttpServer) -> Reply:
            return Reply(307, b"", {"location": far.url})

        async with serve(moved) as near:
            async with http_gateway(near.url, upstream_era="modern") as c:
                refused = await c.call("server/discover")
            origin = far.url.rsplit("/", 1)[0]
            async with http_gateway(
                near.url, upstream_era="modern", upstream_redirect_origins=(origin,)
            ) as c:
                discovered = await c.call("server/discover")
    # The gateway cannot start its upstream: it says why.
    assert refused["error"]["data"]["reason"] == "upstream-unavailable", refused
    assert "another origin" in refused["error"]["message"]
    assert "redirect_origins" in refused["error"]["message"]
    assert "result" in discovered, discovered
    assert any(r.method == "POST" for r in far.requests)


# -- legacy servers (2025-11-25 Streamable HTTP) --------------------------------------


async def test_legacy_refusal_is_rekeyed_then_the_session_is_kept() -> None:
    behaviour = LegacyHttp(priming=True)
    async with serve(behaviour) as server, connection(server.url) as c:
        probe = reply_of(await exchange(c, modern(7, "server/discover")))
        await legacy_handshake(c)
        listed = reply_of(await exchange(c, wire.request(2, "tools/list")))
        await server.wait_for(lambda r: r.method == "GET")
    # mcp 1.x answers a modern request 400 with id "server-error": re-keyed.
    assert probe["id"] == 7 and probe["error"]["code"] == wire.INVALID_REQUEST
    assert "result" in listed
    assert c.session_id == "sess-1"  # not the junk id that came with the refusal
    after = [
        r for r in server.requests if r.message is None or r.message.get("method") != "initialize"
    ]
    later = [r for r in after if r.header("mcp-session-id") is not None]
    assert all(r.header("mcp-protocol-version") == "2025-11-25" for r in later)
    assert {r.method for r in later} == {"POST", "GET", "DELETE"}
    assert behaviour.ended == ["sess-1"]  # aclose DELETEd it


async def test_legacy_server_request_on_the_post_stream_is_answered_by_post() -> None:
    async def ask_name(ask: Ask, args: dict[str, Any]) -> dict[str, Any]:
        answer = await ask.ask("elicitation/create", ELICIT)
        return {"content": [{"type": "text", "text": answer["result"]["content"]["name"]}]}

    async with serve(LegacyHttp(tools={"ask": ask_name})) as server, connection(server.url) as c:
        await legacy_handshake(c)
        await c.send(wire.request(2, "tools/call", {"name": "ask"}))
        with anyio.fail_after(3):
            asked = (await c.receive_batch())[0]
        assert asked["method"] == "elicitation/create"
        await c.send(
            wire.result_response(asked["id"], {"action": "accept", "content": {"name": "Ada"}})
        )
        reply = reply_of(await until_reply(c, 2))
    assert reply["result"]["content"][0]["text"] == "Ada"
    answer = next(
        r for r in server.posts() if "result" in r.message and r.message["id"] == asked["id"]
    )
    assert answer.header("mcp-session-id") == "sess-1"


async def test_legacy_get_stream_delivers_server_messages() -> None:
    behaviour = LegacyHttp()
    async with serve(behaviour) as server, connection(server.url) as c:
        await legacy_handshake(c)
        await behaviour.push("sess-1", wire.notification("notifications/tools/list_changed"))
        await behaviour.push("sess-1", wire.request(0, "ping"))
        seen: list[wire.Message] = []
        with anyio.fail_after(3):
            while len(seen) < 2:
                seen += await c.receive_batch()
    assert [m["method"] for m in seen] == ["notifications/tools/list_changed", "ping"]
    get = next(r for r in server.requests if r.method == "GET")
    assert get.header("accept") == "text/event-stream"


async def test_legacy_get_405_means_no_stream() -> None:
    behaviour = LegacyHttp(get_allowed=False)
    with log_events() as logs:
        async with serve(behaviour) as server, connection(server.url) as c:
            await legacy_handshake(c)
            # Logged as the GET loop returns: there is no retry after it.
            await logs.wait_for("upstream offers no GET stream")
            reply = reply_of(await exchange(c, wire.request(2, "tools/list")))
    assert "result" in reply
    assert len([r for r in server.requests if r.method == "GET"]) == 1  # not retried


async def test_legacy_404_ends_the_connection_and_fails_pending_calls() -> None:
    """2025-11-25 "Session Management" 4: a 404 on our session id means the
    session is gone; the pool then starts a new one (see the service test)."""
    hold = anyio.Event()

    async def waits(ask: Ask, args: dict[str, Any]) -> dict[str, Any]:
        await hold.wait()
        return {"content": []}

    behaviour = LegacyHttp(tools={"wait": waits})
    async with serve(behaviour) as server, connection(server.url) as c:
        await legacy_handshake(c)
        await c.send(wire.request(2, "tools/call", {"name": "wait"}))
        await server.wait_for(lambda r: r.method == "POST" and r.message.get("id") == 2)
        behaviour.end_session("sess-1")
        await c.send(wire.request(3, "tools/list"))
        seen: list[wire.Message] = []
        with pytest.raises(HttpConnectionEnded, match="404"), anyio.fail_after(3):
            while True:
                seen += await c.receive_batch()
        hold.set()
    assert sorted(m["id"] for m in seen) == [2, 3]
    assert all(m["error"]["data"]["reason"] == "upstream-failed" for m in seen)


async def test_aclose_deletes_the_session_and_cancels_in_flight_posts() -> None:
    started = anyio.Event()

    async def forever(ask: Ask, args: dict[str, Any]) -> dict[str, Any]:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError

    behaviour = LegacyHttp(tools={"forever": forever})
    async with serve(behaviour) as server:
        async with connection(server.url) as c:
            await legacy_handshake(c)
            await c.send(wire.request(2, "tools/call", {"name": "forever"}))
            with anyio.fail_after(3):
                await started.wait()
        call = server.posts("tools/call")[0]
        with anyio.fail_after(3):
            await call.disconnected.wait()
        delete = next(r for r in server.requests if r.method == "DELETE")
    assert delete.header("mcp-session-id") == "sess-1"
    assert behaviour.ended == ["sess-1"]
    with pytest.raises(HttpConnectionEnded):
        await c.receive_batch()


async def test_legacy_cancel_is_posted_and_the_stream_closed() -> None:
    started = anyio.Event()

    async def forever(ask: Ask, args: dict[str, Any]) -> dict[str, Any]:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError

    async with serve(LegacyHttp(tools={"f": forever})) as server, connection(server.url) as c:
        await legacy_handshake(c)
        await c.send(wire.request(2, "tools/call", {"name": "f"}))
        with anyio.fail_after(3):
            await started.wait()
        await c.send(wire.notification("notifications/cancelled", {"requestId": 2}))
        cancel = await server.wait_for(
            lambda r: r.method == "POST" and r.message.get("method") == "notifications/cancelled"
        )
        with anyio.fail_after(3):
            await server.posts("tools/call")[0].disconnected.wait()
    assert cancel.header("mcp-session-id") == "sess-1"


# -- the deprecated HTTP+SSE transport (2024-11-05) -----------------------------------


async def test_refused_initialize_falls_back_to_http_sse() -> None:
    async with serve(OldSseHttp(), path="/sse") as server, connection(server.url) as c:
        probe = reply_of(await exchange(c, modern(1, "server/discover")))
        init = await legacy_handshake(c)
        call = wire.request(2, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        reply = reply_of(await exchange(c, call))
    assert probe["error"]["code"] == wire.METHOD_NOT_FOUND  # 405 on the SSE URL
    assert init["result"]["protocolVersion"] == "2024-11-05"
    assert reply["result"]["content"][0]["text"] == "hi"
    assert c.sse_endpoint == server.url.replace("/sse", "/messages?session_id=s1")
    assert [r.path for r in server.posts()][-2:] == ["/messages", "/messages"]


async def test_endpoint_on_another_origin_is_refused() -> None:
    async def elsewhere(req: HttpRequest, server: HttpServer) -> Reply:
        if req.method == "POST":
            return Reply(405)

        async def work(out: Any) -> None:
            await out.send(b"event: endpoint\ndata: http://evil.example/messages\n\n")
            await anyio.sleep_forever()

        return server.feed(work)

    async with serve(elsewhere) as server, connection(server.url) as c:
        init = await legacy_handshake(c)
    assert init["error"]["data"]["status"] == 405
    assert c.sse_endpoint is None


async def test_a_failure_reading_the_http_sse_stream_is_one_line_not_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A defect found splitting the back: the HTTP+SSE stream's reader ran
    unguarded in the connection's task group, so an unexpected failure in it
    took every task of the connection down with a traceback. It runs guarded
    now, like every other task of the connection: one log line, and the
    connection still ends cleanly when closed."""

    def broken(*args: Any) -> None:
        raise RuntimeError("a defect in the reader")

    monkeypatch.setattr(StreamReader, "handle_event", broken)
    with log_events() as logs:
        async with serve(OldSseHttp(), path="/sse") as server, connection(server.url) as c:
            await exchange(c, modern(1, "server/discover"))
            init = {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {}}
            await c.send(wire.request(2, "initialize", init))
            failed = await logs.wait_for("upstream http task failed")
    assert failed["task"] == "_read_stream" and "a defect in the reader" in failed["error"]
    assert [e["event"] for e in logs.entries].count("upstream http task failed") == 1


# -- the whole gateway over the HTTP back ---------------------------------------------


async def test_modern_client_through_legacy_http_with_an_mrtr_elicitation() -> None:
    """DESIGN §5.1.6 over HTTP: the legacy server's elicitation/create on the
    POST's SSE stream becomes input_required; the retry's answer is POSTed back."""

    async def ask_name(ask: Ask, args: dict[str, Any]) -> dict[str, Any]:
        answer = await ask.ask("elicitation/create", ELICIT)
        return {
            "content": [{"type": "text", "text": f"Hello, {answer['result']['content']['name']}"}]
        }

    behaviour = LegacyHttp(tools={"ask": ask_name}, priming=True)
    async with serve(behaviour) as server, http_gateway(server.url) as c:
        meta = {**META, era.CLIENT_CAPABILITIES: MRTR_CAPS}
        first = await c.call("tools/call", {"name": "ask", "arguments": {}, "_meta": meta})
        result = first["result"]
        assert result["resultType"] == "input_required", first
        ((key, request),) = result["inputRequests"].items()
        assert request["method"] == "elicitation/create"
        final = await c.call(
            "tools/call",
            {
                "name": "ask",
                "arguments": {},
                "_meta": meta,
                "inputResponses": {key: {"action": "accept", "content": {"name": "Ada"}}},
                "requestState": result["requestState"],
            },
        )
        assert c.service.pool.era is era.Era.LEGACY
    assert final["result"]["content"][0]["text"] == "Hello, Ada"
    assert final["result"]["resultType"] == "complete"
    assert len(server.posts("tools/call")) == 1  # hold mode: one upstream call


async def test_a_log_message_on_a_calls_post_stream_belongs_to_that_call() -> None:
    """Issue: "On a legacy HTTP upstream a message on a call's POST stream
    belongs to that call." Two overlapping calls on one upstream session, one
    asking for debug logs and one for none (2026-07-28 logging: no messages for
    a request without logLevel): each call's messages stay with it, and a
    message on the GET stream belongs to no call (2025-11-25: "unrelated to
    any concurrently-running JSON-RPC request")."""
    both_in = anyio.Event()
    arrived = 0

    async def talk(ask: Ask, args: dict[str, Any]) -> dict[str, Any]:
        nonlocal arrived
        arrived += 1
        if arrived == 2:
            both_in.set()
        with anyio.fail_after(3):
            await both_in.wait()
        who = args["who"]
        note = {"level": "info", "data": f"{who}-info"}
        await ask.notify("notifications/message", note)
        if who == "a":
            await behaviour.push(
                ask.session.sid,
                wire.notification("notifications/message", {"level": "info", "data": "get"}),
            )
        return {"content": [{"type": "text", "text": f"done {who}"}]}

    behaviour = LegacyHttp(tools={"talk": talk})
    seen: list[wire.Message] = []
    async with serve(behaviour) as server, http_gateway(server.url) as c:
        replies: dict[str, wire.Message] = {}
        send, send_nowait = c.link.send, c.link.send_nowait

        async def record(msg: wire.Message) -> None:
            seen.append(msg)
            await send(msg)

        def record_nowait(msg: wire.Message) -> None:
            seen.append(msg)
            send_nowait(msg)

        c.link.send, c.link.send_nowait = record, record_nowait

        async def call(who: str, level: str | None) -> None:
            meta = {**META, era.LOG_LEVEL: level} if level else dict(META)
            params = {"name": "talk", "arguments": {"who": who}, "_meta": meta}
            replies[who] = await c.call("tools/call", params)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "a", "debug")
            tg.start_soon(call, "c", None)
        await c.call("tools/list", {})  # anything still on its way is in by now
    assert replies["a"]["result"]["content"][0]["text"] == "done a"
    assert replies["c"]["result"]["content"][0]["text"] == "done c"
    logs = [m["params"]["data"] for m in seen if m.get("method") == "notifications/message"]
    assert logs == ["a-info"]


async def test_legacy_session_ended_by_the_server_is_reopened_on_demand() -> None:
    async def hello(ask: Ask, args: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": "hello"}]}

    behaviour = LegacyHttp(tools={"hello": hello})
    async with serve(behaviour) as server, http_gateway(server.url) as c:
        assert "result" in await c.call("tools/call", {"name": "hello", "arguments": {}})
        behaviour.end_session("sess-1")
        failed = await c.call("tools/call", {"name": "hello", "arguments": {}})
        again = await c.call("tools/call", {"name": "hello", "arguments": {}})
        assert c.service.pool.restarts == 1
    assert failed["error"]["code"] == wire.INTERNAL_ERROR
    assert again["result"]["content"][0]["text"] == "hello"
    assert len(server.posts("initialize")) == 2


async def test_a_server_request_on_the_get_stream_belongs_to_no_call() -> None:
    """2025-11-25 "Listening for Messages from the Server": what comes on the GET
    stream SHOULD be unrelated to running requests. A roots/list sent there while
    a modern client's call runs (server-everything does this after initialized)
    is refused to the server; the call is not failed with -32021."""
    answers: list[wire.Message] = []

    async def slow(ask: Ask, args: dict[str, Any]) -> dict[str, Any]:
        done, box = anyio.Event(), list[wire.Message]()
        ask.session.answers["get-1"] = (done, box)
        await behaviour.push(ask.session.sid, wire.request("get-1", "roots/list", {}))
        with anyio.fail_after(3):
            await done.wait()
        answers.extend(box)
        return {"content": [{"type": "text", "text": "done"}]}

    behaviour = LegacyHttp(tools={"slow": slow})
    async with serve(behaviour) as server, http_gateway(server.url) as c:
        reply = await c.call("tools/call", {"name": "slow", "arguments": {}})
    assert reply["result"]["content"][0]["text"] == "done", reply
    ((answer,),) = [answers]
    assert answer["error"]["code"] == wire.METHOD_NOT_FOUND
    assert "refused" in answer["error"]["message"]


async def test_a_server_request_on_a_tools_list_stream_does_not_fail_it() -> None:
    """Issue 10: a server request that the in-flight call cannot carry (a
    tools/list: 2026-07-28 lets only tools/call, prompts/get and resources/read
    be input_required) must never fail that call. Over HTTP the request comes
    on the tools/list's own stream; the server gets an error, the tools/list
    its result (on main it got -32021 although the client declared roots)."""
    answers: list[wire.Message] = []

    async def asks_roots(ask: Ask) -> None:
        answers.append(await ask.ask("roots/list", {}))

    behaviour = LegacyHttp(tools={"t": _unused_tool}, on_tools_list=asks_roots)
    meta = {**META, era.CLIENT_CAPABILITIES: {"roots": {}}}
    async with serve(behaviour) as server, http_gateway(server.url) as c:
        reply = await c.call("tools/list", {"_meta": meta})
    assert [t["name"] for t in reply["result"]["tools"]] == ["t"], reply
    ((answer,),) = [answers]
    assert answer["error"]["code"] == wire.METHOD_NOT_FOUND
    assert "no call of the modern client that can carry it" in answer["error"]["message"]


async def _unused_tool(ask: Ask, args: dict[str, Any]) -> dict[str, Any]:
    return {"content": []}


async def test_legacy_client_through_modern_http_with_param_headers() -> None:
    """DESIGN §5.2.3: the gateway's modern request carries the modern headers,
    Mcp-Param-* included, though the legacy client never listed the tools."""

    async def ok(msg: wire.Message, req: HttpRequest, server: HttpServer) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": msg["params"]["arguments"]["region"]}]}

    behaviour = ModernHttp(tools=[REGION_TOOL], calls={"query": ok})
    async with serve(behaviour) as server, http_gateway(server.url) as c:
        init = await c.initialize()
        reply = await c.call(
            "tools/call", {"name": "query", "arguments": {"region": "ap-south"}}, modern=False
        )
        assert c.service.pool.era is era.Era.MODERN
    assert init["result"]["serverInfo"]["name"] == "scripted-http-modern"
    assert reply["result"]["content"][0]["text"] == "ap-south"
    assert "resultType" not in reply["result"]
    # The one initialize is the gateway's legacy check (2026-07-28 "Dual-era"):
    # the client's own handshake never reached the modern server.
    (checked,) = server.posts("initialize")
    assert checked.message["params"]["clientInfo"]["name"] == "mcp-era-gateway"


async def test_gateway_over_http_sse_transport() -> None:
    async with serve(OldSseHttp(), path="/sse") as server, http_gateway(server.url) as c:
        reply = await c.call("tools/call", {"name": "echo", "arguments": {"text": "old"}})
    assert reply["result"]["content"][0]["text"] == "old"
    assert reply["result"]["resultType"] == "complete"


async def test_dual_http_server_serves_each_client_in_its_own_era() -> None:
    """Issue 10 over HTTP: one endpoint serves both eras. The probe says dual
    (the discover POSTed with the modern headers, the legacy `initialize`
    without them), a legacy client's call runs in a legacy session where the
    tool's elicitation/create reaches it as a request, and a modern client's
    call goes to the modern side."""

    async def push(ask: Ask, args: dict[str, Any]) -> dict[str, Any]:
        answer = await ask.ask("elicitation/create", {"message": "Name?", "requestedSchema": {}})
        return {"content": [{"type": "text", "text": answer["result"]["content"]["name"]}]}

    async def modern_push(
        msg: wire.Message, req: HttpRequest, server: HttpServer
    ) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": "modern side"}]}

    behaviour = DualHttp(LegacyHttp(tools={"push": push}), ModernHttp(calls={"push": modern_push}))
    async with serve(behaviour) as server, http_gateway(server.url) as c:
        pool = c.service.pool
        assert pool.era_name == "dual"
        assert pool.probe_report["legacy"] == "InitializeResult 2025-11-25"
        modern = await c.call("tools/call", {"name": "push", "arguments": {}})
        await c.initialize({"elicitation": {}})
        asked, legacy = await legacy_call_answering(c, 77, {"name": "push", "arguments": {}}, ADA)
    assert text_of(modern) == "modern side" and modern["result"]["resultType"] == "complete"
    assert [m["method"] for m in asked] == ["elicitation/create"]
    assert text_of(legacy) == "Ada" and "resultType" not in legacy["result"]
    # The legacy check's session served the legacy client: one initialize in all.
    (checked,) = server.posts("initialize")
    assert "mcp-protocol-version" not in checked.headers


async def test_a_dual_http_server_without_legacy_sessions_serves_legacy_clients_modern() -> None:
    """Issue 10, found by the matrix: the TS SDK 2.x serves legacy clients
    statelessly (`legacy: 'stateless'`: `initialize` answered with no
    Mcp-Session-Id), forgets what they declared and so cannot send them
    requests ("the client on this 2025-era connection did not declare the
    required capability"). Such a server is reported dual, without legacy
    sessions, and its legacy clients are served on its modern side, where the
    gateway turns input_required rounds into requests they can answer."""
    modern = ModernHttp(calls={"push": _modern_side})

    async def handler(req: HttpRequest, server: HttpServer) -> Reply:
        msg = req.message if req.method == "POST" else None
        if isinstance(msg, dict) and msg.get("method") == "initialize":
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "stateless-legacy", "version": "1"},
            }
            return Reply.json(wire.result_response(msg["id"], result), 200)
        return await modern(req, server)

    async with serve(handler) as server, http_gateway(server.url) as c:
        pool = c.service.pool
        assert pool.era_name == "dual"
        assert pool.describe()["legacy"]["sessions"] is False
        assert "without a session" in pool.probe_report["legacy"]
        assert pool.path_for(legacy_client=True) == "legacy->modern(dual)"
        await c.initialize({"elicitation": {}})
        reply = await c.call("tools/call", {"name": "push", "arguments": {}}, modern=False)
    assert text_of(reply) == "modern side"
    assert "resultType" not in reply["result"]  # shaped for the legacy client


async def _modern_side(msg: wire.Message, req: HttpRequest, server: HttpServer) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "modern side"}]}


async def test_modern_only_http_server_is_modern() -> None:
    """Issue 10: a modern-only server refuses the legacy `initialize`; it is
    modern (a 400 with -32022: no session was opened to close)."""
    async with serve(ModernHttp()) as server, http_gateway(server.url) as c:
        assert c.service.pool.era_name == "modern"
        assert "initialize refused: -32022" in c.service.pool.probe_report["legacy"]


async def test_a_refused_legacy_check_that_opened_a_session_deletes_it() -> None:
    """Issue 10 (scope 1): when the legacy check shows the server is
    modern-only, what it opened is closed: a session id that came with the
    refusal is DELETEd, not left behind upstream."""
    modern = ModernHttp()

    async def handler(req: HttpRequest, server: HttpServer) -> Reply:
        msg = req.message if req.method == "POST" else None
        if isinstance(msg, dict) and msg.get("method") == "initialize":
            refusal = wire.error_response(msg["id"], -32601, "Method not found: initialize")
            return Reply.json(refusal, 200, **{"mcp-session-id": "check-1"})
        if req.method == "DELETE":
            return Reply(200)
        return await modern(req, server)

    async with serve(handler) as server, http_gateway(server.url) as c:
        assert c.service.pool.era_name == "modern"
        assert "-32601" in c.service.pool.probe_report["legacy"]
        deleted = await server.wait_for(lambda r: r.method == "DELETE")
    assert deleted.headers["mcp-session-id"] == "check-1"


# -- real peers over HTTP (PEERS.md "Wire facts (Streamable HTTP)") ---------------------


@pytest.fixture(scope="module")
def peers() -> Iterator[dict[str, str]]:
    """Every peer server, started together (each takes a second or two to
    import its SDK), stopped at the end of the module. name -> URL."""
    py1, py2 = str(PEERS / "py1/bin/python"), str(PEERS / "py2/bin/python")
    py1_fixture = str(CONFORMANCE / "py1_fixture_server.py")
    py2_fixture = str(CONFORMANCE / "py2_fixture_server.py")
    names = ("py1", "py2", "py2-modern", "everything", "py1-sse", "py1-redirected")
    ports = {name: free_port() for name in names}
    servers = {
        "py1": Peer([py1, py1_fixture, "--http", str(ports["py1"])], ports["py1"]),
        "py2": Peer([py2, py2_fixture, "--http", str(ports["py2"])], ports["py2"]),
        "py2-modern": Peer(
            [py2, py2_fixture, "--http", str(ports["py2-modern"]), "--modern-only"],
            ports["py2-modern"],
        ),
        "everything": Peer(
            [str(PEERS / "node/node_modules/.bin/mcp-server-everything"), "streamableHttp"],
            ports["everything"],
            env={"PORT": str(ports["everything"])},
        ),
        "py1-sse": Peer(
            [py1, str(REPO / "tests/servers/py1_sse_server.py"), str(ports["py1-sse"])],
            ports["py1-sse"],
            path="/sse",
        ),
        "py1-redirected": Peer(
            [
                py1,
                str(REPO / "tests/servers/py1_redirected_server.py"),
                str(ports["py1-redirected"]),
            ],
            ports["py1-redirected"],
        ),
    }
    try:
        for server in servers.values():
            server.start()
        deadline = time.monotonic() + 30
        for server in servers.values():
            server.wait_listening(deadline)
        yield {name: server.url for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()


def text_of(reply: wire.Message) -> str:
    assert "result" in reply, reply
    return str(reply["result"]["content"][0]["text"])


async def legacy_call_answering(
    c: Client, msg_id: int, params: dict[str, Any], answer: dict[str, Any]
) -> tuple[list[wire.Message], wire.Message]:
    """A legacy client's call during which the gateway asks it things: every
    server request gets `answer`. The requests asked, and the call's reply."""
    await c.send(wire.request(msg_id, "tools/call", params))
    asked: list[wire.Message] = []
    while True:
        msg = await c.next()
        if "method" in msg and "id" in msg:
            asked.append(msg)
            await c.send(wire.result_response(msg["id"], answer))
        elif msg.get("id") == msg_id and "method" not in msg:
            return asked, msg


ADA = {"action": "accept", "content": {"name": "Ada"}}


async def modern_mrtr_call(c: Client, name: str, arguments: dict[str, Any]) -> wire.Message:
    """A modern client's call answered through one input_required round."""
    meta = {**META, era.CLIENT_CAPABILITIES: MRTR_CAPS}
    first = await c.call("tools/call", {"name": name, "arguments": arguments, "_meta": meta})
    result = first["result"]
    assert result["resultType"] == "input_required", first
    ((key, request),) = result["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    params = {
        "name": name,
        "arguments": arguments,
        "_meta": meta,
        "inputResponses": {key: ADA},
        "requestState": result["requestState"],
    }
    return await c.call("tools/call", params, timeout=10)


@pytest.mark.peers
async def test_py2_dual_http_is_dual_and_serves_both_eras(peers: dict[str, str]) -> None:
    """Issue 10: mcp 2.x over HTTP serves both eras on one endpoint, so the
    probe says dual, and each client is served in its own era."""
    async with http_gateway(peers["py2"]) as c:
        simple = await c.call("tools/call", {"name": "test_simple_text", "arguments": {}})
        header = await c.call(
            "tools/call", {"name": "test_header_param", "arguments": {"region": "Zürich"}}
        )
        assert c.service.pool.era_name == "dual"
        assert c.service.pool.probe_report["modern"] == "DiscoverResult"
        assert c.service.pool.probe_report["legacy"].startswith("InitializeResult 2025-")
        await c.initialize({"elicitation": {}})
        legacy = await c.call(
            "tools/call", {"name": "test_header_param", "arguments": {"region": "us"}}, modern=False
        )
        asked, mrtr = await legacy_call_answering(
            c, 90, {"name": "test_input_required_result_elicitation", "arguments": {}}, ADA
        )
    assert simple["result"]["resultType"] == "complete"
    assert text_of(header) == "region=Zürich"  # Mcp-Param-Region in the base64 form
    assert text_of(legacy) == "region=us" and "resultType" not in legacy["result"]
    # DESIGN §5.3: the legacy client has a legacy session of its own upstream,
    # where the server asks its elicitation as a request, passed through.
    assert [m["method"] for m in asked] == ["elicitation/create"]
    assert text_of(mrtr) == "Hello, Ada!"
    assert c.service.pool.path_for(True) == "legacy->legacy(dual)"


@pytest.mark.peers
async def test_py2_modern_only_http_serves_a_legacy_client(peers: dict[str, str]) -> None:
    async with http_gateway(peers["py2-modern"]) as c:
        init = await c.initialize()
        reply = await c.call(
            "tools/call", {"name": "test_simple_text", "arguments": {}}, modern=False
        )
        assert c.service.pool.era is era.Era.MODERN
    assert init["result"]["serverInfo"]["name"] == "py2-conformance-fixture"
    assert "resultType" not in reply["result"] and text_of(reply)


@pytest.mark.peers
async def test_py1_http_is_legacy_and_bridges_an_mrtr_elicitation(peers: dict[str, str]) -> None:
    async with http_gateway(peers["py1"]) as c:
        simple = await c.call("tools/call", {"name": "test_simple_text", "arguments": {}})
        # mcp 1.x refused the probe 400 with id "server-error": a legacy verdict.
        assert c.service.pool.era is era.Era.LEGACY
        assert "-32600" in c.service.pool.probe_report["reason"]
        final = await modern_mrtr_call(c, "test_input_required_result_elicitation", {})
        await c.initialize({"elicitation": {}})
        asked, legacy = await legacy_call_answering(
            c, 91, {"name": "test_input_required_result_elicitation", "arguments": {}}, ADA
        )
    assert simple["result"]["resultType"] == "complete"
    assert text_of(final) == "Hello, Ada!" and final["result"]["resultType"] == "complete"
    assert [m["method"] for m in asked] == ["elicitation/create"]
    assert text_of(legacy) == "Hello, Ada!"


@pytest.mark.peers
async def test_ts_everything_http_is_legacy_and_serves_a_modern_client(
    peers: dict[str, str],
) -> None:
    async with http_gateway(peers["everything"]) as c:
        listed = await c.call("tools/list")
        echo = await c.call("tools/call", {"name": "echo", "arguments": {"message": "hi"}})
        assert c.service.pool.era is era.Era.LEGACY
    assert any(t["name"] == "echo" for t in listed["result"]["tools"])
    assert text_of(echo) == "Echo: hi" and echo["result"]["resultType"] == "complete"


@pytest.mark.peers
async def test_a_server_behind_a_same_origin_redirect_serves_both_eras(
    peers: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #30: a real mcp 1.30 FastMCP server at /real, its /mcp answering
    `307 Location: /real` (RFC 9110 §15.4.8: the method and body are kept),
    is reached at /mcp for a modern and a legacy client alike: its legacy
    session too (initialize, its calls, the GET stream and the DELETE all
    follow the redirect), as the mcp 1.30 client connecting directly does."""
    monkeypatch.setattr(http_requests, "redirect_log", LogLimiter(http_back.log))
    with structlog.testing.capture_logs() as logs:
        async with http_gateway(peers["py1-redirected"]) as c:
            modern_echo = await c.call("tools/call", {"name": "echo", "arguments": {"text": "m"}})
            assert c.service.pool.era is era.Era.LEGACY
            init = await c.initialize()
            legacy_echo = await c.call(
                "tools/call", {"name": "echo", "arguments": {"text": "l"}}, modern=False
            )
    assert text_of(modern_echo) == "m" and modern_echo["result"]["resultType"] == "complete"
    assert init["result"]["serverInfo"]["name"] == "py1-redirected"
    assert text_of(legacy_echo) == "l" and "resultType" not in legacy_echo["result"]
    # What the operator sees: a hint, once a minute, not a line a call.
    hints = [e for e in logs if e["event"].startswith("upstream redirects its POSTs")]
    assert len(hints) == 1 and hints[0]["target"].endswith("/real")


@pytest.mark.peers
async def test_py1_on_deprecated_http_sse_through_the_gateway(peers: dict[str, str]) -> None:
    async with http_gateway(peers["py1-sse"]) as c:
        echo = await c.call("tools/call", {"name": "echo", "arguments": {"text": "old"}})
        final = await modern_mrtr_call(c, "ask_name", {})
        assert c.service.pool.era is era.Era.LEGACY
        (session,) = c.service.pool.sessions.values()
        connection = c.service.pool.supervisor.processes[session]
        assert isinstance(connection, HttpServerConnection) and connection.sse_endpoint
    assert text_of(echo) == "old"
    assert text_of(final) == "Hello, Ada!"


# -- trace context (issue #13) ------------------------------------------------------

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"


@pytest.mark.parametrize("tracing", [True, False])
async def test_the_trace_context_also_goes_in_the_w3c_headers_when_tracing(tracing: bool) -> None:
    """Issue #13: over the HTTP back the context also goes in the `traceparent`
    (and `tracestate`) HTTP header (W3C Trace Context §3), for an HTTP
    server's own instrumentation, on both eras' requests; a malformed one
    never does. With tracing off nothing is added: the request goes as before."""
    traced = {**META, "traceparent": TRACEPARENT, "tracestate": "rojo=1"}
    behaviour = LegacyHttp()
    async with serve(ModernHttp()) as server, traced_connection(server.url, tracing) as c:
        msg = wire.request(1, "server/discover", {"_meta": traced})
        reply_of(await exchange(c, msg))
        junk = wire.request(2, "server/discover", {"_meta": {**META, "traceparent": "junk"}})
        reply_of(await exchange(c, junk))
    good, bad = server.posts("server/discover")
    assert good.header("traceparent") == (TRACEPARENT if tracing else None)
    assert good.header("tracestate") == ("rojo=1" if tracing else None)
    assert bad.header("traceparent") is None
    async with serve(behaviour) as server, traced_connection(server.url, tracing) as c:
        await legacy_handshake(c)
        call = wire.request(2, "tools/list", {"_meta": {"traceparent": TRACEPARENT}})
        reply_of(await exchange(c, call))
    (listed,) = server.posts("tools/list")
    assert listed.header("traceparent") == (TRACEPARENT if tracing else None)
    assert listed.header("mcp-session-id") is not None


async def test_the_session_is_used_once_the_server_took_initialized() -> None:
    """2025-11-25 lifecycle "Initialization": requests follow the client's
    notifications/initialized. Over HTTP each may travel on its own
    connection, so a request POSTed before the server answered the
    notification's POST could reach a server that has not finished
    initializing. Regression (the compat matrix's "tools/list lacked trigger
    tools" flake: the everything server registers tools on initialized): the
    gateway POSTed the notification in the background and sent tools/list at
    once."""
    legacy = LegacyHttp()
    initialized: set[str | None] = set()

    async def handler(req: HttpRequest, server: HttpServer) -> Reply:
        msg = req.message if req.method == "POST" else None
        sid = req.header("mcp-session-id")
        if isinstance(msg, dict) and msg.get("method") == "notifications/initialized":
            await anyio.sleep(0.3)  # a server that takes a moment to set up
            initialized.add(sid)
        elif isinstance(msg, dict) and msg.get("method") == "tools/list" and sid not in initialized:
            return Reply.json(wire.error_response(msg["id"], -32600, "not initialized yet"), 200)
        return await legacy(req, server)

    async with serve(handler) as server, http_gateway(server.url) as c:
        listed = await c.call("tools/list")
    assert "result" in listed, listed


async def test_a_defect_reading_an_event_stream_answer_fails_the_call_not_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An event-stream answer read in the connection's callbacks (issue #12):
    a defect there answers the call with a gateway error and one log line,
    as a task's would; nothing reaches the event loop, and the connection
    serves the next call."""

    async def hi(ask: Ask, args: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": "hi"}]}

    real = StreamReader.handle_event
    calls = 0

    def broken_once(self: StreamReader, *args: Any) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("a defect in the reader")
        return real(self, *args)

    with log_events() as logs:
        async with serve(LegacyHttp(tools={"hi": hi})) as server, connection(server.url) as c:
            await legacy_handshake(c)
            monkeypatch.setattr(StreamReader, "handle_event", broken_once)
            call = {"name": "hi", "arguments": {}}
            failed = reply_of(await exchange(c, wire.request(5, "tools/call", call)))
            again = reply_of(await exchange(c, wire.request(6, "tools/call", call)))
    assert failed["error"]["code"] == wire.INTERNAL_ERROR
    assert "a defect in the reader" in failed["error"]["message"]
    assert again["result"]["content"][0]["text"] == "hi"
    entry = next(e for e in logs.entries if e["event"] == "upstream http task failed")
    assert entry["task"] == "_direct_call" and "a defect in the reader" in entry["error"]
