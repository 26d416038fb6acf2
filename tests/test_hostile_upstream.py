"""Hostile and broken upstream servers (stdio framing, in memory).

The issue: "Messages from the upstream get the same treatment: a server that
sends garbage, unknown or duplicate response ids, results of the wrong shape,
huge or deeply nested messages, or requests with bad params fails the affected
call with a clear error and nothing else." Each test plays one misbehaviour
through a scripted server whose output goes through the stdio back's own
framing and screening, and checks what the affected call, the server, the
other calls and the operator's log get."""

from __future__ import annotations

import math
import sys
from typing import Any

import anyio
import orjson
import pytest
import structlog.testing
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gateway import era, wire
from gateway.config import Config
from gateway.core import http_binding
from gateway.core.upstream_checks import MAX_DEPTH
from gateway.fronts.http_front import HttpFront
from gateway.fronts.metrics import Metrics
from gateway.runtime.service import GatewayService
from tests.inprocess_service import in_process_service
from tests.mock_clock import on_mock_clock
from tests.scripted import (
    Recorder,
    ScriptedServer,
    gateway,
    legacy_server,
    modern_server,
    wait_tables_empty,
)

pytestmark = pytest.mark.anyio

MALFORMED = "upstream-malformed"


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def deep_json(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


async def ok(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "fine"}]}


def raw_tool(*lines: bytes | str) -> Any:
    """A tools/call handler that writes `lines` (with {id} filled in) and no reply."""

    async def handler(server: ScriptedServer, msg: wire.Message) -> None:
        for line in lines:
            text = line.decode() if isinstance(line, bytes) else line
            await server.emit_raw(text.replace("{id}", str(msg["id"])).encode() + b"\n")

    return handler


def tool_router(**tools: Any) -> Any:
    async def handler(server: ScriptedServer, msg: wire.Message) -> Any:
        return await tools[msg["params"]["name"]](server, msg)

    return handler


def assert_malformed(reply: wire.Message) -> None:
    error = reply["error"]
    assert error["code"] == wire.INTERNAL_ERROR
    assert error["data"] == {"source": "mcp-era-gateway", "reason": MALFORMED}
    assert error["message"].startswith("Upstream sent a malformed reply")


# -- lines that are no message --------------------------------------------------


async def test_lines_that_are_no_json_rpc_message_are_skipped_with_one_log_line() -> None:
    """2026-07-28 stdio: a server MUST NOT write anything that is not an MCP
    message; when it does, the gateway skips the line, the call still gets its
    reply, and the operator sees one line however many come."""
    junk = raw_tool(
        "not json at all",
        "[1, 2]",
        '"a string"',
        '{"jsonrpc": "1.0", "id": 99, "result": {}}',
        '{"jsonrpc": "2.0"}',
        "not json again",
        '{"jsonrpc": "2.0", "id": {id}, "result": {"content": []}}',
    )
    with structlog.testing.capture_logs() as logs:
        async with gateway(legacy_server({"tools/call": junk})) as c:
            reply = await c.call("tools/call", {"name": "j"}, timeout=2)
            again = await c.call("tools/call", {"name": "j"}, timeout=2)
            assert len(c.upstream.spawned) == 1
    assert reply["result"]["content"] == []
    assert again["result"]["content"] == []
    malformed = [e for e in logs if e["event"] == "upstream sent a malformed message"]
    assert len(malformed) == 1  # rate-limited: one line a minute
    assert not [e for e in logs if e.get("exc_info")]


async def test_reply_to_an_unknown_id_and_a_second_reply_are_dropped() -> None:
    """The issue: "a response with an id nobody waits for; the same id answered
    twice": the call gets the first answer, the rest changes nothing."""
    twice = raw_tool(
        '{"jsonrpc": "2.0", "id": 424242, "result": {"content": []}}',
        '{"jsonrpc": "2.0", "id": "strange", "error": {"code": 1, "message": "x"}}',
        '{"jsonrpc": "2.0", "id": {id}, "result": {"content": [{"type": "text", "text": "1"}]}}',
        '{"jsonrpc": "2.0", "id": {id}, "result": {"content": [{"type": "text", "text": "2"}]}}',
    )
    async with gateway(legacy_server({"tools/call": tool_router(twice=twice, ok=ok)})) as c:
        first = await c.call("tools/call", {"name": "twice"}, timeout=2)
        second = await c.call("tools/call", {"name": "ok"}, timeout=2)
        with pytest.raises(TimeoutError):
            await c.next(timeout=0.1)  # no stray answer reached the client
        assert not any(s.pending for s in c.service.pool.sessions.values())
    assert first["result"]["content"][0]["text"] == "1"
    assert second["result"]["content"][0]["text"] == "fine"


