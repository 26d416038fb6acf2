"""A minimal, fast stdio MCP server for benchmarks (stdlib + orjson only).

    python bench/fast_server.py --era legacy   # initialize handshake (2025-11-25)
    python bench/fast_server.py --era modern   # 2026-07-28 only: server/discover, _meta

One `echo` tool answers at once. Requests are read and answered strictly in
order, one line per answer, each written (flushed) as soon as it is built, so
pipelined requests come back as fast as the pipe allows. Not a conformance
fixture: it checks only what the benchmark paths exercise.
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


class LegacyServer:
    def __init__(self) -> None:
        self.initialized = False

    def handle(self, method: str, params: dict[str, Any]) -> Reply:
        if method == "initialize":
            asked = params.get("protocolVersion")
            self.initialized = True
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
            return _call_tool(params)
        if method == "tools/list":
            return {"tools": [ECHO_TOOL]}, None
        return _err(-32601, f"Method not found: {method}")


class ModernServer:
    def handle(self, method: str, params: dict[str, Any]) -> Reply:
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


def _answer(server: LegacyServer | ModernServer, line: bytes) -> bytes | None:
    try:
        msg = orjson.loads(line)
    except orjson.JSONDecodeError:
        return b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}\n'
    if not isinstance(msg, dict) or "method" not in msg or "id" not in msg:
        return None  # notifications and stray responses need no answer
    params = msg.get("params")
    result, error = server.handle(msg["method"], params if isinstance(params, dict) else {})
    out: dict[str, Any] = {"jsonrpc": "2.0", "id": msg["id"]}
    if error is not None:
        out["error"] = error
    else:
        out["result"] = result
    return orjson.dumps(out) + b"\n"


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
                answer = _answer(server, line)
                if answer is not None:
                    _write_all(out_fd, answer)


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
