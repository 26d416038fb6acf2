"""A minimal, fast stdio MCP server for benchmarks (stdlib + orjson only).

    python bench/fast_server.py --era legacy   # initialize handshake (2025-11-25)
    python bench/fast_server.py --era modern   # 2026-07-28 only: server/discover, _meta

One `echo` tool answers at once. Requests are read and answered strictly in
order, one line per answer, each written (flushed) as soon as it is built, so
pipelined requests come back as fast as the pipe allows. Not a conformance
fixture: it checks only what the benchmark paths exercise.

`--era legacy` also has an `ask` tool (the MRTR benchmark): it sends the
client an `elicitation/create` (ids `elicit-1`, `elicit-2`, ...) and answers
the call with `Hello, <content.name>` once the client's answer arrives. The
read loop never blocks on it: other requests, and other `ask` calls, are
served while an elicitation waits.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

import orjson

MODERN = "2026-07-28"
LEGACY = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
PV = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO = {"name": "bench-fast-server", "version": "1.0.0"}
ECHO_TOOL = {
    "name": "echo",
    "description": "Return the text unchanged.",
    "inputSchema": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
}
ASK_TOOL = {
    "name": "ask",
    "description": "Ask the client for a name (elicitation) and greet it.",
    "inputSchema": {"type": "object", "properties": {}},
}
ELICIT_PARAMS = {
    "message": "Your name?",
    "requestedSchema": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    },
}
DISCOVER = {
    "resultType": "complete",
    "supportedVersions": [MODERN],
    "capabilities": {"tools": {}},
    "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO},
    "ttlMs": 0,
    "cacheScope": "private",
}

Reply = tuple[dict[str, Any] | None, dict[str, Any] | None]  # (result, error)


def _err(code: int, message: str, data: Any = None) -> Reply:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return None, error


def _call_tool(params: dict[str, Any]) -> Reply:
    if params.get("name") != "echo":
        return _err(-32602, f"Unknown tool: {params.get('name')}")
    text = (params.get("arguments") or {}).get("text")
    if not isinstance(text, str):
        return _err(-32602, "echo needs arguments.text (string)")
    return {"content": [{"type": "text", "text": text}], "isError": False}, None


def _text(text: str, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def _line(msg: dict[str, Any]) -> bytes:
    return orjson.dumps(msg) + b"\n"


class LegacyServer:
    def __init__(self) -> None:
        self.initialized = False
        self.client_elicits = False
        self.waiting: dict[str, Any] = {}  # our elicitation id -> the tools/call id
        self._next_elicit = 0

    def handle(self, msg_id: Any, method: str, params: dict[str, Any]) -> Reply | bytes:
        """The answer, or (bytes) a request to the client to send instead."""
        if method == "initialize":
            asked = params.get("protocolVersion")
            self.initialized = True
            caps = params.get("capabilities")
            self.client_elicits = isinstance(caps, dict) and isinstance(
                caps.get("elicitation"), dict
            )
            return {
                "protocolVersion": asked if asked in LEGACY else LEGACY[0],
                "capabilities": {"tools": {}},
                "serverInfo": SERVER_INFO,
            }, None
        if method == "ping":
            return {}, None
        if method == "server/discover":
            return _err(-32601, "Method not found: server/discover")
        if not self.initialized:
            return _err(-32600, "Server not initialized")
        if method == "tools/call":
            if params.get("name") == "ask":
                return self._ask(msg_id)
            return _call_tool(params)
        if method == "tools/list":
            return {"tools": [ECHO_TOOL, ASK_TOOL]}, None
        return _err(-32601, f"Method not found: {method}")

    def _ask(self, call_id: Any) -> Reply | bytes:
        if not self.client_elicits:
            return _text("ask needs a client that declared elicitation", is_error=True), None
        self._next_elicit += 1
        elicit_id = f"elicit-{self._next_elicit}"
        self.waiting[elicit_id] = call_id
        return _line(
            {
                "jsonrpc": "2.0",
                "id": elicit_id,
                "method": "elicitation/create",
                "params": ELICIT_PARAMS,
            }
        )

    def on_response(self, msg: dict[str, Any]) -> bytes | None:
        """The client's answer to one of our elicitations: answer its call."""
        call_id = self.waiting.pop(msg.get("id"), None)  # type: ignore[arg-type]
        if call_id is None:
            return None  # not ours, or the call was cancelled meanwhile
        result = msg.get("result")
        content = result.get("content") if isinstance(result, dict) else None
        name = content.get("name") if isinstance(content, dict) else None
        if result is None or result.get("action") != "accept" or not isinstance(name, str):
            answer = _text(f"no name: {result or msg.get('error')}", is_error=True)
        else:
            answer = _text(f"Hello, {name}")
        return _line({"jsonrpc": "2.0", "id": call_id, "result": answer})

    def on_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "notifications/cancelled":
            target = params.get("requestId")
            for elicit_id, call_id in list(self.waiting.items()):
                if call_id == target:
                    del self.waiting[elicit_id]


class ModernServer:
    def handle(self, msg_id: Any, method: str, params: dict[str, Any]) -> Reply | bytes:
        meta = params.get("_meta")
        if not isinstance(meta, dict):
            meta = {}
        version = meta.get(PV)
        if method == "initialize":
            return _err(-32022, "Unsupported protocol version", {"supported": [MODERN]})
        if not isinstance(version, str) or not isinstance(meta.get(CAPS), dict):
            return _err(-32602, f"Invalid params: _meta needs {PV} and {CAPS}")
        if version != MODERN:
            return _err(
                -32022,
                "Unsupported protocol version",
                {"supported": [MODERN], "requested": version},
            )
        if method == "server/discover":
            return DISCOVER, None
        if method == "tools/call":
            result, error = _call_tool(params)
            if result is not None:
                result["resultType"] = "complete"
            return result, error
        if method == "tools/list":
            return {
                "tools": [ECHO_TOOL],
                "resultType": "complete",
                "ttlMs": 0,
                "cacheScope": "private",
            }, None
        return _err(-32601, f"Method not found: {method}")


def answer(server: LegacyServer | ModernServer, line: bytes) -> bytes | None:
    """What the server writes for one input line (an answer or a request), if anything."""
    try:
        msg = orjson.loads(line)
    except orjson.JSONDecodeError:
        return b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}\n'
    if not isinstance(msg, dict):
        return None
    params = msg.get("params")
    if not isinstance(params, dict):
        params = {}
    if "method" not in msg:  # a response: only the legacy server asks anything
        return server.on_response(msg) if isinstance(server, LegacyServer) else None
    if "id" not in msg:
        if isinstance(server, LegacyServer):
            server.on_notification(msg["method"], params)
        return None
    reply = server.handle(msg["id"], msg["method"], params)
    if isinstance(reply, bytes):
        return reply
    result, error = reply
    out: dict[str, Any] = {"jsonrpc": "2.0", "id": msg["id"]}
    if error is not None:
        out["error"] = error
    else:
        out["result"] = result
    return _line(out)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def serve(server: LegacyServer | ModernServer, in_fd: int = 0, out_fd: int = 1) -> None:
    buf = b""
    while True:
        chunk = os.read(in_fd, 65536)
        if not chunk:
            return
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if line.strip():
                out = answer(server, line)
                if out is not None:
                    _write_all(out_fd, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--era", choices=["legacy", "modern"], required=True)
    args = parser.parse_args()
    server = LegacyServer() if args.era == "legacy" else ModernServer()
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):
        serve(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
