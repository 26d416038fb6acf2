"""A small legacy-era (2025-11-25) MCP server, written on the wire with no SDK.

It is the bundled example the gateway wraps: a notebook with a `search_notes`
and an `add_note` tool, the notes as resources, and a prompt. It speaks only
the initialize handshake, so a modern client cannot reach it directly — which
is the point of putting the gateway in front of it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")

NOTES: dict[str, str] = {
    "welcome": "Welcome to the notes server. Try searching for 'gateway'.",
    "gateway": "mcp-era-gateway lets modern clients reach legacy servers and back.",
    "eras": "Legacy MCP uses initialize; modern MCP (2026-07-28) is stateless.",
}

TOOLS = [
    {
        "name": "search_notes",
        "description": "Find notes whose text contains a word (case-insensitive).",
        "inputSchema": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "word to look for"}},
            "required": ["query"],
        },
    },
    {
        "name": "add_note",
        "description": "Add or replace a note.",
        "inputSchema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "text": {"type": "string"}},
            "required": ["name", "text"],
        },
    },
]


def send(msg: dict[str, Any]) -> None:
    # This process's stdout is its MCP channel (it is the upstream server).
    data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
    while data:
        data = data[os.write(1, data) :]


def error(msg_id: Any, code: int, message: str) -> None:
    send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})


def result(msg_id: Any, value: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "id": msg_id, "result": value})


def call_tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
    if name == "search_notes":
        query = str(args.get("query", "")).lower()
        hits = [n for n, text in sorted(NOTES.items()) if query in text.lower() or query in n]
        text = "\n".join(f"{n}: {NOTES[n]}" for n in hits) or f"no note mentions {query!r}"
        return {
            "content": [{"type": "text", "text": text}],
            "structuredContent": {"matches": hits},
            "isError": False,
        }
    if name == "add_note":
        NOTES[str(args["name"])] = str(args["text"])
        notify("notifications/resources/list_changed")
        return {"content": [{"type": "text", "text": f"saved {args['name']}"}], "isError": False}
    raise KeyError(name)


def notify(method: str, params: dict[str, Any] | None = None) -> None:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    send(msg)


def handle(msg: dict[str, Any], state: dict[str, Any]) -> None:  # noqa: PLR0911 - the example server's dispatch on the method
    method = msg.get("method")
    msg_id = msg.get("id")
    params = msg.get("params") or {}
    if msg_id is None:
        if method == "notifications/initialized":
            state["ready"] = True
        return
    if method == "initialize":
        asked = params.get("protocolVersion")
        state["initialized"] = True
        return result(
            msg_id,
            {
                "protocolVersion": asked if asked in VERSIONS else VERSIONS[0],
                "capabilities": {"tools": {}, "resources": {"listChanged": True}, "prompts": {}},
                "serverInfo": {"name": "notes-example", "version": "1.0.0"},
                "instructions": "A notebook. search_notes finds notes; add_note writes one.",
            },
        )
    if method == "ping":
        return result(msg_id, {})
    if not state.get("initialized"):
        return error(msg_id, -32600, "Server not initialized")
    if method == "tools/list":
        return result(msg_id, {"tools": TOOLS})
    if method == "tools/call":
        try:
            return result(msg_id, call_tool(params.get("name", ""), params.get("arguments") or {}))
        except KeyError as exc:
            return error(msg_id, -32602, f"Unknown tool or missing argument: {exc}")
    if method == "resources/list":
        return result(
            msg_id,
            {
                "resources": [
                    {"uri": f"notes://{n}", "name": n, "mimeType": "text/plain"}
                    for n in sorted(NOTES)
                ]
            },
        )
    if method == "resources/read":
        uri = str(params.get("uri", ""))
        name = uri.removeprefix("notes://")
        if name not in NOTES:
            return error(msg_id, -32002, f"Resource not found: {uri}")
        return result(
            msg_id, {"contents": [{"uri": uri, "mimeType": "text/plain", "text": NOTES[name]}]}
        )
    if method == "prompts/list":
        return result(
            msg_id, {"prompts": [{"name": "summarize_notes", "description": "Summarize all notes"}]}
        )
    if method == "prompts/get":
        text = "Summarize these notes:\n" + "\n".join(f"- {t}" for t in NOTES.values())
        return result(
            msg_id, {"messages": [{"role": "user", "content": {"type": "text", "text": text}}]}
        )
    return error(msg_id, -32601, f"Method not found: {method}")


def main() -> None:
    state: dict[str, Any] = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
        except ValueError:
            error(None, -32700, "Parse error")
            continue
        if isinstance(msg, dict) and "method" in msg:
            handle(msg, state)


if __name__ == "__main__":
    main()
