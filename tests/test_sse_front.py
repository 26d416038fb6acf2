"""Issue #15, the SSE front's edges, in process: the stream and its endpoint
event, POSTs to unknown, ended and malformed sessions, Host/Origin and
tokens, keep-alive comments, a client that stops reading, and the switch."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

import anyio
import orjson
import pytest

from gateway import wire
from gateway.config import Config, ConfigError
from gateway.config.environment import from_environ
from gateway.fronts.asgi import CLIENT_GONE, ClientGone
from tests.inprocess import Exchange, HttpGateway, http_gateway
from tests.log_events import log_events
from tests.mock_clock import on_mock_clock
from tests.scripted import legacy_server
from tests.sse_streams import messages, open_stream, sse_get

INIT = wire.request(
    1,
    "initialize",
    {
        "protocolVersion": "2024-11-05",
        "capabilities": {},
        "clientInfo": {"name": "old", "version": "1"},
    },
)


async def hello(server: Any, msg: wire.Message) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "hello"}]}


async def post(g: HttpGateway, path: str, msg: Any, **headers: str) -> Any:
    body = msg if isinstance(msg, bytes) else orjson.dumps(msg)
    return await g.client.post(
        path, content=body, headers={"content-type": "application/json", **headers}
    )


async def test_a_session_on_the_stream() -> None:
    """2025-11-25 transports "Backwards Compatibility": the first event is
    `endpoint`; POSTs answer 202 and the replies arrive on the stream."""
    async with http_gateway(legacy_server({"tools/call": hello})) as g:
        stream = sse_get()
        async with open_stream(g, stream) as endpoint:
            assert endpoint.startswith("/messages?session_id=")
            # The id in a header too, for a load balancer to stick on
            # (deploy/haproxy/haproxy.cfg).
            assert stream.header(b"mcp-session-id") == endpoint.split("=")[1].encode()
            assert (await post(g, endpoint, INIT)).status_code == 202
            await stream.wait_until(lambda: len(messages(stream)) == 1)
            assert messages(stream)[0]["id"] == 1
            assert "result" in messages(stream)[0]
            initialized = wire.notification("notifications/initialized")
            assert (await post(g, endpoint, initialized)).status_code == 202
            call = wire.request(2, "tools/call", {"name": "t", "arguments": {}})
            assert (await post(g, endpoint, call)).status_code == 202
            await stream.wait_until(lambda: len(messages(stream)) == 2)
            assert messages(stream)[1]["result"]["content"][0]["text"] == "hello"
        assert not g.front.sse or not g.front.sse.sessions.by_id  # ended with the stream


async def test_unknown_ended_and_malformed_sessions() -> None:
    """Issue #15: "messages POSTed to an ended or unknown session get the
    right status": 404; no or a malformed session id: 400."""
    async with http_gateway(legacy_server()) as g:
        stream = sse_get()
        async with open_stream(g, stream) as endpoint:
            pass
        await stream.wait_until(stream.ended.is_set, timeout=5)
        ended = await post(g, endpoint, INIT)
        assert ended.status_code == 404
        unknown = await post(g, "/messages?session_id=" + "a" * 32, INIT)
        assert unknown.status_code == 404
        assert (await post(g, "/messages", INIT)).status_code == 400
        assert (await post(g, "/messages?session_id=../../x", INIT)).status_code == 400
        # A body that is not JSON-RPC, on a live session: 400.
        live = sse_get()
        async with open_stream(g, live) as endpoint:
            assert (await post(g, endpoint, b"{nope")).status_code == 400
            # Not a method of /sse.
            assert (await g.client.delete("/sse")).status_code == 405


