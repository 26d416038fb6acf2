"""`mcp-era-gateway demo`: watch the translation happen.

Runs the real gateway in-process in front of the bundled legacy notes server,
drives it with a scripted modern (2026-07-28) client, and prints both sides of
every exchange: client ↔ gateway on the left of the arrow, gateway ↔ server on
the right.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import anyio
import orjson

from gateway import era, wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.runtime.service import GatewayService

_COLOURS = {"client": "\033[36m", "gateway": "\033[33m", "server": "\033[35m", "note": "\033[1m"}
_RESET = "\033[0m"


def _modern(method: str, params: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    meta = {
        era.PROTOCOL_VERSION: era.NEWEST_MODERN,
        era.CLIENT_CAPABILITIES: {},
        era.CLIENT_INFO: {"name": "demo-modern-client", "version": "1.0"},
    }
    return method, {**(params or {}), "_meta": meta}


SCRIPT: list[tuple[str, tuple[str, dict[str, Any]]]] = [
    (
        "A modern client asks who the server is. The legacy server has no server/discover;\n"
        "the gateway answers from the session it opened with initialize.",
        _modern("server/discover"),
    ),
    (
        "tools/list: _meta's protocol keys are removed on the way up; the answer gains\n"
        "resultType, serverInfo and cache hints on the way down.",
        _modern("tools/list"),
    ),
    (
        "A tool call, forwarded under a gateway-chosen upstream id.",
        _modern("tools/call", {"name": "search_notes", "arguments": {"query": "gateway"}}),
    ),
    (
        "A missing resource: the legacy server says -32002, a modern client hears -32602.",
        _modern("resources/read", {"uri": "notes://missing"}),
    ),
    ("ping was removed in 2026-07-28: a modern ping is an unknown method.", _modern("ping")),
]


class _Printer:
    def __init__(self) -> None:
        self.colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        self.width = 100

    def line(self, who: str, text: str) -> None:
        if self.colour:
            text = f"{_COLOURS[who]}{text}{_RESET}"
        os.write(1, (text + "\n").encode())

    def message(self, who: str, arrow: str, msg: wire.Message) -> None:
        body = orjson.dumps(msg).decode()
        step = self.width - 24
        wrapped = [body[i : i + step] for i in range(0, len(body), step)] or [""]
        self.line(who, f"  {arrow:<22}{wrapped[0]}")
        for rest in wrapped[1:]:
            self.line(who, f"  {'':<22}{rest}")


async def run_demo(config: Config) -> int:
    out = _Printer()
    cfg = config.with_overrides(
        command=config.command or (sys.executable, "-m", "gateway.examples.notes_server")
    )

    def tap(direction: str, msg: wire.Message) -> None:
        if direction == "to-server":
            out.message("gateway", "gateway → server", msg)
        else:
            out.message("server", "server → gateway", msg)

    service = GatewayService(cfg, tap=tap)
    send, receive = anyio.create_memory_object_stream[wire.Message](math.inf)
    link = ClientLink.over_stream(send, transport="demo")
    service.links.add(link)
    out.line("note", f"mcp-era-gateway demo — upstream: {' '.join(cfg.command)}")
    out.line("note", "Probing the upstream era (server/discover first, initialize on fallback):")
    async with anyio.create_task_group() as tg:
        await service.start(tg)
        profile = await service.pool.ready()
        out.line(
            "note",
            f"→ the upstream is {profile.era.value} "
            f"(protocol {profile.version}, {service.pool.probe_report.get('reason')})\n",
        )
        for number, (explain, (method, params)) in enumerate(SCRIPT, start=1):
            out.line("note", explain)
            request = wire.request(number, method, params)
            out.message("client", "client → gateway", request)
            async with anyio.create_task_group() as calls:
                await service.handle_client_message(link, request, calls)
            with anyio.fail_after(cfg.request_timeout):
                reply = await receive.receive()
            out.message("client", "gateway → client", reply)
            out.line("note", "")
        await service.aclose()
        tg.cancel_scope.cancel()
    out.line("note", "Done: the modern client used a legacy server it could not reach directly.")
    return 0
