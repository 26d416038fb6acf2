"""Every lease and slot on the upstream side is released on every path.

The issue: "Every counter, lease and slot is released on every path (try/
finally or a context manager), proved by tests that inject a failure at each
step." Each test runs one kind of call (the fast path, a bridged MRTR call, a
legacy client's leased call, a legacy client's input loop against a modern
server) and breaks it at one step: the server is silent (timeout), exits,
answers garbage, asks for input and then exits, cannot be written to, or the
client cancels or goes away. Afterwards the tables — pending upstream calls, progress routes, the
session lease, parked calls, in-flight calls, forwarded server requests —
must be empty, and a plain call must still work.

The tests run on trio's mock clock (tests/mock_clock.py): the timers that end
parked calls and forwarded server requests fire without wall-clock waits,
and wait_tables_empty wakes on the task step that empties the last table."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway import era, wire
from gateway.runtime.upstream_session import WIND_DOWN
from tests.mock_clock import on_mock_clock
from tests.scripted import (
    Client,
    Recorder,
    ScriptedServer,
    gateway,
    legacy_server,
    modern_server,
    tables,
    wait_tables_empty,
)

REQUEST_TIMEOUT = 0.3
STATE_TTL = 0.3
# Parked calls expire after STATE_TTL; a closed call is cancelled upstream
# WIND_DOWN later if the server does not end it by itself.
BOUND = STATE_TTL + 3 * REQUEST_TIMEOUT + WIND_DOWN + 1
ELICIT = {"message": "name?", "requestedSchema": {"type": "object"}}


async def tool(server: ScriptedServer, msg: wire.Message) -> dict[str, Any] | wire.Message | None:
    """Each tool name is one step at which the call breaks."""
    name = msg["params"]["name"]
    if name == "ok":
        return {"content": [{"type": "text", "text": "ok"}]}
    if name == "die":
        server.die()
    elif name == "bad":
        await server.emit_raw(b'{"jsonrpc": "2.0", "id": %d, "result": 5}\n' % msg["id"])
    elif name in ("ask", "ask-die"):
        await server.emit(wire.request(f"srv-{msg['id']}", "elicitation/create", ELICIT))
        if name == "ask-die":
            server.die()
    elif name == "progress-die":
        token = msg["params"]["_meta"]["progressToken"]
        note = {"progressToken": token, "progress": 1}
        await server.emit(wire.notification("notifications/progress", note))
        server.die()
    return None  # "silent" and the rest: no reply


def _meta(caps: dict[str, Any]) -> dict[str, Any]:
    return {
        era.PROTOCOL_VERSION: "2026-07-28",
        era.CLIENT_CAPABILITIES: caps,
        "progressToken": "p",
    }


async def _start(c: Client, kind: str) -> dict[str, Any]:
    """Prepare the client for `kind`; the params of its calls."""
    if kind == "legacy-leased":
        # A second client makes the legacy client's calls exclusive (DESIGN §5.1.6).
        c.open_link()
        await c.initialize({"elicitation": {}})
        return {"_meta": {"progressToken": "p"}}
    caps: dict[str, Any] = {"elicitation": {"form": {}}} if kind == "mrtr" else {}
    return {"_meta": _meta(caps)}


KINDS = ["fast", "mrtr", "legacy-leased"]
FAILURES = [
    "silent",
    "die",
    "bad",
    "ask",
    "ask-die",
    "progress-die",
    "cancel",
    "client-gone",
    "write-fails",
]


@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("kind", KINDS)
@on_mock_clock
async def test_a_call_broken_at_any_step_leaves_nothing_held(kind: str, failure: str) -> None:
    seen = Recorder()
    behaviour = legacy_server({"tools/call": tool}, log=seen)
    async with gateway(
        behaviour, request_timeout=REQUEST_TIMEOUT, state_ttl=STATE_TTL, state_key="k" * 32
    ) as c:
        base = await _start(c, kind)
        name = "silent" if failure in ("cancel", "client-gone", "write-fails") else failure
        params = {"name": name, "arguments": {}, **base}
        server = c.upstream.spawned[-1]
        server.fail_writes = failure == "write-fails"
        await c.send(wire.request("x", "tools/call", params))
        if failure == "write-fails":
            failed = await _answer_of(c, "x")
            assert failed["error"]["data"]["reason"] == "upstream-failed", failed
            server.fail_writes = False
        else:
            await seen.wait_for("tools/call")
        if failure == "cancel":
            await c.send(wire.notification("notifications/cancelled", {"requestId": "x"}))
        elif failure == "client-gone":
            c.service.drop_link(c.link)
        if failure not in ("cancel", "client-gone", "write-fails"):
            await _answer_of(c, "x")
        await wait_tables_empty(c.service, [c.link], BOUND)
        if failure != "client-gone":
            after = await c.call(
                "tools/call",
                {"name": "ok", "arguments": {}, **base},
                modern=kind != "legacy-leased",
            )
            assert after["result"]["content"][0]["text"] == "ok", after
            assert not any(tables(c.service, [c.link]).values())


async def _answer_of(c: Client, msg_id: str) -> wire.Message:
    """The reply to `msg_id` (a forwarded server request is left unanswered)."""
    with anyio.fail_after(BOUND):
        while True:  # skips notifications and server requests
            msg = await c.inbox.receive()
            if "method" not in msg and msg.get("id") == msg_id:
                return msg


@on_mock_clock
async def test_a_cancelled_bridged_call_releases_the_session() -> None:
    """2026-07-28 "Cancellation": a cancelled request's work stops. On main a
    bridged MRTR call whose client cancelled while it waited went on running
    upstream, holding the legacy session's exclusive lease until its ceiling
    (request_timeout + state_ttl x max_rounds: 40 minutes by default), so
    every other call that may need client input waited and failed
    "session-busy". Now the call is closed: the server hears that no answer
    will come, then (if still running WIND_DOWN later) the cancellation, and
    the lease is freed."""
    seen = Recorder()
    behaviour = legacy_server({"tools/call": tool}, log=seen)
    async with gateway(behaviour, request_timeout=5, state_ttl=60) as c:
        caps: dict[str, Any] = {"elicitation": {"form": {}}}
        await c.send(wire.request("x", "tools/call", {"name": "silent", "_meta": _meta(caps)}))
        upstream = await seen.wait_for("tools/call")
        await c.send(wire.notification("notifications/cancelled", {"requestId": "x"}))
        cancel = await seen.wait_for("notifications/cancelled")
        await wait_tables_empty(c.service, [c.link], 1)
        again = await c.call("tools/call", {"name": "ok", "_meta": _meta(caps)}, timeout=2)
    assert cancel["params"]["requestId"] == upstream["id"]
    assert again["result"]["content"][0]["text"] == "ok"


@on_mock_clock
async def test_a_parked_call_whose_server_died_frees_its_slot() -> None:
    """A call parked for client input (hold mode) whose server exits cannot be
    continued: its slot (max_parked_calls) is freed at once rather than at
    state_ttl, and a retry still hears why the call ended."""
    seen = Recorder()
    behaviour = legacy_server({"tools/call": tool}, log=seen)
    async with gateway(behaviour, request_timeout=5, state_ttl=60, state_key="k" * 32) as c:
        caps: dict[str, Any] = {"elicitation": {"form": {}}}
        asked = await c.call("tools/call", {"name": "ask", "_meta": _meta(caps)}, timeout=2)
        assert asked["result"]["resultType"] == "input_required"
        assert len(c.service.bridge.held) == 1
        c.upstream.spawned[-1].die()
        await wait_tables_empty(c.service, [c.link], 1)
        retry = {
            "name": "ask",
            "_meta": _meta(caps),
            "requestState": asked["result"]["requestState"],
            "inputResponses": {
                key: {"action": "accept", "content": {}} for key in asked["result"]["inputRequests"]
            },
        }
        answer = await c.call("tools/call", retry, timeout=2)
    assert answer["error"]["data"]["reason"] == "upstream-failed"
    assert not c.service.bridge.held


@on_mock_clock
async def test_legacy_client_input_loop_leaves_nothing_held_when_the_server_dies() -> None:
    """Legacy client → modern server (DESIGN §5.2.5): the server asks for
    input, the gateway asks the client, and the server exits meanwhile: the
    call fails, the forwarded request is withdrawn, nothing stays held."""

    async def asks(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        if msg["params"].get("inputResponses"):
            server.die()
            return {}
        return {
            "resultType": "input_required",
            "inputRequests": {"a": {"method": "elicitation/create", "params": ELICIT}},
            "requestState": "s",
        }

    async with gateway(modern_server({"tools/call": asks}), request_timeout=2) as c:
        await c.initialize({"elicitation": {}})
        await c.send(wire.request("x", "tools/call", {"name": "t"}))
        forwarded = await c.next()
        assert forwarded["method"] == "elicitation/create"
        await c.send(wire.result_response(forwarded["id"], {"action": "accept", "content": {}}))
        reply = await _answer_of(c, "x")
        await wait_tables_empty(c.service, [c.link], 1)
    assert reply["error"]["data"]["reason"] == "upstream-failed"


@pytest.mark.parametrize("kind", KINDS)
@on_mock_clock
async def test_a_server_request_whose_client_went_away_is_answered(kind: str) -> None:
    """A server request passed to a client (or parked for it) when that client
    goes away: the server still gets an answer (an error), rather than wait
    for one forever, and nothing stays held."""
    seen = Recorder()
    behaviour = legacy_server({"tools/call": tool}, log=seen)
    async with gateway(
        behaviour, request_timeout=REQUEST_TIMEOUT, state_ttl=STATE_TTL, state_key="k" * 32
    ) as c:
        base = await _start(c, kind)
        await c.send(wire.request("x", "tools/call", {"name": "ask", "arguments": {}, **base}))
        upstream = await seen.wait_for("tools/call")
        if kind == "legacy-leased":
            forwarded = await c.next()
            assert forwarded["method"] == "elicitation/create"
        c.service.drop_link(c.link)
        answer = await seen.wait_for_reply(f"srv-{upstream['id']}", timeout=BOUND)
        await wait_tables_empty(c.service, [c.link], BOUND)
    assert "error" in answer


@on_mock_clock
async def test_legacy_client_input_loop_ends_cleanly_when_the_client_goes_away() -> None:
    """Legacy client → modern server: the client goes away while the gateway
    waits for its answer to the server's input request. The call ends, no
    retry with an empty answer goes upstream, nothing stays held."""
    calls: list[wire.Message] = []

    async def asks(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        calls.append(msg)
        return {
            "resultType": "input_required",
            "inputRequests": {"a": {"method": "elicitation/create", "params": ELICIT}},
            "requestState": "s",
        }

    async with gateway(modern_server({"tools/call": asks}), request_timeout=2) as c:
        await c.initialize({"elicitation": {}})
        await c.send(wire.request("x", "tools/call", {"name": "t"}))
        forwarded = await c.next()
        assert forwarded["method"] == "elicitation/create"
        c.service.drop_link(c.link)
        await wait_tables_empty(c.service, [c.link], 1)
    assert len(calls) == 1


@on_mock_clock
async def test_the_wait_for_empty_tables_wakes_when_they_empty_and_fails_at_its_bound() -> None:
    """The harness the tests above rely on (issue #11: no polling with sleeps
    in tests): a parked call is held until state_ttl; wait_tables_empty wakes
    when it is gone (not at its bound), and a bound that ends first fails
    naming what is still held."""
    seen = Recorder()
    caps: dict[str, Any] = {"elicitation": {"form": {}}}
    for bound, state_ttl in ((60, 3), (1, 3)):
        async with gateway(
            legacy_server({"tools/call": tool}, log=seen),
            request_timeout=5,
            state_ttl=state_ttl,
            state_key="k" * 32,
        ) as c:
            asked = await c.call("tools/call", {"name": "ask", "_meta": _meta(caps)}, timeout=2)
            assert asked["result"]["resultType"] == "input_required"
            start = anyio.current_time()
            if bound > state_ttl:
                await wait_tables_empty(c.service, [c.link], bound)
                assert state_ttl <= anyio.current_time() - start < bound
            else:
                with pytest.raises(AssertionError, match=r"still held: \{'held'"):
                    await wait_tables_empty(c.service, [c.link], bound)
                assert anyio.current_time() - start == bound