# -- replies of the wrong shape ---------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        '{"jsonrpc": "2.0", "id": {id}, "result": 5}',
        '{"jsonrpc": "2.0", "id": {id}, "result": [1]}',
        '{"jsonrpc": "2.0", "id": {id}, "error": {"code": "bad", "message": "x"}}',
        '{"jsonrpc": "2.0", "id": {id}, "error": "boom"}',
        '{"jsonrpc": "2.0", "id": {id}, "result": {}, "error": {"code": 1, "message": "x"}}',
        '{"jsonrpc": "2.0", "id": {id}}',
        '{"jsonrpc": "2.0", "id": {id}, "error": {"code": true, "message": "x"}}',
    ],
    ids=["result-int", "result-list", "code-str", "error-str", "both", "neither", "code-bool"],
)
async def test_malformed_reply_fails_its_call_at_once(line: str) -> None:
    """A reply whose result is not an object or whose error has no integer code
    names its call: the call fails at once with a gateway error (reason
    upstream-malformed) instead of waiting out request_timeout, and the
    session goes on serving."""
    router = tool_router(bad=raw_tool(line), ok=ok)
    async with gateway(legacy_server({"tools/call": router}), request_timeout=30) as c:
        reply = await c.call("tools/call", {"name": "bad"}, timeout=2)
        after = await c.call("tools/call", {"name": "ok"}, timeout=2)
        assert len(c.upstream.spawned) == 1
    assert_malformed(reply)
    assert reply["id"] == 1
    assert after["result"]["content"][0]["text"] == "fine"


