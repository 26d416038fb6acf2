"""The runtime over scripted upstreams: every path, supervision, bad peers.

Each test names the spec section or DESIGN rule it checks."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway import era, wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.core.routing import Forward, LegacyClientSession, Shape
from gateway.core.session_choice import SessionKey
from gateway.runtime.legacy_input import LegacyInputLoop
from gateway.runtime.upstream_session import UpstreamSession
from tests.mock_clock import on_mock_clock
from tests.scripted import Recorder, ScriptedServer, gateway, legacy_server, modern_server

pytestmark = pytest.mark.anyio


async def echo(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": msg["params"]["arguments"]["text"]}]}


async def silent(server: ScriptedServer, msg: wire.Message) -> None:
    return None


# -- modern client → legacy server (DESIGN §5.1) ------------------------------


async def test_modern_call_reaches_legacy_server_translated() -> None:
    seen: list[wire.Message] = []
    async with gateway(legacy_server({"tools/call": echo}, log=seen)) as c:
        reply = await c.call(
            "tools/call",
            {"name": "echo", "arguments": {"text": "hi"}, "_meta": {"com.example/k": 1}},
        )
    assert reply["id"] == 1
    result = reply["result"]
    assert result["resultType"] == "complete"
    assert result["content"][0]["text"] == "hi"
    assert result["_meta"][era.SERVER_INFO]["name"] == "scripted-legacy"
    upstream = next(m for m in seen if m.get("method") == "tools/call")
    # Protocol keys gone, foreign keys kept, a gateway id on the upstream request.
    assert upstream["params"]["_meta"] == {"com.example/k": 1}
    assert upstream["id"] != 1 or len(seen) == 1


async def test_discover_needs_no_upstream_round_trip() -> None:
    seen: list[wire.Message] = []
    async with gateway(legacy_server(log=seen)) as c:
        reply = await c.call("server/discover")
    # The only discover upstream is the gateway's own probe.
    assert [m["method"] for m in seen if "id" in m] == ["server/discover", "initialize"]
    assert reply["result"]["supportedVersions"] == ["2026-07-28"]


async def test_progress_reaches_the_client_under_its_own_token() -> None:
    async def with_progress(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        token = msg["params"]["_meta"]["progressToken"]
        await server.emit(
            wire.notification(
                "notifications/progress", {"progressToken": token, "progress": 1, "total": 2}
            )
        )
        return {"content": []}

    async with gateway(legacy_server({"tools/call": with_progress})) as c:
        await c.send(
            wire.request(
                7,
                "tools/call",
                {
                    "name": "p",
                    "_meta": {
                        **{era.PROTOCOL_VERSION: "2026-07-28", era.CLIENT_CAPABILITIES: {}},
                        "progressToken": "mine",
                    },
                },
            )
        )
        progress = await c.next()
        final = await c.next()
    assert progress["method"] == "notifications/progress"
    assert progress["params"]["progressToken"] == "mine"
    assert final["id"] == 7 and "result" in final


async def test_cancel_reaches_upstream_with_upstream_id_and_no_reply_follows() -> None:
    seen = Recorder()
    async with gateway(legacy_server({"tools/call": silent}, log=seen)) as c:
        await c.send(
            wire.request(
                "c1",
                "tools/call",
                {
                    "name": "slow",
                    "_meta": {era.PROTOCOL_VERSION: "2026-07-28", era.CLIENT_CAPABILITIES: {}},
                },
            )
        )
        upstream_id = (await seen.wait_for("tools/call"))["id"]
        await c.send(wire.notification("notifications/cancelled", {"requestId": "c1"}))
        cancel = await seen.wait_for("notifications/cancelled")
        assert cancel["params"]["requestId"] == upstream_id
        # Nothing is sent back for a cancelled request (2026-07-28 "Cancellation").
        with pytest.raises(TimeoutError):
            await c.next(timeout=0.2)
        assert not c.link.inflight


async def test_upstream_timeout_is_a_clear_error_and_cancels_upstream() -> None:
    seen: list[wire.Message] = []
    async with gateway(legacy_server({"tools/call": silent}, log=seen), request_timeout=0.2) as c:
        reply = await c.call("tools/call", {"name": "slow"})
    assert reply["error"]["data"]["reason"] == "upstream-timeout"
    assert any(m.get("method") == "notifications/cancelled" for m in seen)


async def test_crash_mid_call_fails_the_call_then_restarts() -> None:
    async def crash(server: ScriptedServer, msg: wire.Message) -> None:
        if msg["params"]["name"] == "crash":
            server.die()
            return None
        return {"content": []}  # type: ignore[return-value]

    async with gateway(legacy_server({"tools/call": crash})) as c:
        reply = await c.call("tools/call", {"name": "crash"})
        assert reply["error"]["code"] == wire.INTERNAL_ERROR
        assert reply["error"]["data"]["reason"] == "upstream-failed"
        assert "exited" in reply["error"]["message"]
        again = await c.call("tools/call", {"name": "fine"})
        assert again["result"]["resultType"] == "complete"
        assert len(c.upstream.spawned) == 2


async def test_resource_not_found_code_is_modernised() -> None:
    async def missing(server: ScriptedServer, msg: wire.Message) -> wire.Message:
        return wire.error_response(0, -32002, "Resource not found", {"uri": "x://y"})

    async with gateway(legacy_server({"resources/read": missing})) as c:
        reply = await c.call("resources/read", {"uri": "x://y"})
    assert reply["error"] == {
        "code": -32602,
        "message": "Resource not found",
        "data": {"uri": "x://y"},
    }


async def test_log_level_is_set_upstream_and_filtered_per_request() -> None:
    seen: list[wire.Message] = []

    async def noisy(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        for level in ("debug", "info", "error"):
            await server.emit(
                wire.notification("notifications/message", {"level": level, "data": level})
            )
        return {"content": []}

    async def set_level(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        return {}

    behaviour = legacy_server(
        {"tools/call": noisy, "logging/setLevel": set_level},
        capabilities={"tools": {}, "logging": {}},
        log=seen,
    )
    async with gateway(behaviour) as c:
        await c.send(
            wire.request(
                1,
                "tools/call",
                {
                    "name": "n",
                    "_meta": {
                        era.PROTOCOL_VERSION: "2026-07-28",
                        era.CLIENT_CAPABILITIES: {},
                        era.LOG_LEVEL: "info",
                    },
                },
            )
        )
        got = [await c.next() for _ in range(3)]
        # A request that asked for no level gets no log messages (2026-07-28 "Logging").
        await c.send(
            wire.request(
                2,
                "tools/call",
                {
                    "name": "n",
                    "_meta": {era.PROTOCOL_VERSION: "2026-07-28", era.CLIENT_CAPABILITIES: {}},
                },
            )
        )
        second = await c.next()
    assert [m["params"]["level"] for m in got[:2]] == ["info", "error"]
    assert got[2]["id"] == 1
    assert second["id"] == 2
    levels = [m["params"]["level"] for m in seen if m.get("method") == "logging/setLevel"]
    assert levels == ["info"]
    upstream_call = next(m for m in seen if m.get("method") == "tools/call")
    assert "_meta" not in upstream_call["params"]


async def test_server_ping_is_answered_by_the_gateway() -> None:
    async def pinging(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        reply = await server.ask("ping")
        return {"content": [{"type": "text", "text": str(reply)}]}

    async with gateway(legacy_server({"tools/call": pinging})) as c:
        reply = await c.call("tools/call", {"name": "p"})
    assert "'id': 'srv-1', 'result': {}" in reply["result"]["content"][0]["text"]


# -- probe (DESIGN §4, 2026-07-28 stdio "Backward Compatibility") ---------------


async def test_silent_probe_falls_back_to_initialize_and_ignores_the_late_reply() -> None:
    async def slow_to_refuse(server: ScriptedServer) -> None:
        discover = await server.recv()
        assert discover["method"] == "server/discover"
        init = await server.recv()  # the gateway gave up waiting: it cancels, then moves on
        if init["method"] == "notifications/cancelled":
            assert init["params"]["requestId"] == discover["id"]
            init = await server.recv()
        await server.emit(wire.error_response(discover["id"], -32601, "late"))
        await server.emit(
            wire.result_response(
                init["id"],
                {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "slow", "version": "1"},
                },
            )
        )
        await server.recv()  # initialized
        call = await server.recv()
        await server.emit(wire.result_response(call["id"], {"content": []}))
        await anyio.sleep_forever()

    async with gateway(slow_to_refuse, probe_timeout=0.1) as c:
        reply = await c.call("tools/call", {"name": "x"})
        assert c.service.pool.era is era.Era.LEGACY
        assert len(c.upstream.spawned) == 1
    assert reply["result"]["resultType"] == "complete"


async def test_server_dying_in_the_probe_is_restarted_as_legacy() -> None:
    spawned = 0
    inner = legacy_server({"tools/call": echo})

    async def dies_first(server: ScriptedServer) -> None:
        nonlocal spawned
        spawned += 1
        if spawned == 1:
            await server.recv()
            server.die()
            return
        await inner(server)

    async with gateway(dies_first) as c:
        reply = await c.call("tools/call", {"name": "echo", "arguments": {"text": "ok"}})
        assert c.service.pool.era is era.Era.LEGACY
    assert reply["result"]["content"][0]["text"] == "ok"


async def test_pinned_legacy_skips_the_probe() -> None:
    seen: list[wire.Message] = []
    async with gateway(legacy_server(log=seen), upstream_era="legacy") as c:
        await c.call("server/discover")
    assert seen[0]["method"] == "initialize"


# -- legacy client → modern server (DESIGN §5.2) -------------------------------


async def test_legacy_client_reaches_modern_server() -> None:
    seen: list[wire.Message] = []

    async def tool(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        return {
            "content": [{"type": "text", "text": "m"}],
            "_meta": {era.SERVER_INFO: {"name": "x"}},
        }

    async with gateway(
        modern_server({"tools/call": tool}, capabilities={"tools": {}, "logging": {}}, log=seen)
    ) as c:
        init = await c.initialize({"roots": {"listChanged": True}}, version="2025-06-18")
        assert (await c.call("ping", modern=False))["result"] == {}
        assert (await c.call("logging/setLevel", {"level": "debug"}, modern=False))["result"] == {}
        reply = await c.call("tools/call", {"name": "t"}, modern=False)
    assert init["result"]["protocolVersion"] == "2025-06-18"
    assert init["result"]["serverInfo"] == {"name": "scripted-modern", "version": "2"}
    assert reply["result"] == {"content": [{"type": "text", "text": "m"}]}
    call = next(m for m in seen if m.get("method") == "tools/call")
    meta = call["params"]["_meta"]
    assert meta[era.PROTOCOL_VERSION] == "2026-07-28"
    assert meta[era.CLIENT_CAPABILITIES] == {"roots": {}}
    assert meta[era.CLIENT_INFO]["name"] == "legacy-test-client"
    assert meta[era.LOG_LEVEL] == "debug"
    # Nothing of the client's handshake or the removed methods reached the
    # modern server: its one initialize is the gateway's legacy check
    # (2026-07-28 "Dual-era"), refused, so the server is modern-only.
    assert {m.get("method") for m in seen} == {"server/discover", "initialize", "tools/call"}
    (checked,) = [m for m in seen if m.get("method") == "initialize"]
    assert checked["params"]["clientInfo"]["name"] == "mcp-era-gateway"


async def test_unsupported_version_upstream_rediscovers_and_retries_once() -> None:
    calls = 0

    async def picky(server: ScriptedServer, msg: wire.Message) -> dict[str, Any] | wire.Message:
        nonlocal calls
        calls += 1
        if calls == 1:
            return wire.error_response(
                0,
                -32022,
                "Unsupported protocol version",
                {"supported": ["2026-07-28"], "requested": "2026-07-28"},
            )
        return {"content": []}

    async with gateway(modern_server({"tools/call": picky})) as c:
        await c.initialize()
        reply = await c.call("tools/call", {"name": "t"}, modern=False)
    assert calls == 2 and reply["result"] == {"content": []}


async def test_modern_to_modern_passthrough() -> None:
    async with gateway(modern_server({"tools/call": echo})) as c:
        reply = await c.call("tools/call", {"name": "echo", "arguments": {"text": "x"}})
        disc = await c.call("server/discover")
    assert reply["result"]["resultType"] == "complete"
    assert disc["result"]["cacheScope"] == "public"


# -- legacy client → legacy server (DESIGN §5.3) -------------------------------


async def test_legacy_server_request_goes_to_the_legacy_client_that_declared_it() -> None:
    async def asks(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        answer = await server.ask("elicitation/create", {"message": "name?", "requestedSchema": {}})
        return {
            "content": [{"type": "text", "text": str(answer.get("result") or answer.get("error"))}]
        }

    async with gateway(legacy_server({"tools/call": asks})) as c:
        await c.initialize({"elicitation": {}})
        await c.send(wire.request(5, "tools/call", {"name": "ask"}))
        asked = await c.next()
        assert asked["method"] == "elicitation/create"
        await c.send(wire.result_response(asked["id"], {"action": "accept", "content": {"n": 1}}))
        done = await c.next()
    assert done["id"] == 5
    assert "accept" in done["result"]["content"][0]["text"]


async def test_undeclared_feature_request_gets_an_error_upstream() -> None:
    async def asks(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        answer = await server.ask("sampling/createMessage", {"messages": [], "maxTokens": 5})
        return {"content": [{"type": "text", "text": str(answer["error"]["message"])}]}

    async with gateway(legacy_server({"tools/call": asks})) as c:
        await c.initialize({})
        reply = await c.call("tools/call", {"name": "ask"}, modern=False)
    assert "did not declare the sampling capability" in reply["result"]["content"][0]["text"]


# -- bad input -------------------------------------------------------------------


@on_mock_clock
async def test_duplicate_in_flight_id_is_refused_without_disturbing_the_first() -> None:
    async def slow_echo(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        await anyio.sleep(0.05)
        return await echo(server, msg)

    meta = {era.PROTOCOL_VERSION: "2026-07-28", era.CLIENT_CAPABILITIES: {}}
    async with gateway(legacy_server({"tools/call": slow_echo})) as c:
        msg = wire.request(
            1, "tools/call", {"name": "e", "arguments": {"text": "a"}, "_meta": meta}
        )
        await c.send(msg)
        await c.send(msg)
        first = await c.next()
        second = await c.next()
    assert first["error"]["code"] == wire.INVALID_REQUEST
    assert second["result"]["content"][0]["text"] == "a"


async def test_upstream_that_never_starts_gives_a_clear_error() -> None:
    async def refuses(server: ScriptedServer) -> None:
        while True:
            msg = await server.recv()
            if "id" in msg:
                await server.emit(wire.error_response(msg["id"], -32603, "broken"))

    async with gateway(refuses) as c:
        reply = await c.call("tools/list")
    assert reply["error"]["data"]["reason"] == "upstream-unavailable"
    assert "initialize failed" in reply["error"]["message"]


# -- sessions (DESIGN §5.1.1) and re-probing (DESIGN §4) ----------------------------


async def test_max_sessions_keys_processes_by_declared_features() -> None:
    seen: list[wire.Message] = []
    async with gateway(legacy_server({"tools/call": echo}, log=seen), max_sessions=3) as c:
        args = {"name": "echo", "arguments": {"text": "x"}}
        await c.call(
            "tools/call", {**args, "_meta": {era.CLIENT_CAPABILITIES: {"elicitation": {}}}}
        )
        await c.call("tools/call", args)
        await c.call("tools/call", args)
    inits = [m["params"]["capabilities"] for m in seen if m.get("method") == "initialize"]
    # The probe's process declares everything; then one per distinct feature set.
    assert inits == [
        {"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {"listChanged": True}},
        {"elicitation": {"form": {}, "url": {}}},
        {},
    ]
    assert len(c.upstream.spawned) == 3


async def test_one_shared_session_by_default() -> None:
    async with gateway(legacy_server({"tools/call": echo})) as c:
        args = {"name": "echo", "arguments": {"text": "x"}}
        await c.call("tools/call", {**args, "_meta": {era.CLIENT_CAPABILITIES: {"sampling": {}}}})
        await c.call("tools/call", args)
    assert len(c.upstream.spawned) == 1


async def test_the_first_principal_takes_over_the_unused_start_up_session() -> None:
    """With bearer tokens no client is "local": the first principal's request
    uses the process started at start-up instead of replacing it; another
    principal never shares it (DESIGN §7) and gets a process of its own."""
    seen: list[wire.Message] = []
    async with gateway(legacy_server({"tools/call": echo}, log=seen)) as c:
        args = {"name": "echo", "arguments": {"text": "x"}}
        c.link.principal = "ci"
        first = await c.call("tools/call", args)
        again = await c.call("tools/call", args)
        assert len(c.upstream.spawned) == 1
        c.link.principal = "other"
        other = await c.call("tools/call", args)
        assert len(c.upstream.spawned) == 2
    assert all("result" in r for r in (first, again, other))
    assert len([m for m in seen if m.get("method") == "initialize"]) == 2


@on_mock_clock
async def test_server_that_changes_era_across_a_restart_is_probed_again() -> None:
    legacy = legacy_server({"tools/call": echo})
    modern = modern_server({"tools/call": echo})
    generation = 0

    async def upgraded_after_crash(server: ScriptedServer) -> None:
        nonlocal generation
        generation += 1
        if generation == 1:
            await legacy(server)
        else:
            await modern(server)

    async with gateway(upgraded_after_crash) as c:
        assert c.service.pool.era is era.Era.LEGACY
        c.upstream.spawned[0].die()
        await anyio.sleep(0.05)
        reply = await c.call("tools/call", {"name": "echo", "arguments": {"text": "again"}})
        assert c.service.pool.era_name == "modern"
    assert reply["result"]["content"][0]["text"] == "again"


async def test_an_upstream_down_at_start_is_tried_again_later() -> None:
    # DESIGN §4: an outage is never an era verdict; a sidecar started before
    # its upstream recovers on the next request after the backoff.
    attempts = 0
    inner = legacy_server({"tools/call": echo})

    async def down_at_first(server: ScriptedServer) -> None:
        nonlocal attempts
        attempts += 1
        if attempts <= 2:  # the first process dies in the probe, its restart too
            server.die()
            return
        await inner(server)

    async with gateway(down_at_first, restart_backoff_initial=0.01) as c:
        first = await c.call("tools/call", {"name": "echo", "arguments": {"text": "a"}})
        await anyio.sleep(0.3)  # past the backoff
        second = await c.call("tools/call", {"name": "echo", "arguments": {"text": "b"}})
    assert first["error"]["data"]["reason"] == "upstream-unavailable"
    assert second["result"]["content"][0]["text"] == "b"


async def test_cache_hints_reflect_whether_the_server_notifies_changes() -> None:
    async def listing(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        return {"tools": [], "prompts": []}

    caps = {"tools": {"listChanged": True}, "prompts": {}}
    handlers = {"tools/list": listing, "prompts/list": listing}
    async with gateway(legacy_server(handlers, capabilities=caps), cache_ttl_ms={}) as c:
        tools = await c.call("tools/list")
        prompts = await c.call("prompts/list")
    # 2026-07-28 "Caching", "Interaction with Notifications".
    assert tools["result"]["ttlMs"] == 60_000
    assert prompts["result"]["ttlMs"] == 0


# -- what the gateway answers in the server's stead carries the client's id ------------
# Issue #11: "Replies are built with a placeholder id 0 and given the real id
# later (upstream_session.py, legacy_input.py, service.py) — a contract written
# nowhere." The client's id now goes down with the call.


class _Pipe:
    """An upstream channel that takes what is written and never answers."""

    def __init__(self) -> None:
        self.sent: list[wire.Message] = []

    async def send(self, msg: wire.Message) -> None:
        self.sent.append(msg)

    def send_nowait(self, msg: wire.Message) -> None:
        self.sent.append(msg)

    async def receive_batch(self) -> list[wire.Message]:
        await anyio.sleep_forever()
        return []


async def test_a_call_the_upstream_leaves_unanswered_fails_under_the_clients_id() -> None:
    """A fast-path call whose server goes away is failed by the session with
    the gateway's error (`upstream-failed`) under the client's own request
    id, not a placeholder the caller must remember to replace."""
    session = UpstreamSession(_Pipe(), SessionKey("local", frozenset()), "test")
    got: list[wire.Message] = []
    upstream_id = session.start_call(
        "tools/call", {"name": "t"}, got.append, timeout=5, client_id="client-7"
    )
    session.close("the server exited")
    assert upstream_id not in session.pending
    (reply,) = got
    assert reply["id"] == "client-7"
    assert reply["error"]["data"]["reason"] == "upstream-failed"


async def test_the_legacy_input_loop_answers_under_the_clients_id() -> None:
    """DESIGN §5.2.5: a modern server's malformed input_required ends a legacy
    client's call with the gateway's error — under the client's id."""

    async def never(*args: object) -> wire.Message:
        raise AssertionError("nothing goes upstream for a malformed input_required")

    link = ClientLink(send=_Pipe().send, send_nowait=_Pipe().send_nowait)
    link.session = LegacyClientSession("2025-11-25", {"elicitation": {}}, None)
    loop = LegacyInputLoop(Config(command=("x",)), never)
    decision = Forward("tools/call", {"name": "t"}, Shape.TO_LEGACY, era.Era.LEGACY)
    session = UpstreamSession(_Pipe(), SessionKey("*", frozenset()), "test")
    bad = wire.result_response(3, {"resultType": "input_required", "inputRequests": [1]})
    reply = await loop.complete(link, decision, session, bad, "client-9")
    assert reply["id"] == "client-9"
    assert reply["error"]["data"]["reason"] == "upstream-malformed"
