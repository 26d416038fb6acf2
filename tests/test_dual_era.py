"""Dual-era upstreams kept whole (issue 10; DESIGN §5.3; 2026-07-28
versioning "Dual-era"): the probe says dual, each client is served in its own
era, and the path a call took is visible."""

from __future__ import annotations

from typing import Any

import anyio
import structlog

from gateway import era, wire
from tests.inprocess import http_gateway
from tests.scripted import (
    MODERN_META,
    Client,
    ScriptedServer,
    dual_server,
    gateway,
    legacy_server,
    modern_server,
)

NO_BACK_CHANNEL = "this transport context has no back-channel for server-initiated requests"
PUSH_CAPS = {"tools": {}, "logging": {}, "resources": {"subscribe": True}}


async def push_tool(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    """A tool that asks its client push-style, as mcp 2.x's
    `ctx.session.create_message` / `ctx.elicit` do on a legacy session."""
    elicited = await server.ask(
        "elicitation/create",
        {"message": "Name?", "requestedSchema": {"type": "object", "properties": {}}},
    )
    sampled = await server.ask(
        "sampling/createMessage",
        {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5},
    )
    roots = await server.ask("roots/list")
    text = (
        f"{elicited['result']['content']['name']}|"
        f"{sampled['result']['content']['text']}|"
        f"{roots['result']['roots'][0]['uri']}"
    )
    return {"content": [{"type": "text", "text": text}]}


async def no_back_channel(server: ScriptedServer, msg: wire.Message) -> wire.Message:
    """mcp 2.x's answer when a modern request's tool pushes a server request."""
    return wire.error_response(0, wire.INTERNAL_ERROR, NO_BACK_CHANNEL)


async def hello(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "modern hello"}]}


