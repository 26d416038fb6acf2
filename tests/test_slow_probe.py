"""A modern server slower to start than `probe_timeout` is still found modern
(found by the dual-era work: mcp 2.x took 2.5 to 5 s to answer its first request
on a loaded machine; the gateway took the silence for a legacy server, sent
`initialize`, got -32022 from a process that the late discover had already
made modern, and failed every first request with "initialize refused with
modern error"). DESIGN §4: a verdict the server contradicts is re-probed."""

from __future__ import annotations

from typing import Any

import pytest

from gateway import wire
from tests.scripted import ScriptedServer, gateway, modern_server

pytestmark = pytest.mark.anyio


async def hello(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "modern hello"}]}


def slow_to_start(seen: list[wire.Message]) -> Any:
    """A modern-only server whose first request goes unanswered within the
    probe timeout (it is still starting), but fixes it as modern all the same."""
    modern = modern_server({"tools/call": hello}, log=seen)

    async def behaviour(server: ScriptedServer) -> None:
        first = await server.recv()
        seen.append(first)
        # Never answered: the gateway gave up on it (its reply would be late).
        await modern(server)

    return behaviour


async def test_a_silent_probe_contradicted_by_initialize_is_probed_again() -> None:
    seen: list[wire.Message] = []
    async with gateway(slow_to_start(seen), probe_timeout=0.05) as c:
        pool = c.service.pool
        assert pool.era_name == "modern"
        assert "DiscoverResult after a silent probe" in pool.probe_report["reason"]
        reply = await c.call("tools/call", {"name": "hello", "arguments": {}})
        assert reply["result"]["content"][0]["text"] == "modern hello"
    methods = [m.get("method") for m in seen if "id" in m]
    # The discover that timed out, the initialize it refused, the discover again.
    assert methods[:3] == ["server/discover", "initialize", "server/discover"]