async def test_host_origin_and_tokens() -> None:
    """Issue #15: "Origin/Host checks, tokens and principals" apply: a
    foreign Origin is refused 403, a missing token 401, another principal's
    session is not found."""
    async with http_gateway(legacy_server(), http_tokens={"a": "tok-a", "b": "tok-b"}) as g:
        foreign = await g.client.get(
            "/sse", headers={"origin": "http://evil.example", "authorization": "Bearer tok-a"}
        )
        assert foreign.status_code == 403
        assert (await g.client.get("/sse")).status_code == 401
        stream = sse_get({"authorization": "Bearer tok-a"})
        async with open_stream(g, stream) as endpoint:
            assert (await post(g, endpoint, INIT)).status_code == 401
            other = await post(g, endpoint, INIT, authorization="Bearer tok-b")
            assert other.status_code == 404
            mine = await post(g, endpoint, INIT, authorization="Bearer tok-a")
            assert mine.status_code == 202


async def test_keepalive_comments_on_an_idle_stream() -> None:
    """Issue #15: "keep-alive comments on idle streams"."""
    async with http_gateway(legacy_server()) as g:
        assert g.front.sse is not None
        g.front.sse.keepalive = 0.05
        stream = sse_get()
        async with open_stream(g, stream):
            await stream.wait_until(lambda: stream.text().count(": keep-alive\n\n") >= 2)


class StalledReader(Exchange):
    """A client that reads the endpoint event, then nothing more: each later
    write waits (as on a full socket) until the stream is cut."""

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if len(self.sent) >= 2:
            await anyio.sleep_forever()
        await super().send(message)


@pytest.mark.parametrize(("max_queued", "max_queued_bytes"), [(3, 1 << 20), (1000, 200)])
async def test_a_client_that_stops_reading_is_bounded(
    max_queued: int, max_queued_bytes: int
) -> None:
    """Issue #15: "a client that stops reading its stream is bounded (buffer
    limit, then the session ends with a log line)": by messages or by bytes."""
    async with http_gateway(legacy_server()) as g:
        assert g.front.sse is not None
        g.front.sse.sessions.max_queued = max_queued
        g.front.sse.sessions.max_queued_bytes = max_queued_bytes
        stream = StalledReader("GET", {"accept": "text/event-stream"})
        stream.scope["path"] = "/sse"
        # The front's own server drops the connection of a cut stream (its
        # end could never be written), so that it logs nothing of its own.
        gone = ClientGone(asyncio.get_running_loop())
        aborted: list[bool] = []
        gone.abort = lambda: aborted.append(True)
        stream.scope["extensions"] = {CLIENT_GONE: gone}
        with log_events() as logs:
            async with anyio.create_task_group() as tg:
                tg.start_soon(stream.run, g.front)
                await stream.wait_until(lambda: bool(stream.events()), timeout=5)
                endpoint = stream.events()[0]["data"]
                for n in range(10):
                    answer = await post(g, endpoint, wire.request(100 + n, "ping", {}))
                    if answer.status_code == 404:
                        break
                    assert answer.status_code == 202
                else:
                    raise AssertionError("the session never ended")
                await logs.wait_for("sse session ended: its client does not read its stream")
            ended = [e for e in logs.entries if "sse session ended" in str(e.get("event"))]
            assert len(ended) == 1, ended  # one line, however many replies were dropped
        assert not g.front.sse.sessions.by_id
        assert not g.front.access.busy  # its requests no longer count
        assert aborted == [True]


async def test_switched_off() -> None:
    """Issue #15: "switchable off in config" — then /sse is not there."""
    async with http_gateway(legacy_server(), http_sse_front=False) as g:
        assert (await g.client.get("/sse")).status_code == 404
        assert (await post(g, "/messages?session_id=" + "a" * 32, INIT)).status_code == 404


async def test_sessions_limit() -> None:
    """Limits as the existing front has them: `[http] max_sessions`."""
    async with http_gateway(legacy_server(), http_max_sessions=1) as g:
        stream = sse_get()
        async with open_stream(g, stream):
            assert (await g.client.get("/sse")).status_code == 503


async def test_one_session_limit_for_both_transports_and_metrics_by_transport() -> None:
    """Limits as the existing front has them, shared: an SSE session counts
    against `[http] max_sessions` for a Streamable HTTP `initialize` too;
    /metrics counts the sessions by transport."""
    async with http_gateway(legacy_server(), http_max_sessions=1) as g:
        stream = sse_get()
        async with open_stream(g, stream):
            refused = await g.post(INIT)
            assert refused.status_code == 503
            metrics = (await g.client.get("/metrics")).text
            assert 'mcp_gateway_client_sessions{transport="sse"} 1' in metrics
            assert 'mcp_gateway_client_sessions{transport="streamable-http"} 0' in metrics
            assert "mcp_gateway_sessions 1" in metrics