async def test_result_type_that_is_no_string_fails_a_translated_call() -> None:
    """2026-07-28 Result: resultType is a string. The gateway reads it when it
    translates (complete / input_required), so a legacy server's result with
    a resultType of another type fails the call rather than reach a modern
    client unchecked."""

    async def odd(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        return {"content": [], "resultType": ["complete"]}

    async with gateway(legacy_server({"tools/call": odd})) as c:
        reply = await c.call("tools/call", {"name": "x"}, timeout=2)
    assert_malformed(reply)
    assert "resultType" in reply["error"]["message"]


async def test_input_required_without_requests_or_state_fails_the_legacy_client_call() -> None:
    """2026-07-28 MRTR: "Servers MUST include at least one of inputRequests or
    requestState"; inputRequests is an object. A modern server that breaks
    this fails the legacy client's call with a clear error at once, instead
    of the gateway retrying it max_rounds times."""
    calls: list[wire.Message] = []

    async def broken(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        calls.append(msg)
        if msg["params"]["name"] == "list":
            return {"resultType": "input_required", "inputRequests": [1, 2]}
        return {"resultType": "input_required"}

    async with gateway(modern_server({"tools/call": broken})) as c:
        await c.initialize({"elicitation": {}})
        empty = await c.call("tools/call", {"name": "empty"}, modern=False, timeout=3)
        listed = await c.call("tools/call", {"name": "list"}, modern=False, timeout=3)
    for reply in (empty, listed):
        assert reply["error"]["data"]["reason"] == MALFORMED
    assert "inputRequests is not an object" in listed["error"]["message"]
    assert len(calls) == 2  # no retries of a malformed answer


async def test_discover_result_with_wrong_types_is_a_clear_unavailable_error() -> None:
    """A modern server whose DiscoverResult has `capabilities` of the wrong type
    crashed the gateway at start (ValueError in the profile). Now the
    probe says what is wrong, and clients get an upstream-unavailable error."""
    with structlog.testing.capture_logs() as logs:
        async with gateway(modern_server(capabilities="abc")) as c:  # type: ignore[arg-type]
            reply = await c.call("tools/list", timeout=3)
    assert reply["error"]["data"]["reason"] == "upstream-unavailable"
    assert "capabilities is not an object" in reply["error"]["message"]
    assert any(e["event"] == "upstream unavailable" for e in logs)


async def test_initialize_result_with_junk_meta_still_serves_discover() -> None:
    """An InitializeResult whose `_meta` is not an object made every modern
    client's server/discover raise in the read loop (dict("abc")). Junk where
    the gateway only copies what it understands is left out."""

    async def behaviour(server: ScriptedServer) -> None:
        while True:
            msg = await server.recv()
            if "id" not in msg or "method" not in msg:
                continue
            if msg["method"] == "initialize":
                result = {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {}},
                    "serverInfo": "not an object",
                    "_meta": "abc",
                }
                await server.emit(wire.result_response(msg["id"], result))
            else:
                await server.emit(wire.error_response(msg["id"], -32601, "no"))

    async with gateway(behaviour) as c:
        reply = await c.call("server/discover", timeout=2)
    # The server's capabilities, and the tasks the gateway runs itself
    # (docs/design.md §5.4).
    assert reply["result"]["capabilities"] == {
        "tools": {},
        "extensions": {"io.modelcontextprotocol/tasks": {}},
    }
    assert "_meta" not in reply["result"]


# -- huge and deeply nested messages -------------------------------------------------


async def test_deeply_nested_reply_fails_its_call_and_spares_the_session() -> None:
    """The issue: "deeply nested messages (orjson cannot re-encode > ~254
    levels: the gateway must not crash when forwarding one to a client — fail
    that call with a clear error)". On main the reply killed the upstream
    session (the encode failed in its reader) and restarted the server."""
    deep = '{"jsonrpc": "2.0", "id": {id}, "result": {"content": ' + deep_json(300).decode() + "}}"
    router = tool_router(deep=raw_tool(deep), ok=ok)
    async with gateway(legacy_server({"tools/call": router}), encode=True) as c:
        reply = await c.call("tools/call", {"name": "deep"}, timeout=2)
        after = await c.call("tools/call", {"name": "ok"}, timeout=2)
        assert len(c.upstream.spawned) == 1
    assert_malformed(reply)
    assert f"nested deeper than {MAX_DEPTH} levels" in reply["error"]["message"]
    assert after["result"]["content"][0]["text"] == "fine"


async def test_nesting_up_to_the_limit_is_forwarded_untouched() -> None:
    """Values the gateway only forwards stay untouched, however deep, as long
    as it can encode them again: the limit leaves room for its own wrapping."""
    depth = MAX_DEPTH - 3  # the message, result and content levels count too

    async def deep(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        return {"content": nested(depth)}

    async with gateway(legacy_server({"tools/call": deep}), encode=True) as c:
        reply = await c.call("tools/call", {"name": "d"}, timeout=2)
    assert reply["result"]["content"] == nested(depth)


async def test_deeply_nested_server_request_and_notification_are_refused() -> None:
    """A deep server request gets -32600 (it cannot be forwarded); a deep
    notification is dropped; the call in progress is not disturbed."""
    seen = Recorder()

    async def asks_deep(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        nest = deep_json(400).decode()
        await server.emit_raw(
            f'{{"jsonrpc":"2.0","id":"deep-1","method":"roots/list","params":{{"x":{nest}}}}}\n'.encode()
        )
        await server.emit_raw(
            f'{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":{nest}}}}}\n'.encode()
        )
        await seen.wait_for_reply("deep-1")
        return {"content": []}

    async with gateway(legacy_server({"tools/call": asks_deep}, log=seen), encode=True) as c:
        reply = await c.call(
            "tools/call", {"name": "x", "_meta": {era.LOG_LEVEL: "debug"}}, timeout=3
        )
    refusal = next(m for m in seen if m.get("id") == "deep-1")
    assert refusal["error"]["code"] == wire.INVALID_REQUEST
    assert reply["result"]["content"] == []


@pytest.mark.parametrize(
    "line",
    [
        '{"jsonrpc": "2.0", "id": {id}, "result": {"x": "' + "a" * 5000 + '"}}',
        '{"result": {"x": "' + "a" * 5000 + '"}, "jsonrpc": "2.0", "id": {id}}',
        '{"jsonrpc": "2.0", "id": {id}, "error": {"code": 1, "message": "' + "a" * 5000 + '"}}',
    ],
    ids=["python-order", "typescript-order", "error"],
)
async def test_oversized_reply_that_names_its_call_fails_it_at_once(line: str) -> None:
    """An over-long line is skipped as it streams past (never buffered), but
    its first and last bytes are kept: where they show a reply and its id (as
    both SDKs write them), that call fails at once with upstream-malformed
    instead of waiting out its timeout. The session goes on."""
    router = tool_router(big=raw_tool(line), ok=ok)
    behaviour = legacy_server({"tools/call": router})
    async with gateway(behaviour, max_message_bytes=4096, request_timeout=30) as c:
        reply = await c.call("tools/call", {"name": "big"}, timeout=3)
        after = await c.call("tools/call", {"name": "ok"}, timeout=3)
        assert len(c.upstream.spawned) == 1
    assert_malformed(reply)
    assert "over the 4096-byte message limit" in reply["error"]["message"]
    assert after["result"]["content"][0]["text"] == "fine"


async def test_oversized_line_that_names_no_call_is_skipped_and_the_call_times_out() -> None:
    """Where the edges of an over-long line show no reply id, nothing says
    which call it answered: the call it carried ends with its timeout."""
    big = '{"x": "' + "a" * 5000 + '", "id": {id}, "jsonrpc": "2.0", "result": {}}'
    router = tool_router(big=raw_tool(big), ok=ok)
    behaviour = legacy_server({"tools/call": router})
    async with gateway(behaviour, max_message_bytes=4096, request_timeout=0.3) as c:
        reply = await c.call("tools/call", {"name": "big"}, timeout=3)
        after = await c.call("tools/call", {"name": "ok"}, timeout=3)
        assert len(c.upstream.spawned) == 1
    assert reply["error"]["data"]["reason"] == "upstream-timeout"
    assert after["result"]["content"][0]["text"] == "fine"


def test_line_splitter_keeps_the_edges_of_an_over_long_line() -> None:
    """Whichever way the line arrives (one chunk, or split so that it is
    discarded as it streams), its first and last bytes are kept, no more."""
    line = b"<" + b"a" * 2000 + b">"
    for cut in (1, 7, 300, 1000, len(line)):
        splitter = wire.LineSplitter(100)
        got = splitter.feed(line[:cut]) + splitter.feed(line[cut:] + b"\nok\n")
        big = got[0]
        assert isinstance(big, wire.Oversized) and big.size == len(line), cut
        assert big.head == line[: wire.OVERSIZED_EDGE], cut
        assert big.tail == line[-wire.OVERSIZED_EDGE :], cut
        assert got[1:] == [b"ok"]


# -- server requests with bad params ----------------------------------------------


@pytest.mark.parametrize(
    ("method", "params", "code", "field"),
    [
        ("sampling/createMessage", None, wire.INVALID_PARAMS, "params"),
        (
            "sampling/createMessage",
            {"messages": "hi", "maxTokens": 5},
            wire.INVALID_PARAMS,
            "messages",
        ),
        (
            "sampling/createMessage",
            {"messages": [], "maxTokens": "5"},
            wire.INVALID_PARAMS,
            "maxTokens",
        ),
        ("elicitation/create", {"requestedSchema": {}}, wire.INVALID_PARAMS, "message"),
        ("elicitation/create", {"message": "m"}, wire.INVALID_PARAMS, "requestedSchema"),
        ("elicitation/create", {"message": "m", "mode": "url"}, wire.INVALID_PARAMS, "url"),
        ("elicitation/create", {"message": "m", "mode": ["x"]}, wire.INVALID_PARAMS, "mode"),
        ("roots/list", [1, 2], wire.INVALID_PARAMS, "params"),
        ("sampling/createMessage", "junk", wire.INVALID_PARAMS, "params"),
        ("no/such/method", {}, wire.METHOD_NOT_FOUND, "no/such/method"),
        (5, {}, wire.INVALID_REQUEST, "method"),
    ],
)
async def test_server_request_with_bad_params_gets_a_json_rpc_error(
    method: Any, params: Any, code: int, field: str
) -> None:
    """2025-11-25 schema (CreateMessageRequestParams needs messages and
    maxTokens, ElicitRequestFormParams message and requestedSchema, URL mode a
    url); JSON-RPC: params are an object. The server hears an error naming the
    field; no client is asked; the call it runs for still completes."""
    seen = Recorder()

    async def asks(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        request: dict[str, Any] = {"jsonrpc": "2.0", "id": "srv-bad", "method": method}
        if params is not None:
            request["params"] = params
        await server.emit_raw(orjson.dumps(request) + b"\n")
        await seen.wait_for_reply("srv-bad")
        return {"content": []}

    caps: dict[str, Any] = {"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {}}
    async with gateway(legacy_server({"tools/call": asks}, log=seen)) as c:
        await c.initialize(caps)
        reply = await c.call("tools/call", {"name": "x"}, modern=False, timeout=3)
        assert not c.link.server_requests
        with pytest.raises(TimeoutError):
            await c.next(timeout=0.05)  # nothing was forwarded to the client
    answer = next(m for m in seen if m.get("id") == "srv-bad")
    assert answer["error"]["code"] == code
    assert field in answer["error"]["message"]
    assert reply["result"]["content"] == []


# -- notifications with junk params -------------------------------------------------


@pytest.mark.parametrize(
    "notification",
    [
        {"method": "notifications/progress", "params": {"progressToken": ["gw-1"], "progress": 1}},
        {"method": "notifications/progress", "params": {"progressToken": "gw-1", "progress": "x"}},
        {"method": "notifications/message", "params": {"level": [], "data": "x"}},
        {"method": "notifications/message", "params": {"level": {"a": 1}, "data": "x"}},
        {"method": "notifications/message", "params": {"level": "loud", "data": "x"}},
        {"method": "notifications/cancelled", "params": {"requestId": {"x": 1}}},
        {"method": "notifications/resources/updated", "params": {}},
        {"method": "notifications/resources/updated", "params": {"uri": 5}},
        {"method": "notifications/message", "params": "junk"},
    ],
    ids=lambda n: f"{n['method']}:{orjson.dumps(n['params']).decode()}",
)
async def test_notification_with_junk_params_is_dropped_and_nothing_else(
    notification: dict[str, Any],
) -> None:
    """On main a notifications/message with `"level": []` raised TypeError
    (unhashable) in the upstream reader, which killed the session and every
    call on it. A junk notification is dropped with a log line; the call it
    came during completes on the same process."""
    line = orjson.dumps({"jsonrpc": "2.0", **notification}) + b"\n"

    async def noisy(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        await server.emit_raw(line)
        return {"content": [{"type": "text", "text": "done"}]}

    async with gateway(legacy_server({"tools/call": noisy}), encode=True) as c:
        await c.send(
            wire.request(
                1,
                "tools/call",
                {
                    "name": "n",
                    "_meta": {
                        era.PROTOCOL_VERSION: "2026-07-28",
                        era.CLIENT_CAPABILITIES: {},
                        era.LOG_LEVEL: "debug",
                        "progressToken": "mine",
                    },
                },
            )
        )
        reply = await c.next(timeout=2)
        assert len(c.upstream.spawned) == 1
    assert reply["id"] == 1
    assert reply["result"]["content"][0]["text"] == "done"


# -- a server that goes away -------------------------------------------------------


async def test_server_that_writes_its_reply_then_dies_delivers_it_and_fails_the_rest() -> None:
    """A server that writes to stdout then dies: what it wrote still counts,
    the call it never answered fails with upstream-failed, and the next
    request starts a new process."""
    gone = anyio.Event()

    async def answer_then_die(server: ScriptedServer, msg: wire.Message) -> None:
        if msg["params"]["name"] == "slow":
            await gone.wait()
            return None
        await server.emit(
            wire.result_response(msg["id"], {"content": [{"type": "text", "text": "last"}]})
        )
        server.die()
        gone.set()
        return None

    async with gateway(legacy_server({"tools/call": answer_then_die}, log=None)) as c:
        await c.send(wire.request("s", "tools/call", {"name": "slow", "_meta": _meta()}))
        last = await c.call("tools/call", {"name": "last"}, timeout=2)
        slow = await c.next(timeout=2)
        again = await c.call("tools/call", {"name": "last"}, timeout=2)
    assert last["result"]["content"][0]["text"] == "last"
    assert slow["id"] == "s" and slow["error"]["data"]["reason"] == "upstream-failed"
    assert again["result"]["content"][0]["text"] == "last"


def _meta() -> dict[str, Any]:
    return {era.PROTOCOL_VERSION: "2026-07-28", era.CLIENT_CAPABILITIES: {}}


async def test_server_that_dies_right_after_a_request_does_not_crash_the_gateway() -> None:
    """Found by the fuzz suite: a server writes a request and exits in the same
    breath. The gateway's answer (here -32601 for an unknown method) is
    written before its reader has seen the exit; on main that write raised
    ServerExited in a service task and took the whole gateway down. Now the
    answer is dropped (nobody is left to hear it), the call fails with
    upstream-failed, and the next one restarts the server."""

    async def ask_and_die(server: ScriptedServer, msg: wire.Message) -> dict[str, Any] | None:
        if msg["params"]["name"] == "ok":
            return await ok(server, msg)
        await server.emit_raw(b'{"jsonrpc": "2.0", "id": "srv-1", "method": "no/such"}\n')
        server.die()
        return None

    async with gateway(legacy_server({"tools/call": ask_and_die})) as c:
        failed = await c.call("tools/call", {"name": "die"}, timeout=3)
        again = await c.call("tools/call", {"name": "ok"}, timeout=3)
    assert failed["error"]["data"]["reason"] == "upstream-failed"
    assert again["result"]["content"][0]["text"] == "fine"


async def test_server_request_belongs_to_the_calls_running_when_it_arrived() -> None:
    """Found by the fuzz suite: a server writes a request during call A and,
    in the same write, A's reply. On main the request was attributed when its
    task ran, after the reply had ended A: client 2's call B was then the
    only one left, and was failed with -32021 for a request it never caused.
    Ownership is now read in wire order, when the request arrives: with two
    clients' calls in progress it belongs to no single one and is refused."""
    release = anyio.Event()
    seen = Recorder()

    async def calls(server: ScriptedServer, msg: wire.Message) -> dict[str, Any] | None:
        if msg["params"]["name"] == "b":
            await release.wait()
            return {"content": [{"type": "text", "text": "b"}]}
        ask = orjson.dumps({"jsonrpc": "2.0", "id": "srv-roots", "method": "roots/list"})
        done = orjson.dumps(wire.result_response(msg["id"], {"content": []}))
        await server.emit_raw(ask + b"\n" + done + b"\n")
        return None

    async with gateway(legacy_server({"tools/call": calls}, log=seen)) as c:
        other, inbox = c.open_link(10)
        call_b = wire.request("b", "tools/call", {"name": "b", "_meta": _meta()})
        await c.service.handle_client_message(other, call_b, c.requests)
        await seen.wait_for("tools/call")
        first = await c.call("tools/call", {"name": "a"}, timeout=3)
        refusal = await seen.wait_for_reply("srv-roots")
        release.set()
        with anyio.fail_after(3):
            second = await inbox.receive()
    assert first["result"]["content"] == []
    assert second["id"] == "b" and second["result"]["content"][0]["text"] == "b"
    assert refusal["error"]["code"] == wire.METHOD_NOT_FOUND


# -- real processes: what only a pipe can do ---------------------------------------

# A legacy server in a few lines: answers initialize, then does to each
# tools/call what its name says.
STDIO_SERVER = r"""
import json, os, sys, time
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg or "method" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "pipe", "version": "1"}}
    elif msg["method"] == "tools/call":
        name = msg["params"]["name"]
        if name == "close-stdout":
            sys.stdout.flush()
            os.close(1)
            time.sleep(0.3)  # the case under test: stdout closed, the process not yet gone
            sys.exit(0)
        if name == "say-then-die":
            print(json.dumps({"jsonrpc": "2.0", "id": msg["id"],
                              "result": {"content": [{"type": "text", "text": "last words"}]}}))
            print("not json, on the way out")
            sys.stdout.flush()
            os._exit(3)
        result = {"content": [{"type": "text", "text": name}]}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"],
                          "error": {"code": -32601, "message": "no"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""


# Tool names whose process exits: the next call is sent once the gateway has
# seen the exit (sent sooner, it would race the exit and fail upstream-failed).
EXITS = ("close-stdout", "say-then-die")


def _exits_noticed(
    service: GatewayService,
) -> tuple[MemoryObjectSendStream[object], MemoryObjectReceiveStream[object]]:
    """One item each time the gateway notices an upstream exit (its pool's
    session-lost hook, wrapped): the test waits on that, not on a clock."""
    send, receive = anyio.create_memory_object_stream[object](math.inf)
    inner = service.pool.on_session_lost

    async def lost(session: Any) -> None:
        send.send_nowait(session)
        if inner is not None:
            await inner(session)

    service.pool.on_session_lost = lost
    return send, receive


async def _stdio_gateway_call(*names: str) -> list[wire.Message]:
    """Each named tools/call, in turn, through a gateway over a real process."""
    cfg = Config(
        command=(sys.executable, "-c", STDIO_SERVER),
        upstream_era="legacy",
        request_timeout=5,
        restart_backoff_initial=0.01,
        upstream_exit_grace=0.5,
    )
    replies: list[wire.Message] = []
    async with in_process_service(cfg) as c:
        noticed, exits = _exits_noticed(c.service)
        async with noticed, exits:
            for n, name in enumerate(names):
                meta = {era.PROTOCOL_VERSION: "2026-07-28", era.CLIENT_CAPABILITIES: {}}
                msg = wire.request(n, "tools/call", {"name": name, "_meta": meta})
                await c.send(msg)
                replies.append(await c.next(timeout=8))
                if name in EXITS:
                    # Bounded: the exit is seen within the 5 s stdout-closed bound.
                    with anyio.fail_after(8):
                        await exits.receive()
    return replies


async def test_server_that_closes_stdout_mid_call_fails_it_and_is_replaced() -> None:
    """A server that closes its stdout in the middle of a call: the call fails
    with upstream-failed (bounded: the gateway waits at most 5 s for the exit
    that a closed stdout announces), and the next call gets a new process."""
    closed, after = await _stdio_gateway_call("close-stdout", "again")
    assert closed["error"]["data"]["reason"] == "upstream-failed"
    assert after["result"]["content"][0]["text"] == "again"


async def test_server_that_writes_then_dies_is_heard_to_the_end() -> None:
    """A server that writes its reply (and a junk line) then dies: the reply
    still reaches the client, the junk is skipped, and the next call starts
    a new process."""
    last, after = await _stdio_gateway_call("say-then-die", "again")
    assert last["result"]["content"][0]["text"] == "last words"
    assert after["result"]["content"][0]["text"] == "again"


def test_http_front_reads_tool_annotations_only_from_well_formed_tools() -> None:
    """The HTTP front learns x-mcp-header annotations from tools/list results
    (2026-07-28 "Custom Headers from Tool Parameters"): results of the wrong
    shape are passed on, and teach it nothing."""
    front = HttpFront(GatewayService(Config(command=("x",), state_key="k" * 32)), Metrics())
    tools: list[Any] = [
        1,
        None,
        {"name": 5},
        {"name": "t", "inputSchema": "schema"},
        {"name": "u", "inputSchema": {"properties": {"a": {"x-mcp-header": ["H"]}, "b": 5}}},
        {"name": "v", "inputSchema": {"properties": {"a": {"x-mcp-header": "Region"}}}},
    ]
    results: list[object] = [{"tools": "not a list"}, {"tools": tools}, 5, None, []]
    for result in results:
        front._tools.observe({"jsonrpc": "2.0", "id": 1, "result": result})
    # "u" breaks "Schema Extension" (a name that is no token): no headers are
    # expected for it, as a conforming client excludes it.
    assert front._tools.known() == {"t": (), "v": (http_binding.HeaderParam(("a",), "Region"),)}


@pytest.mark.parametrize("bad_id", ["true", "{id}.0", "[{id}]"])
async def test_reply_whose_id_is_no_request_id_answers_no_call(bad_id: str) -> None:
    """JSON-RPC ids are strings or integers: a reply with `"id": true` or
    `1.0` (which a dict lookup takes for 1) answers no call of the gateway's."""
    lines = (
        '{"jsonrpc": "2.0", "id": '
        + bad_id
        + ', "result": {"content": [{"type": "text", "text": "forged"}]}}',
        '{"jsonrpc": "2.0", "id": {id}, "result": {"content": [{"type": "text", "text": "real"}]}}',
    )
    async with gateway(legacy_server({"tools/call": raw_tool(*lines)})) as c:
        reply = await c.call("tools/call", {"name": "x"}, timeout=2)
    assert reply["result"]["content"][0]["text"] == "real"


async def test_server_request_nested_to_the_limit_still_reaches_a_modern_client() -> None:
    """The limit leaves room for the gateway's own wrapping: a server request
    nested exactly MAX_DEPTH levels becomes an input_required (its params 3
    levels deeper) that still encodes for the client."""
    schema = {"a": nested(MAX_DEPTH - 3)}  # message, params, requestedSchema

    async def asks(server: ScriptedServer, msg: wire.Message) -> None:
        request = wire.request(
            "deep-ask", "elicitation/create", {"message": "m", "requestedSchema": schema}
        )
        await server.emit(request)

    async with gateway(legacy_server({"tools/call": asks}), encode=True) as c:
        caps: dict[str, Any] = {"elicitation": {"form": {}}}
        reply = await c.call("tools/call", {"name": "x", "_meta": {era.CLIENT_CAPABILITIES: caps}})
    (request,) = reply["result"]["inputRequests"].values()
    assert request["params"]["requestedSchema"] == schema


@on_mock_clock
async def test_a_flood_of_server_requests_is_bounded() -> None:
    """Each server request may wait request_timeout for a client's answer: a
    server that asks without end would pile up tasks and forwarded requests.
    Beyond max_inflight_per_client at once, the server hears -32603 at once;
    the rest are served (here: the client never answers, so they time out),
    and nothing stays held."""
    seen = Recorder()

    async def flood(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        asks = b"".join(
            orjson.dumps(wire.request(f"srv-{n}", "roots/list")) + b"\n" for n in range(40)
        )
        await server.emit_raw(asks)
        return {"content": []}

    behaviour = legacy_server({"tools/call": flood}, log=seen)
    async with gateway(behaviour, max_inflight_per_client=16, request_timeout=0.3) as c:
        await c.initialize({"roots": {}})
        reply = await c.call("tools/call", {"name": "f"}, modern=False)
        answers = [await seen.wait_for_reply(f"srv-{n}") for n in range(40)]
        await wait_tables_empty(c.service, [c.link], 2)
    assert reply["result"]["content"] == []
    over = [a for a in answers if "Too many requests in progress" in a["error"]["message"]]
    assert len(over) == 24
    assert all(a["error"]["code"] == wire.INTERNAL_ERROR for a in answers)


async def test_a_flood_of_asks_during_one_bridged_call_is_bounded() -> None:
    """One input_required carries every pending server request of a bridged
    call: beyond 64 at once, the server hears -32603 instead of the client
    getting an answer of unbounded size."""
    seen = Recorder()

    async def flood(server: ScriptedServer, msg: wire.Message) -> None:
        ask = {"message": "m", "requestedSchema": {"type": "object"}}
        asks = b"".join(
            orjson.dumps(wire.request(f"srv-{n}", "elicitation/create", ask)) + b"\n"
            for n in range(100)
        )
        await server.emit_raw(asks)

    async with gateway(legacy_server({"tools/call": flood}, log=seen), state_key="k" * 32) as c:
        caps: dict[str, Any] = {"elicitation": {"form": {}}}
        reply = await c.call("tools/call", {"name": "f", "_meta": {era.CLIENT_CAPABILITIES: caps}})
        refused = [await seen.wait_for_reply(f"srv-{n}") for n in range(64, 100)]
    assert len(reply["result"]["inputRequests"]) == 64
    assert all("Too many requests for client input" in r["error"]["message"] for r in refused)
