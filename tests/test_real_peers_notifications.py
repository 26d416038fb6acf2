"""Change notifications through the gateway with real third-party peers.

- modern client -> gateway -> legacy server (TS 1.x server-everything, mcp 1.30.0
  FastMCP): `subscriptions/listen` is acknowledged first with the subset the
  server declares, URIs are subscribed upstream, `list_changed` and
  `resources/updated` come back tagged with the listen's id, and cancelling the
  listen (stdio `notifications/cancelled`, HTTP stream closed) ends it and
  unsubscribes upstream.
- legacy client -> gateway -> modern-only mcp 2.3.0 server: `resources/subscribe`
  and `tools/list_changed` work through the gateway's upstream listen (stdout on
  stdio, the session's GET stream on HTTP), and `logging/setLevel` filters the
  server's `notifications/message`.

The clients are raw JSON-RPC (this file and tests/raw_gateway_clients.py:
stdlib + anyio/httpx); the servers are `compat_matrix/peers/` fixtures
(`add_note`, `register_tool`) and server-everything
(`toggle-subscriber-updates`). The peers come from
`bash peers/install.sh`; when they are missing the tests FAIL, never skip.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from compat_matrix.environment import INSTALL_HINT, missing_peers, peers_dir
from tests.raw_gateway_clients import (
    ACCEPT,
    LEGACY_V,
    META,
    REPO,
    Stdio,
    http_gateway,
    http_gateway_process,
    modern_headers,
    sse_or_json,
    stdio_gateway,
    text_of,
)

pytestmark = [pytest.mark.peers, pytest.mark.anyio]

FIXTURES = REPO / "compat_matrix" / "peers"
SUB = "io.modelcontextprotocol/subscriptionId"
LISTEN_ID = 100


def _peers() -> Path:
    missing = missing_peers()
    if missing:
        pytest.fail(
            f"the real MCP peers are not installed in {peers_dir()} "
            f"(missing: {', '.join(missing)}): {INSTALL_HINT}",
            pytrace=False,
        )
    return peers_dir()


def everything() -> list[str]:
    return [str(_peers() / "node" / "node_modules" / ".bin" / "mcp-server-everything"), "stdio"]


def py1(*args: str) -> list[str]:
    return [str(_peers() / "py1" / "bin" / "python"), str(FIXTURES / "py1_server.py"), *args]


def py2_modern() -> list[str]:
    return [str(_peers() / "py2" / "bin" / "python"), str(FIXTURES / "py2_modern_server.py")]


def tag(msg: dict[str, Any]) -> Any:
    return ((msg.get("params") or {}).get("_meta") or {}).get(SUB)


# -- stdio -------------------------------------------------------------------------


def listen_params(**notifications: Any) -> dict[str, Any]:
    return {"notifications": notifications, "_meta": dict(META)}


@asynccontextmanager
async def http_listen(
    c: httpx.AsyncClient, **notifications: Any
) -> AsyncIterator[tuple[dict[str, Any], AsyncIterator[dict[str, Any]]]]:
    """POST a listen and read its SSE stream; yields the acknowledgement (which
    must come first, tagged with the listen's id) and the events after it."""
    listen = {
        "jsonrpc": "2.0", "id": LISTEN_ID, "method": "subscriptions/listen",
        "params": listen_params(**notifications),
    }  # fmt: skip
    async with c.stream(
        "POST", "/mcp", json=listen, headers=modern_headers("subscriptions/listen"),
        timeout=httpx.Timeout(10, read=10),
    ) as stream:  # fmt: skip
        assert stream.status_code == 200
        events = sse_events(stream.aiter_lines())
        with anyio.fail_after(10):
            ack = await anext(events)
        assert ack["method"] == "notifications/subscriptions/acknowledged", ack
        assert tag(ack) == LISTEN_ID
        yield ack, events


async def open_listen(gw: Stdio, **notifications: Any) -> dict[str, Any]:
    """Send the listen; return its acknowledgement, which must be its first message."""
    since = len(gw.seen)
    await gw.send(
        {
            "jsonrpc": "2.0",
            "id": LISTEN_ID,
            "method": "subscriptions/listen",
            "params": listen_params(**notifications),
        }
    )
    first = await gw.until(lambda m: tag(m) == LISTEN_ID or m.get("id") == LISTEN_ID, since)
    assert first.get("method") == "notifications/subscriptions/acknowledged", first
    return first["params"]["notifications"]  # type: ignore[no-any-return]


async def cancel_listen(gw: Stdio) -> int:
    """Cancel the listen; return the index in `seen` from which it must be silent."""
    await gw.send(
        {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": LISTEN_ID, "reason": "test done"},
        }
    )
    return len(gw.seen)


def tagged_after(gw: Stdio, start: int) -> list[dict[str, Any]]:
    return [m for m in gw.seen[start:] if "method" in m and tag(m) == LISTEN_ID]


# -- 1. modern client -> server-everything (TS SDK 1.x, legacy) ----------------------


async def test_modern_listen_to_server_everything(tmp_path: Path) -> None:
    async with stdio_gateway(tmp_path, everything()) as gw:
        resources = await gw.request("resources/list")
        uri = resources["result"]["resources"][0]["uri"]
        ack = await open_listen(gw, toolsListChanged=True, resourceSubscriptions=[uri])
        # server-everything declares tools.listChanged and resources.subscribe.
        assert ack == {"toolsListChanged": True, "resourceSubscriptions": [uri]}

        start = len(gw.seen)
        toggled = await gw.request("tools/call", {"name": "toggle-subscriber-updates"})
        assert "Started" in text_of(toggled), toggled
        updated = await gw.until(
            lambda m: m.get("method") == "notifications/resources/updated" and tag(m) == LISTEN_ID,
            start,
        )
        assert updated["params"]["uri"] == uri
        assert all(
            m["method"] != "notifications/subscriptions/acknowledged"
            for m in tagged_after(gw, start)
        )

        silent_from = await cancel_listen(gw)
        # Stop, then start again: the restart sends an update at once for every
        # URI still subscribed upstream. Nothing may reach the cancelled listen.
        stopped = await gw.request("tools/call", {"name": "toggle-subscriber-updates"})
        assert "Stopped" in text_of(stopped), stopped
        await anyio.sleep(0.3)  # the unsubscribe upstream is sent after the cancel
        restarted = await gw.request("tools/call", {"name": "toggle-subscriber-updates"})
        assert "Started" in text_of(restarted), restarted
        await gw.request("tools/call", {"name": "echo", "arguments": {"message": "barrier"}})
        await anyio.sleep(0.2)
        await gw.request("tools/call", {"name": "echo", "arguments": {"message": "barrier"}})
        assert tagged_after(gw, silent_from) == []
        assert not any(
            m.get("method") == "notifications/resources/updated" for m in gw.seen[silent_from:]
        ), gw.seen[silent_from:]


# -- 2. modern client -> mcp 1.30.0 FastMCP (legacy) ---------------------------------


async def test_modern_listen_to_py1_fastmcp(tmp_path: Path) -> None:
    async with stdio_gateway(tmp_path, py1("--notify")) as gw:
        ack = await open_listen(
            gw,
            toolsListChanged=True,
            promptsListChanged=True,  # py1 does not declare prompts.listChanged
            resourceSubscriptions=["notes://a"],
        )
        assert ack == {"toolsListChanged": True, "resourceSubscriptions": ["notes://a"]}

        start = len(gw.seen)
        # The fixture only notifies URIs subscribed upstream: "(notified)" proves
        # the gateway sent resources/subscribe.
        added = await gw.request(
            "tools/call", {"name": "add_note", "arguments": {"name": "a", "text": "one"}}
        )
        assert text_of(added) == "updated notes://a (notified)"
        updated = await gw.until(
            lambda m: m.get("method") == "notifications/resources/updated" and tag(m) == LISTEN_ID,
            start,
        )
        assert updated["params"]["uri"] == "notes://a"
        other = await gw.request(
            "tools/call", {"name": "add_note", "arguments": {"name": "b", "text": "x"}}
        )
        assert text_of(other) == "updated notes://b"

        registered = await gw.request(
            "tools/call", {"name": "register_tool", "arguments": {"name": "extra"}}
        )
        assert text_of(registered) == "registered extra"
        await gw.until(
            lambda m: m.get("method") == "notifications/tools/list_changed" and tag(m) == LISTEN_ID,
            start,
        )
        tools = await gw.request("tools/list")
        assert "extra" in [t["name"] for t in tools["result"]["tools"]]
        read = await gw.request("resources/read", {"uri": "notes://a"})
        assert read["result"]["contents"][0]["text"] == "one"
        assert [
            m["params"].get("uri") for m in tagged_after(gw, start) if "updated" in m["method"]
        ] == ["notes://a"]

        silent_from = await cancel_listen(gw)
        with anyio.fail_after(5):  # the gateway unsubscribes upstream
            while True:
                again = await gw.request(
                    "tools/call", {"name": "add_note", "arguments": {"name": "a", "text": "two"}}
                )
                if text_of(again) == "updated notes://a":
                    break
                await anyio.sleep(0.1)
        await gw.request("tools/call", {"name": "register_tool", "arguments": {"name": "extra2"}})
        await gw.request("tools/call", {"name": "echo", "arguments": {"text": "barrier"}})
        assert tagged_after(gw, silent_from) == []
        assert not any("list_changed" in m.get("method", "") for m in gw.seen[silent_from:])


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    async for line in lines:
        if line.startswith("data:") and line[5:].strip():
            yield json.loads(line[5:])


async def modern_call(
    c: httpx.AsyncClient, msg_id: int, tool: str, arguments: dict[str, Any]
) -> str:
    msg = {
        "jsonrpc": "2.0", "id": msg_id, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": dict(META)},
    }  # fmt: skip
    resp = await c.post("/mcp", json=msg, headers=modern_headers("tools/call", tool))
    (reply,) = [m for m in sse_or_json(resp) if m.get("id") == msg_id]
    return text_of(reply)


async def test_modern_listen_over_http_to_py1(tmp_path: Path) -> None:
    async with http_gateway(tmp_path, py1("--notify")) as c:
        filters = {"toolsListChanged": True, "resourceSubscriptions": ["notes://h"]}
        async with http_listen(c, **filters) as (ack, events):
            with anyio.fail_after(10):
                assert ack["params"]["notifications"] == {
                    "toolsListChanged": True, "resourceSubscriptions": ["notes://h"],
                }  # fmt: skip
                assert await modern_call(c, 1, "add_note", {"name": "h", "text": "x"}) == (
                    "updated notes://h (notified)"
                )
                updated = await anext(events)
                assert updated["method"] == "notifications/resources/updated", updated
                assert updated["params"]["uri"] == "notes://h" and tag(updated) == LISTEN_ID
                await modern_call(c, 2, "register_tool", {"name": "viahttp"})
                changed = await anext(events)
                assert changed["method"] == "notifications/tools/list_changed", changed
                assert tag(changed) == LISTEN_ID
        # Closing the stream ends the listen: the gateway unsubscribes upstream.
        with anyio.fail_after(5):
            while True:
                again = await modern_call(c, 3, "add_note", {"name": "h", "text": "y"})
                if again == "updated notes://h":
                    break
                await anyio.sleep(0.1)


# -- 3. legacy client -> modern-only mcp 2.3.0 ---------------------------------------


async def test_legacy_subscribe_to_modern_py2(tmp_path: Path) -> None:
    async with stdio_gateway(tmp_path, py2_modern()) as gw:
        init = await gw.legacy_handshake()
        caps = init["capabilities"]
        assert caps.get("resources", {}).get("subscribe") is True, caps
        assert caps.get("tools", {}).get("listChanged") is True, caps

        sub = await gw.request("resources/subscribe", {"uri": "notes://a"}, modern=False)
        assert sub.get("result") == {}, sub
        start = len(gw.seen)
        added = await gw.request(
            "tools/call",
            {"name": "add_note", "arguments": {"name": "a", "text": "one"}},
            modern=False,
        )
        assert text_of(added) == "updated notes://a"
        updated = await gw.until(
            lambda m: m.get("method") == "notifications/resources/updated", start
        )
        assert updated["params"]["uri"] == "notes://a"

        await gw.request(
            "tools/call",
            {"name": "add_note", "arguments": {"name": "b", "text": "x"}},
            modern=False,
        )
        await gw.request(
            "tools/call", {"name": "register_tool", "arguments": {"name": "late"}}, modern=False
        )
        await gw.until(lambda m: m.get("method") == "notifications/tools/list_changed", start)
        tools = await gw.request("tools/list", modern=False)
        assert "late" in [t["name"] for t in tools["result"]["tools"]]
        uris = [
            m["params"]["uri"]
            for m in gw.seen[start:]
            if m.get("method") == "notifications/resources/updated"
        ]
        assert uris == ["notes://a"], uris  # notes://b is not subscribed

        unsub = await gw.request("resources/unsubscribe", {"uri": "notes://a"}, modern=False)
        assert unsub.get("result") == {}, unsub
        # The new filter takes over once the upstream acknowledges it.
        with anyio.fail_after(5):
            while True:
                mark = len(gw.seen)
                await gw.request(
                    "tools/call",
                    {"name": "add_note", "arguments": {"name": "a", "text": "z"}},
                    modern=False,
                )
                await gw.request(
                    "tools/call", {"name": "echo", "arguments": {"text": "b"}}, modern=False
                )
                if not any(
                    m.get("method") == "notifications/resources/updated" for m in gw.seen[mark:]
                ):
                    break
                await anyio.sleep(0.1)


async def test_legacy_get_stream_over_http_from_modern_py2(tmp_path: Path) -> None:
    async with http_gateway(tmp_path, py2_modern()) as c:
        h = {"accept": ACCEPT, "content-type": "application/json"}
        init = await c.post(
            "/mcp",
            headers=h,
            json={
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": LEGACY_V, "capabilities": {},
                           "clientInfo": {"name": "notif-test-legacy", "version": "1"}},
            },
        )  # fmt: skip
        assert init.status_code == 200, init.text
        sh = {
            **h,
            "mcp-session-id": init.headers["mcp-session-id"],
            "mcp-protocol-version": LEGACY_V,
        }
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await c.post("/mcp", headers=sh, json=note)).status_code == 202

        async def post(msg_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
            resp = await c.post(
                "/mcp",
                headers=sh,
                json={"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params},
            )
            (reply,) = [m for m in sse_or_json(resp) if m.get("id") == msg_id]
            return reply

        get_headers = {"accept": "text/event-stream", "mcp-session-id": sh["mcp-session-id"],
                       "mcp-protocol-version": LEGACY_V}  # fmt: skip
        async with c.stream(
            "GET", "/mcp", headers=get_headers, timeout=httpx.Timeout(10, read=10)
        ) as stream:
            assert stream.status_code == 200
            events = sse_events(stream.aiter_lines())
            assert (await post(2, "resources/subscribe", {"uri": "notes://g"}))["result"] == {}
            added = await post(
                3, "tools/call", {"name": "add_note", "arguments": {"name": "g", "text": "1"}}
            )
            assert text_of(added) == "updated notes://g"
            with anyio.fail_after(10):
                updated = await anext(events)
                assert updated["method"] == "notifications/resources/updated", updated
                assert updated["params"]["uri"] == "notes://g"
                await post(
                    4, "tools/call", {"name": "register_tool", "arguments": {"name": "gettool"}}
                )
                changed = await anext(events)
                assert changed["method"] == "notifications/tools/list_changed", changed
        await c.delete("/mcp", headers={"mcp-session-id": sh["mcp-session-id"]})


# -- 4. logging/setLevel of a legacy client -> modern py2 ---------------------------


async def test_legacy_set_level_filters_modern_py2_logs(tmp_path: Path) -> None:
    async with stdio_gateway(tmp_path, py2_modern()) as gw:
        await gw.legacy_handshake()

        async def levels_logged() -> list[str]:
            mark = len(gw.seen)
            reply = await gw.request("tools/call", {"name": "log_levels"}, modern=False)
            assert text_of(reply) == "logged"
            await gw.request(
                "tools/call", {"name": "echo", "arguments": {"text": "b"}}, modern=False
            )
            return [
                m["params"]["level"]
                for m in gw.seen[mark:]
                if m.get("method") == "notifications/message"
            ]

        assert (await gw.request("logging/setLevel", {"level": "warning"}, modern=False))[
            "result"
        ] == {}
        assert await levels_logged() == ["warning", "error"]
        assert (await gw.request("logging/setLevel", {"level": "debug"}, modern=False))[
            "result"
        ] == {}
        assert await levels_logged() == ["debug", "info", "warning", "error"]
        assert (await gw.request("logging/setLevel", {"level": "error"}, modern=False))[
            "result"
        ] == {}
        assert await levels_logged() == ["error"]


# -- 5. shutdown with a modern listen to a modern server ------------------------------


async def test_shutdown_ends_a_modern_listen_on_py2_with_its_closing_result(
    tmp_path: Path,
) -> None:
    """Issue defect: "A same-era modern `subscriptions/listen` open at shutdown
    ends with -32603 'The gateway is shutting down'; end it with the completion
    result the subscriptions pattern describes" (2026-07-28 subscriptions
    "Graceful Closure"). The client closes the gateway's stdin while its listen
    to the modern-only mcp 2.3.0 server is open."""
    async with stdio_gateway(tmp_path, py2_modern()) as gw:
        await open_listen(gw, toolsListChanged=True)
        assert gw.process.stdin is not None
        await gw.process.stdin.aclose()
        final = await gw.until(lambda m: m.get("id") == LISTEN_ID and "method" not in m, 0)
    assert final.get("result") == {
        "resultType": "complete",
        "_meta": {SUB: LISTEN_ID},
    }, final


async def test_sigterm_ends_a_modern_listen_over_http_with_its_closing_result(
    tmp_path: Path,
) -> None:
    """The same defect over the HTTP front (where it was a 500): SIGTERM while a
    modern client's listen to the modern-only mcp 2.3.0 server is open ends the
    listen's stream with the closing result."""
    async with (
        http_gateway_process(tmp_path, py2_modern()) as (c, process),
        http_listen(c, toolsListChanged=True) as (_, events),
    ):
        with anyio.fail_after(10):
            process.terminate()
            final = await anext(events)
    assert final == {
        "jsonrpc": "2.0",
        "id": LISTEN_ID,
        "result": {"resultType": "complete", "_meta": {SUB: LISTEN_ID}},
    }