def test_the_switch_in_the_environment_and_its_check() -> None:
    """`[http] sse_front` is a setting like any other: its variable
    MCP_ERA_GATEWAY_HTTP_SSE_FRONT, and a value that is no boolean refused."""
    assert Config().http_sse_front is True  # on by default
    value, _ = from_environ({"MCP_ERA_GATEWAY_HTTP_SSE_FRONT": "false"})["http_sse_front"]
    assert value is False
    with pytest.raises(ConfigError, match="sse_front"):
        Config(http_sse_front="no").check()  # type: ignore[arg-type]


class SlowReader(Exchange):
    """A client that reads, but each write takes longer than the keep-alive interval."""

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if len(self.sent) >= 2:
            await anyio.sleep(0.05)
        await super().send(message)


async def test_a_slow_reader_loses_no_event_to_the_keepalive_timer() -> None:
    """Every reply reaches a client that reads slowly: the keep-alive timer
    times the wait for a message, never a write in progress."""
    async with http_gateway(legacy_server()) as g:
        assert g.front.sse is not None
        g.front.sse.keepalive = 0.01
        stream = SlowReader("GET", {"accept": "text/event-stream"})
        stream.scope["path"] = "/sse"
        async with open_stream(g, stream) as endpoint:
            for n in range(1, 6):
                assert (await post(g, endpoint, wire.request(n, "ping", {}))).status_code == 202
            await stream.wait_until(lambda: len(messages(stream)) == 5, timeout=10)
            assert [m["id"] for m in messages(stream)] == [1, 2, 3, 4, 5]


async def silent(server: Any, msg: wire.Message) -> None:
    return None


async def test_cancellation_reaches_the_server_and_frees_the_slot() -> None:
    """Issue #15: cancellation applies to an SSE client: its
    notifications/cancelled goes upstream, and the cancelled request (which
    gets no reply) no longer counts against `[http] max_concurrent`."""
    seen: list[wire.Message] = []
    async with http_gateway(legacy_server({"tools/call": silent}, log=seen)) as g:
        stream = sse_get()
        async with open_stream(g, stream) as endpoint:
            await post(g, endpoint, INIT)
            await stream.wait_until(lambda: len(messages(stream)) == 1)
            await post(g, endpoint, wire.notification("notifications/initialized"))
            call = wire.request(7, "tools/call", {"name": "t", "arguments": {}})
            assert (await post(g, endpoint, call)).status_code == 202
            with anyio.fail_after(5):
                while not any(m.get("method") == "tools/call" for m in seen):  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            assert g.front.access.busy == {"local": 1}, [m.get("method") for m in seen]
            cancel = wire.notification("notifications/cancelled", {"requestId": 7})
            assert (await post(g, endpoint, cancel)).status_code == 202
            with anyio.fail_after(5):
                while not any(m.get("method") == "notifications/cancelled" for m in seen):  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            assert not g.front.access.busy


