"""Server requests that no client call can carry (issue 10, last "Behaviour"
bullet; 2026-07-28 basic/patterns/mrtr).

A legacy server may ask its client something at session start, as
server-filesystem asks `roots/list` right after `notifications/initialized`,
while a modern client's first `tools/list` is in flight. In 2026-07-28 only
`tools/call`, `prompts/get` and `resources/read` results may be
`input_required`: a `tools/list` cannot carry the request, so it must never
fail because of it. The gateway answers the server itself (configured roots,
or an error) and logs why; a later call that can carry one bridges it as usual.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
import structlog.testing

from gateway import cli, era, wire
from gateway import config as config_mod
from tests.scripted import Client, Recorder, ScriptedServer, gateway, legacy_server

pytestmark = pytest.mark.anyio

SPEC = Path(__file__).resolve().parents[2] / "shared" / "spec"
if not SPEC.exists():  # a worktree beside main: the shared checkout
    SPEC = Path("/work/shared/spec")

ROOTS_CAPS: dict[str, Any] = {"roots": {}}
TOOLS = {"tools": [{"name": "read", "inputSchema": {"type": "object"}}]}


def _meta(caps: dict[str, Any]) -> dict[str, Any]:
    return {"_meta": {era.PROTOCOL_VERSION: "2026-07-28", era.CLIENT_CAPABILITIES: caps}}


def test_only_the_mrtr_methods_can_carry_a_server_request() -> None:
    """2026-07-28 schema: the responses whose result may be an
    InputRequiredResult are exactly those of era.MRTR_METHODS; the gateway
    fails no other call for a server request it cannot carry."""
    path = SPEC / "2026-07-28" / "schema.json"
    assert path.exists(), f"no {path}: the spec schemas must be in ../shared/spec"
    defs = orjson.loads(path.read_bytes())["$defs"]
    carriers = set()
    for name, node in defs.items():
        result = node.get("properties", {}).get("result", {})
        if name.endswith("ResultResponse") and {
            "$ref": "#/$defs/InputRequiredResult"
        } in result.get("anyOf", []):
            request = defs[name.removesuffix("ResultResponse") + "Request"]
            carriers.add(request["properties"]["method"]["const"])
    assert carriers == set(era.MRTR_METHODS)


class RootsAsker:
    """A legacy server that asks roots/list while the first tools/list is in
    flight (deterministically: from inside its handler, before answering) and
    remembers what the gateway answered."""

    def __init__(self) -> None:
        self.answers: list[wire.Message] = []
        self.seen = Recorder()

    async def tools_list(self, server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        if not self.answers:
            self.answers.append(await server.ask("roots/list"))
        return TOOLS

    async def tools_call(self, server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        answer = await server.ask("roots/list")
        return {"content": [{"type": "text", "text": str(answer.get("result"))}]}

    def behaviour(self) -> Any:
        return legacy_server(
            {"tools/list": self.tools_list, "tools/call": self.tools_call},
            capabilities={"tools": {}},
            log=self.seen,
        )


async def test_first_tools_list_survives_roots_request_in_flight() -> None:
    """Issue 10: "a modern client's first `tools/list` fails with -32021 '…the
    client did not declare the roots capability' although the client did".
    Fails on main (the tools/list got -32021); the server now gets an error
    for its roots/list, which it takes as "no roots", and one log line says why."""
    asker = RootsAsker()
    with structlog.testing.capture_logs() as logs:
        async with gateway(asker.behaviour()) as c:
            first = await c.call("tools/list", _meta(ROOTS_CAPS))
            second = await c.call("tools/list", _meta(ROOTS_CAPS))
    assert first == {"jsonrpc": "2.0", "id": 1, "result": {**first["result"]}}
    assert [t["name"] for t in first["result"]["tools"]] == ["read"]
    assert second["result"]["tools"] == first["result"]["tools"]
    [answer] = asker.answers
    assert answer["error"]["code"] == wire.METHOD_NOT_FOUND
    assert "roots/list refused" in answer["error"]["message"]
    assert "tools/list" in answer["error"]["message"]
    refused = [e for e in logs if e["event"] == "server request refused"]
    assert len(refused) == 1
    assert refused[0]["method"] == "roots/list"
    assert "no call of the modern client that can carry it" in refused[0]["why"]


async def test_first_tools_list_of_a_client_without_features_is_not_failed() -> None:
    """The same for a modern client that declared no client features: its
    tools/list still cannot carry the request, so it is not failed -32021
    (fails on main)."""
    asker = RootsAsker()
    async with gateway(asker.behaviour()) as c:
        first = await c.call("tools/list", _meta({}))
    assert "result" in first, first
    assert "error" in asker.answers[0]


async def test_configured_roots_answer_the_request_no_call_can_carry() -> None:
    """Issue 10: "answer it from configured roots". The server gets the
    configured roots, the tools/list its normal result (fails on main: -32021)."""
    roots = ({"uri": "file:///srv/data", "name": "data"},)
    asker = RootsAsker()
    with structlog.testing.capture_logs() as logs:
        async with gateway(asker.behaviour(), static_roots=roots) as c:
            first = await c.call("tools/list", _meta(ROOTS_CAPS))
    assert "result" in first, first
    assert asker.answers[0]["result"] == {"roots": [{"uri": "file:///srv/data", "name": "data"}]}
    assert any(e["event"] == "roots/list answered from the configured roots" for e in logs)


async def test_a_later_tools_call_still_bridges_roots() -> None:
    """Issue 10: "When a later call can carry it, bridge it as usual": after
    the startup request was answered by the gateway, a tools/call whose server
    asks roots/list gets input_required carrying it, and the retry's roots
    reach the server (2026-07-28 basic/patterns/mrtr)."""
    asker = RootsAsker()
    async with gateway(asker.behaviour(), static_roots=({"uri": "file:///cfg"},)) as c:
        assert "result" in await c.call("tools/list", _meta(ROOTS_CAPS))
        first = await c.call("tools/call", {"name": "read", "arguments": {}, **_meta(ROOTS_CAPS)})
        result = first["result"]
        assert result["resultType"] == "input_required", first
        [(key, request)] = result["inputRequests"].items()
        assert request["method"] == "roots/list"
        done = await c.call(
            "tools/call",
            {
                "name": "read",
                "arguments": {},
                **_meta(ROOTS_CAPS),
                "inputResponses": {key: {"roots": [{"uri": "file:///client"}]}},
                "requestState": result["requestState"],
            },
        )
    assert "file:///client" in done["result"]["content"][0]["text"]


async def test_request_at_session_start_belongs_to_no_call() -> None:
    """Issue 10: "a request the server sends at session start belongs to no
    call": sent on notifications/initialized, answered by the gateway, and the
    first request (a tools/list) gets its normal result."""
    answers: list[wire.Message] = []
    asked = anyio.Event()

    async def at_start(server: ScriptedServer) -> None:
        answers.append(await server.ask("roots/list"))
        asked.set()

    async def tools_list(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        await asked.wait()  # the first call stays in flight until the gateway answered
        return TOOLS

    behaviour = legacy_server({"tools/list": tools_list}, on_initialized=at_start)
    async with gateway(behaviour) as c:
        first = await c.call("tools/list", _meta(ROOTS_CAPS))
    assert "result" in first, first
    assert answers[0]["error"]["code"] == wire.METHOD_NOT_FOUND


async def test_sampling_no_call_can_carry_is_an_error_to_the_server() -> None:
    """Issue 10: "sampling/elicitation that no call can carry: an error to the
    server"; the tools/list it arrived during is not failed (fails on main)."""
    answers: list[wire.Message] = []

    async def tools_list(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        answers.append(await server.ask("sampling/createMessage", {"messages": [], "maxTokens": 3}))
        return TOOLS

    async with gateway(legacy_server({"tools/list": tools_list})) as c:
        first = await c.call("tools/list", _meta({"sampling": {}}))
    assert "result" in first, first
    assert answers[0]["error"]["code"] == wire.METHOD_NOT_FOUND


async def test_legacy_client_still_gets_the_startup_request_natively() -> None:
    """DESIGN §5.3 (legacy→legacy passthrough): a legacy client that declared
    roots gets the server's startup roots/list as a request of its own, and
    the server gets the client's answer."""
    answers: list[wire.Message] = []

    async def at_start(server: ScriptedServer) -> None:
        answers.append(await server.ask("roots/list"))

    behaviour = legacy_server({"tools/list": _tools}, on_initialized=at_start)
    async with gateway(behaviour) as c:
        await c.initialize(ROOTS_CAPS)
        listed = await _legacy_call_answering_roots(c)
    assert "result" in listed, listed
    assert answers[0]["result"] == {"roots": [{"uri": "file:///legacy"}]}


async def _tools(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return TOOLS


async def _legacy_call_answering_roots(c: Client) -> wire.Message:
    """The reply to a first call, once the client has answered the server's
    roots/list too (the server may ask before the call, or during it and
    answer the call first: both reach the client)."""
    await c.send(wire.request(99, "tools/list", {}))
    reply: wire.Message | None = None
    answered = False
    with anyio.fail_after(5):
        while reply is None or not answered:  # ends with both (or the bound)
            msg = await c.inbox.receive()
            if msg.get("method") == "roots/list":
                await c.service.handle_client_message(
                    c.link,
                    wire.result_response(msg["id"], {"roots": [{"uri": "file:///legacy"}]}),
                    c.requests,
                )
                answered = True
            elif msg.get("id") == 99 and "method" not in msg:
                reply = msg
    await anyio.wait_all_tasks_blocked()  # the answer on its way to the server
    return reply


def test_roots_config_takes_paths_and_tables(tmp_path: Path) -> None:
    """Issue 10: "answer it from configured roots": `[upstream] roots` takes
    absolute paths (as file:// URIs named after their last component) and
    `Root` tables (2025-11-25 schema: uri, name, _meta); `--root` replaces them."""
    path = tmp_path / "gw.toml"
    path.write_text(
        "[upstream]\n"
        'roots = ["/srv/my data", { uri = "file:///x", name = "x", _meta = { k = 1 } }]\n'
    )
    cfg = config_mod.load(path)
    assert cfg.static_roots == (
        {"uri": "file:///srv/my%20data", "name": "my data"},
        {"uri": "file:///x", "name": "x", "_meta": {"k": 1}},
    )
    ns = cli._parser("test").parse_args(
        ["--config", str(path), "--root", "/a", "--root", "file:///b"]
    )
    cfg = cli._build_config(ns, ["true"])
    assert cfg.static_roots == ({"uri": "file:///a", "name": "a"}, {"uri": "file:///b"})


async def test_the_refusal_is_one_log_line_however_often() -> None:
    """Issue 10: "log why", and the operator sees one line, never a flood: a
    server that asks at every tools/list is logged once per interval."""
    answers: list[wire.Message] = []

    async def tools_list(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        answers.append(await server.ask("roots/list"))
        return TOOLS

    with structlog.testing.capture_logs() as logs:
        async with gateway(legacy_server({"tools/list": tools_list})) as c:
            for _ in range(5):
                assert "result" in await c.call("tools/list", _meta(ROOTS_CAPS))
    assert len(answers) == 5 and all("error" in a for a in answers)
    assert [e["event"] for e in logs].count("server request refused") == 1


class LateStartupAsk:
    """A legacy server that asks roots/list a while after initialized (as
    server-everything does, 350 ms later), so that the request lands while a
    modern client's first tools/call is in flight, on the gateway's default
    session (which declares every client feature upstream)."""

    def __init__(self) -> None:
        self.answers: list[wire.Message] = []
        self.calling = anyio.Event()
        self.asked = anyio.Event()

    async def at_start(self, server: ScriptedServer) -> None:
        await self.calling.wait()
        self.answers.append(await server.ask("roots/list"))
        self.asked.set()

    async def tools_call(self, server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        self.calling.set()
        await self.asked.wait()
        return {"content": [{"type": "text", "text": "done"}]}

    def behaviour(self) -> Any:
        return legacy_server({"tools/call": self.tools_call}, on_initialized=self.at_start)


async def test_a_start_up_roots_request_during_a_call_without_roots_fails_no_call() -> None:
    """Issue 10: "a request the server sends at session start must never fail
    that call". The compat matrix caught it under load: server-everything's
    roots/list (350 ms after initialized) met a modern client's tools/call that
    declared no roots, and the call got -32021. Roots are the session's: the
    server gets an error instead, and one log line says why."""
    asker = LateStartupAsk()
    with structlog.testing.capture_logs() as logs:
        async with gateway(asker.behaviour()) as c:
            done = await c.call("tools/call", {"name": "read", "arguments": {}, **_meta({})})
    assert done["result"]["content"][0]["text"] == "done", done
    [answer] = asker.answers
    assert answer["error"]["code"] == wire.METHOD_NOT_FOUND
    [refused] = [e for e in logs if e["event"] == "server request refused"]
    assert "roots belong to the session" in refused["why"] and "tools/call" in refused["why"]


async def test_sampling_during_the_one_call_of_a_client_without_it_gets_32021() -> None:
    """2026-07-28 "Per-request protocol fields" (the conformance suite's
    sep-2575-server-rejects-undeclared-capability): sampling asked during the
    one call of a modern client that declared no client features is that
    call's need, early in the session or late: the call gets -32021."""
    answers: list[wire.Message] = []

    async def tools_call(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        answers.append(await server.ask("sampling/createMessage", {"messages": [], "maxTokens": 3}))
        return {"content": [{"type": "text", "text": "sampled"}]}

    async with gateway(legacy_server({"tools/call": tools_call})) as c:
        failed = await c.call("tools/call", {"name": "read", "arguments": {}, **_meta({})})
    assert failed["error"]["code"] == -32021, failed
