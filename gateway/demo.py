"""`mcp-era-gateway demo`: watch the translation happen.

Runs the real gateway in-process in front of the bundled legacy notes server,
drives it with a scripted modern (2026-07-28) client, and prints both sides of
every exchange: client ↔ gateway on the left of the arrow, gateway ↔ server on
the right. In front of another server (`demo -- COMMAND`), the script is made
from what that server lists: its first tool is called with arguments made
from the tool's input schema.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from collections.abc import Callable
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


# A step: what it explains, and the request (made when its turn comes, from
# the replies so far: the generic script's tool call needs the tool list).
Step = tuple[str, Callable[[list[wire.Message]], tuple[str, dict[str, Any]] | None]]


def _fixed(explain: str, request: tuple[str, dict[str, Any]]) -> Step:
    return explain, lambda replies: request


NOTES_SCRIPT: list[Step] = [_fixed(explain, request) for explain, request in SCRIPT]

# A value of each JSON Schema type, for a required argument the schema gives
# no default, const or enum for.
_SAMPLE: dict[str, Any] = {
    "string": "example",
    "integer": 1,
    "number": 1,
    "boolean": True,
    "array": [],
    "object": {},
    "null": None,
}


def _sample(schema: object) -> Any:
    if not isinstance(schema, dict):
        return "example"
    for key in ("default", "const"):
        if key in schema:
            return schema[key]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    return _SAMPLE.get(kind, "example") if isinstance(kind, str) else "example"


def first_tool_call(tools_list: wire.Message) -> tuple[str, dict[str, Any]] | None:
    """A call of the first listed tool, each required argument given a value
    its schema allows; None when the server lists no tool."""
    result = tools_list.get("result")
    tools = result.get("tools") if isinstance(result, dict) else None
    if not isinstance(tools, list) or not tools or not isinstance(tools[0], dict):
        return None
    tool = tools[0]
    schema = tool.get("inputSchema")
    schema = schema if isinstance(schema, dict) else {}
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = schema.get("required")
    names = [n for n in required if isinstance(n, str)] if isinstance(required, list) else []
    arguments = {name: _sample(props.get(name)) for name in names}
    return _modern("tools/call", {"name": tool.get("name"), "arguments": arguments})


GENERIC_SCRIPT: list[Step] = [
    _fixed("A modern client asks who the server is.", _modern("server/discover")),
    _fixed("tools/list: what the server offers.", _modern("tools/list")),
    (
        "A call of the first tool listed, its required arguments made from its input schema.",
        lambda replies: first_tool_call(replies[-1]),
    ),
]


class _Printer:
    def __init__(self) -> None:
        self.colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        # The terminal's width (COLUMNS, else 100 when stdout is no terminal).
        self.width = shutil.get_terminal_size((100, 24)).columns

    def line(self, who: str, text: str) -> None:
        if self.colour:
            text = f"{_COLOURS[who]}{text}{_RESET}"
        os.write(1, (text + "\n").encode())

    def message(self, who: str, arrow: str, msg: wire.Message) -> None:
        """One line when it fits; else indented JSON, one member a line, so
        that no word or string is ever cut (a long string overflows instead)."""
        body = orjson.dumps(msg).decode()
        if 24 + len(body) <= self.width:
            self.line(who, f"  {arrow:<22}{body}")
            return
        lines = orjson.dumps(msg, option=orjson.OPT_INDENT_2).decode().splitlines()
        self.line(who, f"  {arrow:<22}{lines[0]}")
        for rest in lines[1:]:
            self.line(who, f"  {'':<22}{rest}")


async def run_demo(config: Config) -> int:
    out = _Printer()
    bundled = not config.command and config.upstream_url is None
    cfg = config
    if bundled:
        cfg = config.with_overrides(command=(sys.executable, "-m", "gateway.examples.notes_server"))
    script = NOTES_SCRIPT if bundled else GENERIC_SCRIPT
    upstream = " ".join(cfg.command) if cfg.command else str(cfg.upstream_url)

    def tap(direction: str, msg: wire.Message) -> None:
        if direction == "to-server":
            out.message("gateway", "gateway → server", msg)
        else:
            out.message("server", "server → gateway", msg)

    service = GatewayService(cfg, tap=tap)
    send, receive = anyio.create_memory_object_stream[wire.Message](math.inf)
    link = ClientLink.over_stream(send, transport="demo")
    service.links.add(link)
    out.line("note", f"mcp-era-gateway demo — upstream: {upstream}")
    out.line("note", "Probing the upstream era (server/discover first, initialize on fallback):")
    async with anyio.create_task_group() as tg:
        await service.start(tg)
        profile = await service.pool.ready()
        out.line(
            "note",
            f"→ the upstream is {profile.era.value} "
            f"(protocol {profile.version}, {service.pool.probe_report.get('reason')})\n",
        )
        replies: list[wire.Message] = []
        for number, (explain, make) in enumerate(script, start=1):
            planned = make(replies)
            if planned is None:
                out.line("note", "The server lists no tool: nothing to call.\n")
                continue
            method, params = planned
            out.line("note", explain)
            request = wire.request(number, method, params)
            out.message("client", "client → gateway", request)
            async with anyio.create_task_group() as calls:
                await service.handle_client_message(link, request, calls)
            with anyio.fail_after(cfg.request_timeout):
                reply = await receive.receive()
            out.message("client", "gateway → client", reply)
            replies.append(reply)
            out.line("note", "")
        await service.aclose()
        tg.cancel_scope.cancel()
    out.line(
        "note",
        "Done: the modern client used a legacy server it could not reach directly."
        if bundled or profile.era.value == "legacy"
        else f"Done: the modern client used a {profile.era.value} server through the gateway.",
    )
    return 0
