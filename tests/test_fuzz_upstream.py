"""A hostile upstream, generated: the back's fuzz suite.

The issue: "a server that sends garbage, unknown or duplicate response ids,
results of the wrong shape, huge or deeply nested messages, or requests with
bad params fails the affected call with a clear error and nothing else."
Hypothesis writes the server's side of a call: junk lines, mutated replies,
server requests and notifications with generated params, nesting past the
limit, over-long lines, an exit. A scripted server (in memory, through the
stdio back's own framing) plays it while a second client makes a plain call on
the same session. The invariants:

- the generated call ends, with a result or an error, within its bound;
- the gateway never crashes (its task group never raises) and logs no
  traceback; everything it sends a client encodes as JSON;
- the well-behaved call gets the right answer (or, if the script killed the
  server, a clear upstream-failed error);
- the tables (pending calls, progress routes, session leases, parked calls,
  in-flight calls, forwarded server requests) return to empty.

The second test does the same over Streamable HTTP, against the HTTP back:
generated statuses, content types, bodies and SSE streams for one request,
which must end with a well-formed reply under its id while the connection
goes on serving the next. The third over the deprecated HTTP+SSE transport,
where the one stream carries every reply and is the session: generated
events on it (stray, deep and malformed replies, server requests, another
`endpoint`), the POST's own status, the stream's end; the next call is
answered, on a new session if the stream ended.

Profiles: "ci" (the default, about 20 s for the three) and "deep" for long runs
(`HYPOTHESIS_PROFILE=deep`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import orjson
import structlog.testing
from anyio.streams.memory import MemoryObjectReceiveStream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import era, wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.runtime.service import GatewayService
from gateway.runtime.upstream_session import WIND_DOWN
from tests.http_back_support import connection, exchange, http_gateway, modern
from tests.mock_clock import mock_clock
from tests.scripted import ScriptedServer, Upstream, encoding_link, wait_tables_empty
from tests.servers.scripted_http import HttpRequest, HttpServer, OldSseHttp, Reply, serve

settings.register_profile(
    "ci",
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "deep",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
# What the gateway sends one client.
Inbox = MemoryObjectReceiveStream[wire.Message]

REQUEST_TIMEOUT = 0.3
MAX_BYTES = 16 * 1024
STATE_TTL = 0.2
# Generous: the generated call is bounded by request_timeout (and a forwarded
# server request by another), the check by this.
CALL_BOUND = 10 * REQUEST_TIMEOUT + 2

# -- what the hostile server writes ------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
ids = st.one_of(
    st.integers(min_value=-3, max_value=50),
    st.text(max_size=4),
    json_values,
)
SERVER_METHODS = [
    "sampling/createMessage",
    "elicitation/create",
    "roots/list",
    "ping",
    "tools/call",
    "no/such",
]
NOTIFICATION_METHODS = [
    "notifications/progress",
    "notifications/message",
    "notifications/cancelled",
    "notifications/resources/updated",
    "notifications/tools/list_changed",
    "notifications/elicitation/complete",
    "no/such",
]


def _params_for(method: str) -> st.SearchStrategy[Any]:
    """Params that are right often enough to reach deep into the gateway, and
    wrong in every field the gateway reads."""
    fields = {
        "sampling/createMessage": {
            "messages": st.just([]) | json_values,
            "maxTokens": st.just(5) | json_values,
        },
        "elicitation/create": {
            "message": st.just("name?") | json_values,
            "requestedSchema": st.just({"type": "object"}) | json_values,
            "mode": st.sampled_from(["form", "url"]) | json_values,
            "url": st.just("https://example.com") | json_values,
        },
        "notifications/progress": {
            "progressToken": st.sampled_from(["gw-1", "gw-2", "mine"]) | json_values,
            "progress": st.just(1) | json_values,
        },
        "notifications/message": {
            "level": st.sampled_from(list(era.LOG_LEVELS)) | json_values,
            "data": json_values,
        },
        "notifications/cancelled": {"requestId": ids},
        "notifications/resources/updated": {"uri": st.just("x://a") | json_values},
    }.get(method, {"x": json_values})
    structured = st.fixed_dictionaries({}, optional=fields)
    return structured | json_values | st.none()


@st.composite
def server_request(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from(SERVER_METHODS) | st.text(max_size=6) | json_values)
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": draw(ids), "method": method}
    params = draw(_params_for(method if isinstance(method, str) else ""))
    if params is not None:
        msg["params"] = params
    return orjson.dumps(msg)


@st.composite
def notification(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from(NOTIFICATION_METHODS))
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    params = draw(_params_for(method))
    if params is not None:
        msg["params"] = params
    return orjson.dumps(msg)


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@st.composite
def deep_message(draw: st.DrawFn, kinds: tuple[str, ...]) -> Callable[[int], bytes]:
    depth = draw(st.integers(min_value=190, max_value=600))
    kind = draw(st.sampled_from(kinds))

    def build(call_id: int) -> bytes:
        nest = _deep(depth)
        if kind == "reply":
            return b'{"jsonrpc":"2.0","id":%d,"result":{"x":%s}}' % (call_id, nest)
        if kind == "request":
            return b'{"jsonrpc":"2.0","id":"d","method":"roots/list","params":{"x":%s}}' % nest
        return (
            b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":%s}}'
            % nest
        )

    return build


@st.composite
def reply_to_call(draw: st.DrawFn) -> Callable[[int], bytes]:
    """A reply to the generated call: right, or wrong in shape."""
    kind = draw(
        st.sampled_from(
            ["ok", "result", "error", "twice", "junk-envelope", "input_required", "result-type"]
        )
    )
    value = draw(json_values)
    other = draw(ids)

    def build(call_id: int) -> bytes:
        base: dict[str, Any] = {"jsonrpc": "2.0", "id": call_id}
        if kind == "ok":
            msg = {**base, "result": {"content": [{"type": "text", "text": "fuzz"}]}}
        elif kind == "result":
            msg = {**base, "result": value}
        elif kind == "error":
            msg = {
                **base,
                "error": value if isinstance(value, dict) else {"code": value, "message": "m"},
            }
        elif kind == "twice":
            ok = orjson.dumps({**base, "result": {"content": []}})
            return ok + b"\n" + ok
        elif kind == "junk-envelope":
            msg = {"jsonrpc": value, "id": call_id, "result": {}}
        elif kind == "input_required":
            msg = {
                **base,
                "result": {
                    "resultType": "input_required",
                    "inputRequests": value,
                    "requestState": other,
                },
            }
        else:
            msg = {**base, "result": {"resultType": value, "content": []}}
        return orjson.dumps(msg)

    return build


@dataclass(frozen=True)
class Action:
    kind: str
    write: Callable[[int], bytes] | None = None


def _line(data: bytes) -> Action:
    return Action("line", lambda _id: data)


# A reply for an id the gateway never used: strings and negative numbers (a
# server that answers another call's id cannot be told from a right one).
stray_reply = st.builds(
    lambda msg_id, value: orjson.dumps({"jsonrpc": "2.0", "id": msg_id, "result": value}),
    st.text(max_size=4) | st.integers(min_value=-(2**63), max_value=-1),
    json_values,
)
garbage = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b" "))
# What the server writes while the call is in progress. Nothing here answers
# the call, so every server request here arrives during it.
actions_before = st.lists(
    st.one_of(
        garbage.map(_line),
        server_request().map(_line),
        notification().map(_line),
        stray_reply.map(_line),
        deep_message(("request", "notification")).map(lambda f: Action("line", f)),
        st.just(Action("huge", lambda _id: b'{"x":"' + b"a" * (MAX_BYTES + 10) + b'"}')),
    ),
    max_size=6,
)
# How the call ends, or does not.
ending = st.one_of(
    reply_to_call().map(lambda f: Action("line", f)),
    deep_message(("reply",)).map(lambda f: Action("line", f)),
    st.just(
        Action(
            "line",
            lambda call_id: (
                b'{"jsonrpc":"2.0","id":%d,"result":{"x":"%s"}}'
                % (call_id, b"a" * (MAX_BYTES + 10))
            ),
        )
    ),
    st.just(Action("silence")),
    st.just(Action("die")),
)


# -- the scenario ---------------------------------------------------------------------


@dataclass
class Script:
    before: list[Action]
    end: list[Action]

    @property
    def dies(self) -> bool:
        return any(a.kind == "die" for a in self.end)


DISCOVER = {
    "resultType": "complete",
    "supportedVersions": ["2026-07-28"],
    "capabilities": {"tools": {}, "logging": {}},
    "_meta": {era.SERVER_INFO: {"name": "hostile", "version": "2"}},
}
INITIALIZE = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"tools": {}, "logging": {}, "resources": {"subscribe": True}},
    "serverInfo": {"name": "hostile", "version": "1"},
}


def hostile_server(script: Script, server_era: str) -> Callable[[ScriptedServer], Awaitable[None]]:
    """A server of `server_era` that serves `echo` right and plays `script`
    for `fuzz` (each time it is called: a retry plays it again)."""
    modern = server_era == "modern"

    async def behaviour(server: ScriptedServer) -> None:
        while True:  # ends when the gateway closes the pipe (the script raises)
            msg = await server.recv()
            if "method" not in msg or "id" not in msg:
                continue
            msg_id = msg["id"]
            method = msg["method"]
            if method == "server/discover" and modern:
                await server.emit(wire.result_response(msg_id, DISCOVER))
            elif method == "initialize" and not modern:
                await server.emit(wire.result_response(msg_id, INITIALIZE))
            elif method == "tools/call" and msg["params"].get("name") == "fuzz":
                await play(server, script, msg_id)
            elif method == "tools/call":
                text = msg["params"]["arguments"]["text"]
                result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
                if modern:
                    result["resultType"] = "complete"
                await server.emit(wire.result_response(msg_id, result))
            elif method in ("logging/setLevel", "resources/subscribe") and not modern:
                await server.emit(wire.result_response(msg_id, {}))
            else:
                await server.emit(wire.error_response(msg_id, -32601, "no"))

    return behaviour


async def play(server: ScriptedServer, script: Script, call_id: int) -> None:
    for action in [*script.before, *script.end]:
        if action.kind == "die":
            server.die()
            return
        if action.write is None:
            continue
        await server.emit_raw(action.write(call_id) + b"\n")


CLIENT_KINDS = ["modern", "modern-features", "legacy", "legacy-features"]


async def run_scenario(  # noqa: PLR0915 - one scenario, told in order
    script: Script, server_era: str, client_kind: str, log_level: str | None
) -> None:
    cfg = Config(
        command=("scripted",),
        probe_timeout=0.5,
        request_timeout=REQUEST_TIMEOUT,
        restart_backoff_initial=0.01,
        max_message_bytes=MAX_BYTES,
        state_ttl=STATE_TTL,
        state_key="k" * 32,
        # The calm client is another principal: its calls run on a session
        # (a process) of their own, the healthy path next to the hostile one.
        max_sessions=4,
    )
    spawned: list[ScriptedServer] = []
    try:
        async with anyio.create_task_group() as tg:
            upstream = Upstream(
                hostile_server(script, server_era), tg, spawned, max_bytes=MAX_BYTES
            )
            service = GatewayService(cfg, connect=upstream.connect)
            hostile_out, hostile_in = anyio.create_memory_object_stream[wire.Message](math.inf)
            neighbour_out, neighbour_in = anyio.create_memory_object_stream[wire.Message](math.inf)
            calm_out, calm_in = anyio.create_memory_object_stream[wire.Message](math.inf)
            hostile = encoding_link(hostile_out, principal="hostile")
            neighbour = encoding_link(neighbour_out, principal="hostile")
            calm = encoding_link(calm_out, principal="calm")
            links = [hostile, neighbour, calm]
            service.links |= set(links)
            await service.start(tg)
            streams = (hostile_out, hostile_in, neighbour_out, neighbour_in, calm_out, calm_in)
            async with anyio.create_task_group() as requests:

                async def call(link: ClientLink, inbox: Inbox, msg: wire.Message) -> wire.Message:
                    await service.handle_client_message(link, msg, requests)
                    with anyio.fail_after(CALL_BOUND):
                        while True:  # skips notifications and server requests
                            got = await inbox.receive()
                            if "method" not in got and got.get("id") == msg["id"]:
                                return got

                features: dict[str, Any] = {
                    "sampling": {},
                    "elicitation": {"form": {}, "url": {}},
                    "roots": {},
                }
                caps = features if client_kind.endswith("features") else {}
                if client_kind.startswith("legacy"):
                    init = {
                        "protocolVersion": "2025-11-25",
                        "capabilities": caps,
                        "clientInfo": {"name": "f"},
                    }
                    await call(hostile, hostile_in, wire.request("init", "initialize", init))
                    await service.handle_client_message(
                        hostile, wire.notification("notifications/initialized"), requests
                    )
                    params: dict[str, Any] = {"name": "fuzz", "arguments": {}}
                    if log_level is not None:
                        level = wire.request("lvl", "logging/setLevel", {"level": log_level})
                        await call(hostile, hostile_in, level)
                else:
                    meta: dict[str, Any] = {
                        era.PROTOCOL_VERSION: "2026-07-28",
                        era.CLIENT_CAPABILITIES: caps,
                        "progressToken": "mine",
                    }
                    if log_level is not None:
                        meta[era.LOG_LEVEL] = log_level
                    params = {"name": "fuzz", "arguments": {}, "_meta": meta}

                def echo(msg_id: str, text: str) -> wire.Message:
                    meta = {era.PROTOCOL_VERSION: "2026-07-28", era.CLIENT_CAPABILITIES: {}}
                    args = {"name": "echo", "arguments": {"text": text}, "_meta": meta}
                    return wire.request(msg_id, "tools/call", args)

                answers: dict[str, wire.Message] = {}

                async def run(name: str, link: ClientLink, inbox: Inbox, msg: wire.Message) -> None:
                    answers[name] = await call(link, inbox, msg)

                async with anyio.create_task_group() as together:
                    fuzz = wire.request("fuzz", "tools/call", params)
                    together.start_soon(run, "fuzz", hostile, hostile_in, fuzz)
                    together.start_soon(
                        run, "neighbour", neighbour, neighbour_in, echo("n", "near")
                    )
                    together.start_soon(run, "calm", calm, calm_in, echo("calm", "calm"))

                _check_answer(answers["fuzz"])
                # The call next to the hostile one, on its session: the right
                # answer or an error (a server request of the script's may be
                # pinned on it: on a legacy stdio session nothing says whose it is).
                _check_answer(answers["neighbour"])
                if "result" in answers["neighbour"]:
                    assert answers["neighbour"]["result"]["content"][0]["text"] == "near"
                # The healthy path: always the right answer. (A modern server is
                # one connection for every principal: a script that kills it
                # costs the calm call in flight its answer, and nothing more.)
                calm_reply = answers["calm"]
                if server_era == "modern" and script.dies and "error" in calm_reply:
                    assert calm_reply["error"]["data"]["reason"] == "upstream-failed", calm_reply
                else:
                    assert calm_reply["result"]["content"][0]["text"] == "calm", calm_reply
                again = await call(calm, calm_in, echo("calm-2", "calm"))
                assert again["result"]["content"][0]["text"] == "calm", again
                for link in links:
                    service.drop_link(link)
                bound = STATE_TTL + 2 * REQUEST_TIMEOUT + WIND_DOWN + 1
                await wait_tables_empty(service, links, bound)
                requests.cancel_scope.cancel()
            for stream in streams:
                stream.close()
            await service.aclose()
            tg.cancel_scope.cancel()
    finally:  # on every way out: hypothesis ends an example by raising in it
        for server in spawned:
            server.close_streams()


def _check_answer(reply: wire.Message) -> None:
    """A JSON-RPC response: a result object, or an error with an integer code;
    an error the gateway made names itself and a reason."""
    assert reply.get("jsonrpc") == "2.0"
    if "result" in reply:
        assert isinstance(reply["result"], dict)
        return
    error = reply["error"]
    assert isinstance(error["code"], int) and isinstance(error["message"], str)
    data = error.get("data")
    if isinstance(data, dict) and data.get("source") == "mcp-era-gateway":
        assert isinstance(data.get("reason"), str)


scripts = st.builds(Script, actions_before, ending.map(lambda a: [a]))


@PROFILE
@given(
    script=scripts,
    server_era=st.sampled_from(["legacy", "modern"]),
    client_kind=st.sampled_from(CLIENT_KINDS),
    log_level=st.none() | st.sampled_from(["debug", "error"]),
)
def test_a_hostile_upstream_fails_only_the_call_it_answers(
    script: Script, server_era: str, client_kind: str, log_level: str | None
) -> None:
    with structlog.testing.capture_logs() as logs:
        # On trio's mock clock: wait_tables_empty needs trio, and the
        # gateway's timers (request_timeout, state_ttl) take no wall-clock time.
        anyio.run(
            run_scenario,
            script,
            server_era,
            client_kind,
            log_level,
            backend="trio",
            backend_options={"clock": mock_clock()},
        )
    tracebacks = [
        e for e in logs if e.get("exc_info") or e.get("log_level") in ("error", "critical")
    ]
    assert not tracebacks, tracebacks


# -- over Streamable HTTP: the HTTP back against generated answers ---------------------

http_bodies = st.one_of(
    st.binary(max_size=60),
    json_values.map(orjson.dumps),
    reply_to_call().map(lambda build: build(HTTP_CALL_ID)),
    deep_message(("reply",)).map(lambda build: build(HTTP_CALL_ID)),
)
sse_events = st.lists(
    st.one_of(
        http_bodies.map(lambda b: b"event: message\ndata: " + b.replace(b"\n", b" ") + b"\n\n"),
        server_request().map(lambda b: b"event: message\ndata: " + b + b"\n\n"),
        notification().map(lambda b: b"event: message\ndata: " + b + b"\n\n"),
        st.binary(max_size=30),
        st.just(b": keep-alive\n\n"),
        st.just(b"retry: 10\n\n"),
    ),
    max_size=6,
)
HTTP_CALL_ID = 41


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    content_type: str | None
    body: bytes
    sse: list[bytes] | None


http_answers = st.builds(
    HttpAnswer,
    status=st.sampled_from([200, 200, 200, 202, 400, 404, 500, 503]),
    content_type=st.sampled_from(["application/json", "text/event-stream", "text/html", None]),
    body=http_bodies,
    sse=st.none() | sse_events,
)


async def run_http_scenario(answer: HttpAnswer) -> None:
    async def handler(req: HttpRequest, server: HttpServer) -> Reply:
        msg = req.message
        if msg.get("id") != HTTP_CALL_ID:
            result = {"content": [{"type": "text", "text": "calm"}], "resultType": "complete"}
            return Reply.json(wire.result_response(msg["id"], result))
        headers = {"content-type": answer.content_type} if answer.content_type else {}
        if answer.sse is None:
            return Reply(answer.status, answer.body, headers)
        events = answer.sse

        async def feed(stream: Any) -> None:
            for event in events:
                await stream.send(event)

        reply = server.feed(feed)
        return Reply(answer.status, None, {**reply.headers, **headers}, reply.stream)

    async with serve(handler) as server, connection(server.url) as c:
        with anyio.fail_after(CALL_BOUND):
            seen = await exchange(c, modern(HTTP_CALL_ID, "tools/call", name="fuzz"))
        reply = next(m for m in seen if "method" not in m and m.get("id") == HTTP_CALL_ID)
        _check_answer(reply)
        with anyio.fail_after(CALL_BOUND):
            calm = await exchange(c, modern("calm", "tools/call", name="calm"))
        calm_reply = next(m for m in calm if "method" not in m and m.get("id") == "calm")
        assert calm_reply["result"]["content"][0]["text"] == "calm", calm_reply


# Each example starts a server: half as many as the stdio cases.
@settings(PROFILE, max_examples=max(10, PROFILE.max_examples // 2))
@given(answer=http_answers)
def test_a_hostile_http_upstream_fails_only_the_request_it_answers(answer: HttpAnswer) -> None:
    """Over Streamable HTTP the answer to a POST is the server's to get wrong:
    any status, content type, body or SSE stream ends the request with a
    well-formed reply under its id, within its bound, without a traceback,
    and the connection serves the next request."""
    with structlog.testing.capture_logs() as logs:
        anyio.run(run_http_scenario, answer, backend="asyncio")
    tracebacks = [
        e for e in logs if e.get("exc_info") or e.get("log_level") in ("error", "critical")
    ]
    assert not tracebacks, tracebacks


# -- the deprecated HTTP+SSE transport (2024-11-05) --------------------------------
# One stream carries everything, replies included, and is the session: a
# server there can get a call wrong on the stream, on the POST's own answer,
# or by ending the stream.


def _event(data: bytes) -> bytes:
    return b"event: message\ndata: " + data.replace(b"\n", b" ") + b"\n\n"


def _same(data: bytes) -> Callable[[int], bytes]:
    return lambda call_id: data


sse_transport_events = st.lists(
    st.one_of(
        reply_to_call().map(lambda build: lambda call_id: _event(build(call_id))),
        deep_message(("reply",)).map(lambda build: lambda call_id: _event(build(call_id))),
        st.one_of(server_request(), notification(), json_values.map(orjson.dumps))
        .map(_event)
        .map(_same),
        # Junk, ended as an event is: a line left open would run into the
        # next event and spoil it, on a stream that is the whole session,
        # which no client can undo (the next call could never be answered).
        st.binary(max_size=30).map(lambda junk: junk + b"\n\n").map(_same),
        st.sampled_from(
            [b": keep-alive\n\n", b"retry: 10\n\n", b"event: endpoint\ndata: /elsewhere\n\n"]
        ).map(_same),
    ),
    max_size=6,
)


@dataclass(frozen=True)
class SseTransportAnswer:
    post_status: int  # the POST's own answer (202 Accepted when all is well)
    events: list[Callable[[int], bytes]]  # on the stream, built for the call's id
    then_end: bool  # the stream (the session) ends after them


sse_transport_answers = st.builds(
    SseTransportAnswer,
    post_status=st.sampled_from([202, 202, 202, 200, 400, 404, 500]),
    events=sse_transport_events,
    then_end=st.booleans(),
)


async def run_sse_transport_scenario(answer: SseTransportAnswer) -> None:
    class Hostile(OldSseHttp):
        async def __call__(self, req: HttpRequest, server: HttpServer) -> Reply:
            msg = req.message if req.method == "POST" and req.path == "/messages" else {}
            params = msg.get("params")
            if msg.get("method") != "tools/call" or (params or {}).get("name") != "fuzz":
                return await super().__call__(req, server)
            stream = self.streams[req.query.removeprefix("session_id=")]
            for build in answer.events:
                await stream.send(build(msg["id"]))
            if answer.then_end:
                await stream.aclose()
            return Reply(answer.post_status, b"", {"content-type": "text/plain"})

    config = {"request_timeout": REQUEST_TIMEOUT, "max_message_bytes": MAX_BYTES}
    async with serve(Hostile(), path="/sse") as server, http_gateway(server.url, **config) as c:
        with anyio.fail_after(CALL_BOUND):
            reply = await c.call("tools/call", {"name": "fuzz", "arguments": {"text": "x"}})
        _check_answer(reply)
        # The next call is answered on the same stream; or, the stream (the
        # session) over, it may have set out before the gateway saw the end
        # and fail as a call to a crashed server does, and the one after it
        # is answered on a new session.
        for attempt in range(2):
            with anyio.fail_after(CALL_BOUND):
                calm = await c.call("tools/call", {"name": "echo", "arguments": {"text": "calm"}})
            if "result" in calm or not answer.then_end or attempt:
                break
            assert calm["error"]["data"]["reason"] == "upstream-failed", calm
        assert calm["result"]["content"][0]["text"] == "calm", calm


@settings(PROFILE, max_examples=max(10, PROFILE.max_examples // 2))
@given(answer=sse_transport_answers)
def test_a_hostile_http_sse_upstream_fails_only_the_call_it_answers(
    answer: SseTransportAnswer,
) -> None:
    """Over the deprecated HTTP+SSE transport the server answers a call on
    its one stream: whatever it writes there (junk, stray or deep replies,
    server requests, another `endpoint`), however it answers the POST, and
    whether it ends the stream, the call ends with a well-formed reply within
    its bound, nothing logs an error or a traceback, and the next call is
    answered."""
    with structlog.testing.capture_logs() as logs:
        anyio.run(run_sse_transport_scenario, answer, backend="asyncio")
    tracebacks = [
        e for e in logs if e.get("exc_info") or e.get("log_level") in ("error", "critical")
    ]
    assert not tracebacks, tracebacks