async def test_requests_are_counted_by_transport() -> None:
    """Issue #15: "metrics by transport": an SSE client's requests are
    counted and timed under transport="sse", a Streamable HTTP client's under
    transport="streamable-http", each with its era path, method and outcome."""
    async with http_gateway(legacy_server({"tools/call": hello})) as g:
        stream = sse_get()
        async with open_stream(g, stream) as endpoint:
            await post(g, endpoint, INIT)
            await stream.wait_until(lambda: len(messages(stream)) == 1)
            await post(g, endpoint, wire.notification("notifications/initialized"))
            for n in (2, 3):
                call = wire.request(n, "tools/call", {"name": "t", "arguments": {}})
                assert (await post(g, endpoint, call)).status_code == 202
            await stream.wait_until(lambda: len(messages(stream)) == 3)
            modern = await g.modern("tools/call", {"name": "t", "arguments": {}})
            assert modern.status_code == 200
            text = (await g.client.get("/metrics")).text
    sse = [
        line
        for line in text.splitlines()
        if line.startswith("mcp_gateway_requests_total{") and 'transport="sse"' in line
    ]
    assert sse == [
        'mcp_gateway_requests_total{path="legacy->legacy",method="initialize",outcome="ok",'
        'transport="sse"} 1',
        'mcp_gateway_requests_total{path="legacy->legacy",method="tools/call",outcome="ok",'
        'transport="sse"} 2',
    ], text
    assert 'mcp_gateway_request_seconds_count{path="legacy->legacy",transport="sse"} 3' in text
    assert (
        'mcp_gateway_requests_total{path="modern->legacy",method="tools/call",outcome="ok",'
        'transport="streamable-http"} 1'
    ) in text, text


@on_mock_clock
async def test_idle_sessions_of_both_transports_end() -> None:
    """`[http] session_idle` holds for SSE sessions as for Streamable HTTP
    ones (issue #15: "everything the gateway does for legacy clients
    applies (sessions, ... limits)"): an open stream alone does not keep a
    session nobody POSTs to, or a client could hold `[http] max_sessions`
    with idle streams. The stream ends whole, a later POST gets 404, one log
    line says why; a session in use is kept."""
    async with http_gateway(legacy_server(), http_session_idle=100) as g:
        with log_events() as logged:
            async with anyio.create_task_group() as tg:
                tg.start_soon(g.front.expire_idle_sessions)
                idle, used = sse_get(), sse_get()
                async with open_stream(g, idle) as idle_endpoint, open_stream(g, used) as endpoint:
                    init = await g.post(INIT)
                    http_session = init.headers["mcp-session-id"]
                    for _ in range(3):  # the used one POSTs every 60 s
                        await anyio.sleep(60)
                        ping = wire.request(5, "ping", {})
                        assert (await post(g, endpoint, ping)).status_code == 202
                    await idle.wait_until(idle.ended.is_set, timeout=1)
                    assert (await post(g, idle_endpoint, INIT)).status_code == 404
                    assert not used.ended.is_set()
                    again = await g.post(
                        wire.request(2, "ping", {}),
                        {"mcp-session-id": http_session, "mcp-protocol-version": "2024-11-05"},
                    )
                    assert again.status_code == 404
                tg.cancel_scope.cancel()
    assert [e["why"] for e in logged.entries if e["event"] == "sse session ended"] == [
        "idle",
        "the client closed the stream",
    ]
    assert [e["why"] for e in logged.entries if e["event"] == "http session ended"] == ["idle"]


async def test_a_request_id_in_progress_is_refused_and_nothing_leaks() -> None:
    """2025-11-25 basic: a request id "MUST NOT have been previously used by
    the requestor within the same session"; on the one SSE stream two
    replies of one id could not be told apart. Regression (found by
    tests/test_fuzz_sse_front.py): the second was served, and its
    `[http] max_concurrent` slot was never given back."""
    async with http_gateway(legacy_server({"tools/call": silent})) as g:
        stream = sse_get()
        async with open_stream(g, stream) as endpoint:
            await post(g, endpoint, INIT)
            await stream.wait_until(lambda: len(messages(stream)) == 1)
            await post(g, endpoint, wire.notification("notifications/initialized"))
            call = wire.request(7, "tools/call", {"name": "t", "arguments": {}})
            assert (await post(g, endpoint, call)).status_code == 202
            again = await post(g, endpoint, call)
            assert again.status_code == 400
            error = again.json()["error"]
            assert error["code"] == wire.INVALID_REQUEST
            assert error["data"]["reason"] == "duplicate-request-id", error
            assert again.json()["id"] == 7
            assert g.front.access.busy == {"local": 1}
            cancel = wire.notification("notifications/cancelled", {"requestId": 7})
            assert (await post(g, endpoint, cancel)).status_code == 202
            assert not g.front.access.busy
            # The id is free again once its request is over.
            assert (await post(g, endpoint, call)).status_code == 202
