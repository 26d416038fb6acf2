"""Log messages reach only the calls that asked for them, and only where they
provably belong (2026-07-28 server/utilities/logging: "the server MUST NOT send
`notifications/message` for a request that did not include a logLevel";
2025-11-25 logging; issue "Nothing may leak between calls").

A legacy stdio server's `notifications/message` names no call. The HTTP front
runs in-process as an ASGI app (no port, no subprocess) in front of a scripted
legacy server whose tool logs while several calls overlap.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import orjson
import pytest

from gateway import era, wire
from tests.inprocess import http_gateway
from tests.scripted import Behaviour, ScriptedServer, legacy_server

pytestmark = pytest.mark.anyio

V = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
LOGGING_CAPS: dict[str, Any] = {"tools": {}, "logging": {}}


class Barrier:
    """The tool calls wait for each other, so that they surely overlap."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.arrived = 0
        self.all_in = anyio.Event()

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived >= self.parties:
            self.all_in.set()
        with anyio.fail_after(5):
            await self.all_in.wait()


def chatty(first: Barrier, second: Barrier) -> Behaviour:
    """A legacy server whose `talk` tool logs `<who>-debug` and `<who>-info`
    while every other `talk` call is running too."""

    async def talk(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        who = msg["params"]["arguments"]["who"]
        await first.wait()
        for level in ("debug", "info"):
            note = {"level": level, "logger": "tool", "data": f"{who}-{level}"}
            await server.emit(wire.notification("notifications/message", note))
        await second.wait()
        return {"content": [{"type": "text", "text": f"done {who}"}]}

    async def set_level(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        return {}

    return legacy_server(
        {"tools/call": talk, "logging/setLevel": set_level}, capabilities=LOGGING_CAPS
    )


def talk(msg_id: int, who: str, level: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {era.PROTOCOL_VERSION: V, era.CLIENT_CAPABILITIES: {}}
    if level is not None:
        meta[era.LOG_LEVEL] = level
    return wire.request(
        msg_id, "tools/call", {"name": "talk", "arguments": {"who": who}, "_meta": meta}
    )


def messages(resp: httpx.Response) -> list[dict[str, Any]]:
    if resp.headers["content-type"].startswith("application/json"):
        return [resp.json()]
    return [orjson.loads(line[5:]) for line in resp.text.splitlines() if line.startswith("data:")]


def logs(resp: httpx.Response) -> list[str]:
    return [
        m["params"]["data"] for m in messages(resp) if m.get("method") == "notifications/message"
    ]


async def post_all(client: httpx.AsyncClient, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    out: list[httpx.Response | None] = [None] * len(bodies)

    async def one(i: int, body: dict[str, Any]) -> None:
        out[i] = await client.post(
            "/mcp",
            content=orjson.dumps(body),
            headers={
                "accept": ACCEPT,
                "content-type": "application/json",
                "mcp-protocol-version": V,
                "mcp-method": "tools/call",
                "mcp-name": "talk",
            },
        )

    async with anyio.create_task_group() as tg:
        for i, body in enumerate(bodies):
            tg.start_soon(one, i, body)
    assert all(r is not None for r in out)
    return [r for r in out if r is not None]


async def test_overlapping_calls_on_one_legacy_session_leak_no_logs() -> None:
    """Issue defect: "three concurrent calls of one principal to a legacy stdio
    server, with `_meta` logLevel `debug`, `debug` and none: the call that set no
    logLevel receives every log message, and each call's stream also carries
    the other calls' messages". The server's messages name no call, and two
    calls asked for them: the gateway cannot tell whose they are, so it
    delivers them to neither, and never to the call that asked for none."""
    async with http_gateway(chatty(Barrier(3), Barrier(3))) as gw:
        client = gw.client
        a, b, c = await post_all(
            client, [talk(1, "a", "debug"), talk(2, "b", "debug"), talk(3, "c", None)]
        )
    for resp, who in ((a, "a"), (b, "b"), (c, "c")):
        assert resp.status_code == 200
        assert messages(resp)[-1]["result"]["content"][0]["text"] == f"done {who}"
    assert logs(c) == []
    assert logs(a) == [] and logs(b) == []


async def test_a_lone_call_gets_the_logs_at_the_level_it_asked() -> None:
    """2026-07-28 logging: messages for a request "at or above the requested
    level". With one client call in progress on the session, the messages
    provably belong to it."""
    async with http_gateway(chatty(Barrier(1), Barrier(1))) as gw:
        client = gw.client
        (a,) = await post_all(client, [talk(1, "a", "info")])
        (quiet,) = await post_all(client, [talk(2, "q", None)])
    assert logs(a) == ["a-info"]
    assert logs(quiet) == []


async def test_a_call_that_asked_gets_nothing_it_cannot_be_sure_is_its_own() -> None:
    """Issue: "deliver a message only where it provably belongs ... never to a
    call that did not ask". One call asked, another that did not ask runs
    alongside on the same legacy stdio session: either may have caused a
    message, so neither gets it."""
    async with http_gateway(chatty(Barrier(2), Barrier(2))) as gw:
        client = gw.client
        a, c = await post_all(client, [talk(1, "a", "debug"), talk(2, "c", None)])
    assert logs(c) == []
    assert logs(a) == []
