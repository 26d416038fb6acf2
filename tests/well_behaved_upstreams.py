"""Well-behaved scripted upstreams of either era, with an answer for every
method a fuzzed client can get through (tools, prompts, resources, logging,
completion): what runs behind the fronts while hostile clients hit them.
From tests/test_fuzz_fronts.py."""

from __future__ import annotations

from typing import Any

from gateway import wire
from tests.scripted import Behaviour, ScriptedServer, legacy_server, modern_server


async def _echo(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    args = (msg.get("params") or {}).get("arguments")
    text = args.get("text") if isinstance(args, dict) else None
    return {"content": [{"type": "text", "text": text if isinstance(text, str) else "ok"}]}


async def _prompt(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": {"type": "text", "text": "p"}}]}


async def _read(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {"contents": [{"uri": "mem://a", "text": "a"}]}


async def _empty(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {}


async def _list(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}


_HANDLERS: dict[str, Any] = {
    "tools/call": _echo,
    "tools/list": _list,
    "prompts/get": _prompt,
    "resources/read": _read,
    "resources/subscribe": _empty,
    "resources/unsubscribe": _empty,
    "logging/setLevel": _empty,
    "completion/complete": _empty,
}
_CAPS = {
    "tools": {"listChanged": True},
    "prompts": {},
    "resources": {"subscribe": True, "listChanged": True},
    "logging": {},
}


def upstream_of(kind: str) -> Behaviour:
    if kind == "legacy":
        return legacy_server(_HANDLERS, capabilities=_CAPS)
    return modern_server(_HANDLERS, capabilities=_CAPS)
