"""A minimal, fast Streamable HTTP MCP server for benchmarks: a raw ASGI app
on uvicorn + httptools, with fast_server.py's echo logic.

    python bench/fast_http_server.py --era legacy --port 8001   # 2025-11-25 sessions
    python bench/fast_http_server.py --era modern --port 8002   # 2026-07-28, stateless

Endpoint `/mcp`; `GET /readyz` answers 200. Every answer is JSON (never an
SSE stream). `--era legacy`: `initialize` mints an `Mcp-Session-Id` (one
`fast_server.LegacyServer` per session); other requests need it (400 without,
404 for an unknown one); notifications get 202; DELETE ends the session; GET
is 405 (no server-initiated stream). `--era modern`: each POST stands alone;
`MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` must match the body
(400, -32020 otherwise); -32601 is 404, -32602/-32022 are 400. Binds
127.0.0.1 only. Not a conformance fixture.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import orjson
import uvicorn

if __package__ in (None, ""):  # run as `python bench/fast_http_server.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fast_server import LegacyServer, ModernServer

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

JSON = (b"content-type", b"application/json")
PV = "io.modelcontextprotocol/protocolVersion"
NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
_STATUS = {-32700: 400, -32600: 400, -32602: 400, -32020: 400, -32022: 400, -32601: 404}


def _error(code: int, message: str) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}})


def _reply(server: LegacyServer | ModernServer, msg: dict[str, Any]) -> tuple[int, bytes]:
    """(HTTP status, body) for one parsed request or notification (202, no body)."""
    params = msg.get("params")
    if not isinstance(params, dict):
        params = {}
    method = msg.get("method")
    if not isinstance(method, str):
        return 202, b""  # a response: nothing here ever asks the client anything
    if "id" not in msg:
        if isinstance(server, LegacyServer):
            server.on_notification(method, params)
        return 202, b""
    reply = server.handle(msg["id"], method, params)
    if isinstance(reply, bytes):  # `ask` would push a request: not over JSON answers
        reply = None, {"code": -32601, "message": "ask is stdio-only here"}
    result, error = reply
    out: dict[str, Any] = {"jsonrpc": "2.0", "id": msg["id"]}
    if error is not None:
        out["error"] = error
        return _STATUS.get(error["code"], 200), orjson.dumps(out)
    out["result"] = result
    return 200, orjson.dumps(out)


async def _body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:  # ends with the last body chunk
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _respond(
    send: Send, status: int, body: bytes, extra: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    headers = [JSON, (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _header_problem(headers: dict[bytes, bytes], msg: dict[str, Any]) -> str | None:
    """Why a modern POST's metadata headers disagree with its body, or None."""
    params = msg.get("params")
    params = params if isinstance(params, dict) else {}
    meta = params.get("_meta")
    meta = meta if isinstance(meta, dict) else {}
    if headers.get(b"mcp-protocol-version", b"").decode() != meta.get(PV):
        return "MCP-Protocol-Version does not match _meta"
    if headers.get(b"mcp-method", b"").decode() != msg.get("method"):
        return "Mcp-Method does not match the body"
    field = NAMED.get(str(msg.get("method")))
    if field is not None and headers.get(b"mcp-name", b"").decode() != params.get(field):
        return "Mcp-Name does not match the body"
    return None


class App:
    def __init__(self, era: str) -> None:
        self.era = era
        self.sessions: dict[str, LegacyServer] = {}
        self.modern = ModernServer()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/readyz":
            await _respond(send, 200, b'{"status":"ready"}')
            return
        if path != "/mcp":
            await _respond(send, 404, _error(-32601, "Not found"))
            return
        headers = dict(scope["headers"])
        if method == "POST":
            body = await _body(receive)
            if self.era == "legacy":
                await self._legacy(headers, body, send)
            else:
                await self._modern(headers, body, send)
        elif method == "DELETE" and self.era == "legacy":
            sid = headers.get(b"mcp-session-id", b"").decode()
            found = self.sessions.pop(sid, None) is not None
            await _respond(send, 200 if found else 404, b"{}")
        else:
            await _respond(send, 405, _error(-32600, "Method not allowed"))

    async def _legacy(self, headers: dict[bytes, bytes], body: bytes, send: Send) -> None:
        try:
            msg = orjson.loads(body)
        except orjson.JSONDecodeError:
            await _respond(send, 400, _error(-32700, "Parse error"))
            return
        if not isinstance(msg, dict):
            await _respond(send, 400, _error(-32600, "Invalid request"))
            return
        raw = headers.get(b"mcp-session-id")
        extra: tuple[tuple[bytes, bytes], ...] = ()
        if raw is None:
            if msg.get("method") != "initialize":
                await _respond(send, 400, _error(-32600, "Bad Request: Missing session ID"))
                return
            sid = secrets.token_hex(16)
            server = self.sessions[sid] = LegacyServer()
            extra = ((b"mcp-session-id", sid.encode()),)
        else:
            found = self.sessions.get(raw.decode())
            if found is None:
                await _respond(send, 404, _error(-32600, "Session not found"))
                return
            server = found
        status, out = _reply(server, msg)
        await _respond(send, 202 if status == 202 else 200, out, extra)  # errors: 200

    async def _modern(self, headers: dict[bytes, bytes], body: bytes, send: Send) -> None:
        try:
            msg = orjson.loads(body)
        except orjson.JSONDecodeError:
            await _respond(send, 400, _error(-32700, "Parse error"))
            return
        if not isinstance(msg, dict):
            await _respond(send, 400, _error(-32600, "Invalid request"))
            return
        if "id" not in msg or "method" not in msg:
            await _respond(send, 202, b"")
            return
        problem = _header_problem(headers, msg) if msg["method"] != "initialize" else None
        if problem is not None:
            error = {"code": -32020, "message": f"Header mismatch: {problem}"}
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": error}
            await _respond(send, 400, orjson.dumps(reply))
            return
        await _respond(send, *_reply(self.modern, msg))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--era", choices=["legacy", "modern"], required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        App(args.era),
        host="127.0.0.1",
        port=args.port,
        http="httptools",
        loop="asyncio",
        lifespan="off",
        access_log=False,
        log_level="warning",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