async def ok(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {}


def push_server(seen: list[wire.Message] | None = None) -> Any:
    return dual_server(
        legacy_server(
            {
                "tools/call": push_tool,
                "logging/setLevel": ok,
                "resources/subscribe": ok,
                "resources/unsubscribe": ok,
            },
            capabilities=PUSH_CAPS,
            log=seen,
        ),
        modern_server({"tools/call": no_back_channel}, capabilities={"tools": {}}, log=seen),
    )


async def answer_pushes(c: Client, call_id: int) -> wire.Message:
    """Answer the server's requests as a legacy client does; return the call's reply."""
    answers: dict[str, dict[str, Any]] = {
        "elicitation/create": {"action": "accept", "content": {"name": "Ada"}},
        "sampling/createMessage": {
            "role": "assistant",
            "content": {"type": "text", "text": "sampled"},
            "model": "m",
        },
        "roots/list": {"roots": [{"uri": "file:///work", "name": "work"}]},
    }
    asked: list[str] = []
    while True:  # ends with the call's reply (Client.next bounds each wait)
        msg = await c.next()
        if "method" in msg and "id" in msg:
            asked.append(msg["method"])
            await c.send(wire.result_response(msg["id"], answers[msg["method"]]))
        elif msg.get("id") == call_id:
            msg["asked"] = asked
            return msg


LEGACY_CAPS: dict[str, Any] = {"elicitation": {}, "sampling": {}, "roots": {}}


async def test_probe_says_dual_and_keeps_the_legacy_check_session() -> None:
    """Issue 10 "Upstream classification reports three eras": over stdio a
    dual-era server gets the discover in one process and the legacy
    `initialize` in a second (mcp 2.x fixes a process's era by its first
    request); that second one is kept as the first legacy client's session."""
    async with gateway(push_server()) as c:
        pool = c.service.pool
        assert pool.era_name == "dual"
        report = pool.describe()
        assert report["era"] == "dual"
        assert report["modern"]["protocolVersion"] == "2026-07-28"
        assert report["modern"]["supportedVersions"] == ["2026-07-28"]
        assert report["legacy"]["protocolVersion"] == "2025-11-25"
        assert report["legacy"]["capabilities"] == PUSH_CAPS
        assert pool.probe_report["modern"] == "DiscoverResult"
        assert pool.probe_report["legacy"] == "InitializeResult 2025-11-25"
        assert [s.era for s in c.upstream.spawned] == ["modern", "legacy"]
        await c.initialize(LEGACY_CAPS)
        await c.send(wire.request(7, "tools/call", {"name": "push", "arguments": {}}))
        await answer_pushes(c, 7)
        # The start-up legacy session served the legacy client: no third process.
        assert len(c.upstream.spawned) == 2


async def test_probe_says_modern_for_a_modern_only_server_and_closes_the_check() -> None:
    """A modern-only server refuses the legacy `initialize` (-32022): modern,
    and the process that was asked is closed."""
    async with gateway(modern_server()) as c:
        assert c.service.pool.era_name == "modern"
        assert c.service.pool.legacy_side is None
        assert "initialize refused: -32022" in c.service.pool.probe_report["legacy"]
        checked = c.upstream.spawned[1]
        assert checked.closed
        assert c.service.pool.describe()["era"] == "modern"


async def test_probe_says_legacy_for_a_legacy_server() -> None:
    """A legacy server fails the discover: legacy, with no second process."""
    async with gateway(legacy_server()) as c:
        assert c.service.pool.era_name == "legacy"
        assert c.service.pool.describe()["era"] == "legacy"
        assert len(c.upstream.spawned) == 1


async def test_legacy_client_gets_push_style_server_requests_natively() -> None:
    """Issue 10: through the gateway a legacy client must get what it gets
    direct from a dual-era server: the tool's elicitation/create,
    sampling/createMessage and roots/list reach it as requests and its answers
    reach the server (today the call was translated onto the modern side and
    failed with "no back-channel for server-initiated requests")."""
    seen: list[wire.Message] = []
    async with gateway(push_server(seen)) as c:
        await c.initialize(LEGACY_CAPS)
        await c.send(wire.request(5, "tools/call", {"name": "push", "arguments": {}}))
        reply = await answer_pushes(c, 5)
    assert reply["asked"] == ["elicitation/create", "sampling/createMessage", "roots/list"]
    assert reply["result"]["content"][0]["text"] == "Ada|sampled|file:///work"
    # The call reached the server as a legacy call (no modern _meta added).
    call = next(m for m in seen if m.get("method") == "tools/call")
    assert era.PROTOCOL_VERSION not in (call["params"].get("_meta") or {})


async def test_legacy_clients_set_level_and_subscribe_reach_the_server() -> None:
    """Issue 10: "subscriptions and logging/setLevel are the server's own"
    for a legacy client of a dual-era server."""
    seen: list[wire.Message] = []
    async with gateway(push_server(seen)) as c:
        await c.initialize(LEGACY_CAPS)
        level = await c.call("logging/setLevel", {"level": "info"}, modern=False)
        sub = await c.call("resources/subscribe", {"uri": "file:///a"}, modern=False)
        assert level["result"] == {} and sub["result"] == {}
        await c.upstream.spawned[1].emit(
            wire.notification("notifications/resources/updated", {"uri": "file:///a"})
        )
        updated = await c.next()
    assert updated["method"] == "notifications/resources/updated"
    methods = [m.get("method") for m in seen]
    assert {"method": "logging/setLevel"}.items() <= next(
        m for m in seen if m.get("method") == "logging/setLevel"
    ).items()
    subscribe = next(m for m in seen if m.get("method") == "resources/subscribe")
    assert subscribe["params"] == {"uri": "file:///a"}
    assert "subscriptions/listen" not in methods


async def test_modern_client_is_served_modern_beside_a_legacy_client() -> None:
    """DESIGN §5.3: "a modern client is served modern" on the same gateway,
    while a legacy client's push-style call waits for its answer on its
    legacy session; a dual-era client (modern `_meta`) stays modern."""
    seen: list[wire.Message] = []
    async with gateway(push_server(seen)) as c:
        await c.initialize(LEGACY_CAPS)
        await c.send(wire.request(9, "tools/call", {"name": "push", "arguments": {}}))
        asked = await c.next()
        assert asked["method"] == "elicitation/create"
        modern, inbox = c.open_link(10)
        meta = {"_meta": MODERN_META}
        await c.service.handle_client_message(
            modern, wire.request(1, "tools/call", {"name": "push", **meta}), c.requests
        )
        with anyio.fail_after(5):
            modern_reply = await inbox.receive()
        accept = {"action": "accept", "content": {"name": "Ada"}}
        await c.send(wire.result_response(asked["id"], accept))
        legacy_reply = await answer_pushes(c, 9)
        assert c.service.pool.path_for(False) == "modern->modern(dual)"
    assert legacy_reply["result"]["content"][0]["text"] == "Ada|sampled|file:///work"
    # The modern client met the modern side (which, like mcp 2.x, cannot push).
    assert NO_BACK_CHANNEL in modern_reply["error"]["message"]
    calls = [m for m in seen if m.get("method") == "tools/call"]
    assert [era.is_modern(m) for m in calls] == [False, True]


async def test_two_clients_each_in_its_own_era_over_http() -> None:
    """DESIGN §5.3 with the HTTP front: a legacy and a modern client at once,
    each on its era's process, and /metrics labels the paths apart."""
    behaviour = dual_server(
        legacy_server({"tools/call": hello}), modern_server({"tools/call": hello})
    )
    async with http_gateway(behaviour) as g:
        init = await g.post(
            wire.request(
                1,
                "initialize",
                {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "legacy", "version": "1"},
                },
            )
        )
        sid = init.headers["mcp-session-id"]
        headers = {"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
        await g.post(wire.notification("notifications/initialized"), headers)
        legacy_call = await g.post(
            wire.request(2, "tools/call", {"name": "t", "arguments": {}}), headers
        )
        modern_call = await g.modern("tools/call", {"name": "t", "arguments": {}})
        ready = (await g.client.get("/readyz")).json()
        metrics = (await g.client.get("/metrics")).text
    assert legacy_call.status_code == 200 and modern_call.status_code == 200
    assert "resultType" not in _result(legacy_call)
    assert _result(modern_call)["resultType"] == "complete"
    assert ready["era"] == "dual"
    assert ready["versions"] == {"modern": "2026-07-28", "legacy": "2025-11-25"}
    assert 'path="legacy->legacy(dual)",method="tools/call"' in metrics
    assert 'path="modern->modern(dual)",method="tools/call"' in metrics


def _result(resp: Any) -> dict[str, Any]:
    text = resp.text
    if text.startswith("{"):
        body = resp.json()
    else:  # an SSE answer: the last data line holds the reply
        import orjson

        data = [line[5:] for line in text.splitlines() if line.startswith("data:")]
        body = orjson.loads(data[-1])
    result: dict[str, Any] = body["result"]
    return result


async def test_pinned_era_skips_the_other_and_serves_everyone_in_it() -> None:
    """Issue 10: `--upstream-era` still pins one era for everyone: pinned
    modern, there is no legacy check and a legacy client is translated."""
    async with gateway(push_server(), upstream_era="modern") as c:
        assert c.service.pool.era_name == "modern"
        assert len(c.upstream.spawned) == 1
        await c.initialize(LEGACY_CAPS)
        reply = await c.call("tools/call", {"name": "push", "arguments": {}}, modern=False)
        assert c.service.pool.path_for(True) == "legacy->modern"
    assert NO_BACK_CHANNEL in reply["error"]["message"]
    async with gateway(push_server(), upstream_era="legacy") as c:
        assert c.service.pool.era_name == "legacy"
        assert [s.era for s in c.upstream.spawned] == ["legacy"]


async def test_an_outage_in_the_legacy_check_is_no_verdict() -> None:
    """DESIGN §4 "an outage is never an era verdict": a legacy check that
    cannot be made leaves the era unsettled, rather than call the server
    modern-only."""
    from gateway.core import era_probe

    failed = wire.gateway_error(
        0, wire.INTERNAL_ERROR, "Upstream HTTP exchange failed: x", reason="upstream-unreachable"
    )
    assert era_probe.judge_legacy_check(failed).outage
    http_500 = wire.gateway_error(0, wire.INTERNAL_ERROR, "HTTP 503", status=503)
    assert era_probe.judge_legacy_check(http_500).outage
    http_404 = wire.gateway_error(0, wire.METHOD_NOT_FOUND, "HTTP 404", status=404)
    assert not era_probe.judge_legacy_check(http_404).outage
    assert era_probe.judge_legacy_check(http_404).initialize is None
    await anyio.lowlevel.checkpoint()


async def test_a_dual_servers_legacy_process_is_restarted_on_demand() -> None:
    """Issue 10: over stdio one process per era in use, "supervised and
    bounded like the others": the legacy process dies, the modern one stays,
    and the next legacy call starts a new legacy process (initialize first)."""
    seen: list[wire.Message] = []
    async with gateway(push_server(seen)) as c:
        await c.initialize(LEGACY_CAPS)
        modern_proc, legacy_proc = c.upstream.spawned
        legacy_proc.die()
        with anyio.fail_after(5):
            while c.service.pool.restarts == 0:  # the supervisor saw the exit
                await anyio.lowlevel.checkpoint()
        await c.send(wire.request(3, "tools/call", {"name": "push", "arguments": {}}))
        reply = await answer_pushes(c, 3)
        modern = await c.call("tools/call", {"name": "push"})
        assert [s.era for s in c.upstream.spawned] == ["modern", "legacy", "legacy"]
        assert not modern_proc.closed
    assert reply["result"]["content"][0]["text"] == "Ada|sampled|file:///work"
    assert NO_BACK_CHANNEL in modern["error"]["message"]


async def test_legacy_sessions_of_a_dual_server_are_bounded_by_max_processes() -> None:
    """DESIGN §5.1.1 on a dual upstream: legacy sessions stay per principal
    and feature set, and `max_processes` bounds them (the idle one goes);
    the modern connection is not one of them."""
    async with gateway(push_server(), max_sessions=2, max_processes=1) as c:
        pool = c.service.pool
        first = await pool.session_for("local", {"roots": {}}, legacy_client=True)
        second = await pool.session_for("local", {"sampling": {}}, legacy_client=True)
        assert first is not second and not first.alive and second.alive
        assert second.key.dual_legacy and second.profile is not None
        assert second.profile.era is era.Era.LEGACY
        modern = await pool.session_for("local", {})
        assert modern.alive and not modern.key.dual_legacy and second.alive


async def test_each_calls_debug_line_names_the_path_it_took() -> None:
    """Issue 10: "The server's own era choice is visible per call in the debug
    log": a legacy client served natively by a dual-era server, and a modern
    client on its modern side, each get a line naming the path."""
    async with gateway(dual_server(legacy_server({"tools/call": ok}), modern_server())) as c:
        with structlog.testing.capture_logs() as logs:
            await c.call("tools/list")
            await c.initialize({})
            await c.call("tools/call", {"name": "t"}, modern=False)
    paths = {(e.get("method"), e.get("path")) for e in logs if e["event"] == "call"}
    assert ("tools/call", "legacy->legacy(dual)") in paths
    assert ("tools/list", "modern->modern(dual)") in paths


async def test_a_dual_era_servers_ping_reaches_its_legacy_client() -> None:
    """Issue 10: on a dual-era server a legacy client's session stays native,
    "its server requests — sampling, elicitation, roots, ping — reach the
    client as requests" (on other paths the gateway answers a legacy server's
    ping itself, DESIGN §5.1.5)."""

    async def pinging_tool(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        pong = await server.ask("ping")
        return {"content": [{"type": "text", "text": f"pong {pong.get('result')}"}]}

    server = dual_server(
        legacy_server({"tools/call": pinging_tool}, capabilities=PUSH_CAPS),
        modern_server({"tools/call": no_back_channel}),
    )
    async with gateway(server) as c:
        await c.initialize(LEGACY_CAPS)
        await c.send(wire.request(9, "tools/call", {"name": "ping", "arguments": {}}))
        ping = await c.next()
        assert ping["method"] == "ping"
        await c.send(wire.result_response(ping["id"], {}))
        reply = await c.next()
    assert reply["id"] == 9
    assert reply["result"]["content"][0]["text"] == "pong {}"
