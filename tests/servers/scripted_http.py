"""Scriptable MCP servers over real HTTP, for the HTTP back's tests.

An ASGI app served by uvicorn inside the test's own event loop, on
127.0.0.1 and an ephemeral port. Every HTTP request is recorded (method,
headers, body); a behaviour decides each answer: a JSON body, a status, or an
SSE stream fed by a task. Three behaviours play the three kinds of server:

- `ModernHttp`: 2026-07-28 Streamable HTTP (POST only, metadata headers
  validated, -32020 / -32022 refusals, JSON or SSE answers);
- `LegacyHttp`: 2025-11-25 Streamable HTTP as mcp 1.x plays it (session ids,
  "server-error" refusals, server requests on the POST's SSE stream, a GET
  stream, 404 once a session is gone, DELETE);
- `OldSseHttp`: the deprecated 2024-11-05 HTTP+SSE transport.
"""

from __future__ import annotations

import base64
import itertools
import math
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import orjson
import uvicorn
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gateway import era, wire

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def sse(msg: wire.Message) -> bytes:
    return b"event: message\ndata: " + orjson.dumps(msg) + b"\n\n"


PRIMING = b"id: prime-0\ndata: \n\n"
COMMENT = b": keep-alive\n\n"


@dataclass
class HttpRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    disconnected: anyio.Event = field(default_factory=anyio.Event)

    @property
    def message(self) -> Any:
        return orjson.loads(self.body) if self.body else None

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-encoded unless bytes
    headers: dict[str, str] = field(default_factory=dict)
    stream: MemoryObjectReceiveStream[bytes] | None = None  # an SSE stream

    @staticmethod
    def json(body: Any, status: int = 200, **headers: str) -> Reply:
        return Reply(status, body, headers)


Handler = Callable[[HttpRequest, "HttpServer"], Awaitable[Reply]]


class HttpServer:
    """The app and what it saw. `tg` runs the tasks that feed SSE streams."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[HttpRequest] = []
        self.tg: TaskGroup | None = None
        self.url = ""
        self._changed = anyio.Event()
        self._streams: list[MemoryObjectSendStream[bytes] | MemoryObjectReceiveStream[bytes]] = []

    def stream(self) -> tuple[MemoryObjectSendStream[bytes], MemoryObjectReceiveStream[bytes]]:
        """A reply stream; both ends are closed when the server stops."""
        send, receive = anyio.create_memory_object_stream[bytes](math.inf)
        self._streams += [send, receive]
        return send, receive

    def close_streams(self) -> None:
        for stream in self._streams:
            stream.close()

    def feed(self, work: Callable[[MemoryObjectSendStream[bytes]], Awaitable[None]]) -> Reply:
        """An SSE reply whose events `work` writes (closing the stream ends it)."""
        send, receive = self.stream()

        async def run() -> None:
            async with send:
                await work(send)

        assert self.tg is not None
        self.tg.start_soon(run)
        return Reply(headers={"content-type": "text/event-stream"}, stream=receive)

    def posts(self, method: str | None = None) -> list[HttpRequest]:
        """The POSTs received, or those whose JSON-RPC method is `method`."""
        out = [r for r in self.requests if r.method == "POST"]
        if method is None:
            return out
        return [r for r in out if isinstance(r.message, dict) and r.message.get("method") == method]

    async def wait_for(
        self, check: Callable[[HttpRequest], bool], timeout: float = 3
    ) -> HttpRequest:
        with anyio.fail_after(timeout):
            while True:  # each pass waits for a new request
                for request in self.requests:
                    if check(request):
                        return request
                await self._changed.wait()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        chunks: list[bytes] = []
        while True:
            event = await receive()
            chunks.append(event.get("body", b""))
            if not event.get("more_body"):
                break
        request = HttpRequest(
            scope["method"],
            scope["path"],
            scope["query_string"].decode(),
            {k.decode().lower(): v.decode() for k, v in scope["headers"]},
            b"".join(chunks),
        )
        self.requests.append(request)
        self._changed.set()
        self._changed = anyio.Event()
        reply = await self.handler(request, self)
        headers = dict(reply.headers)
        body = b""
        if reply.body is not None:
            body = reply.body if isinstance(reply.body, bytes) else orjson.dumps(reply.body)
            headers.setdefault("content-type", "application/json")
        await send(
            {
                "type": "http.response.start",
                "status": reply.status,
                "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
            }
        )
        if reply.stream is None:
            await send({"type": "http.response.body", "body": body})
            return
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                request.disconnected.set()
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            async with reply.stream:
                async for chunk in reply.stream:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            tg.cancel_scope.cancel()


@asynccontextmanager
async def serve(handler: Handler, path: str = "/mcp") -> AsyncIterator[HttpServer]:
    """Serve `handler` on 127.0.0.1 (ephemeral port) for the block's duration."""
    app = HttpServer(handler)
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say so,
    # and without it every keep-alive answer waits 40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    app.url = f"http://127.0.0.1:{sock.getsockname()[1]}{path}"
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        app.tg = tg
        # startup() without main_loop()/shutdown(): uvicorn's own shutdown
        # sleeps a fixed 0.1 s, and tests own no signals.
        config.load()
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[sock])
        try:
            yield app
        finally:
            app.close_streams()
            for listener in server.servers:
                listener.close()
            for conn in list(server.server_state.connections):
                conn.transport.close()
            for task in list(server.server_state.tasks):
                task.cancel()
            tg.cancel_scope.cancel()
            sock.close()


# -- common bits ---------------------------------------------------------------------
DISCOVER = {
    "resultType": "complete",
    "supportedVersions": ["2026-07-28"],
    "capabilities": {"tools": {"listChanged": True}},
    "_meta": {era.SERVER_INFO: {"name": "scripted-http-modern", "version": "2"}},
    "ttlMs": 0,
    "cacheScope": "public",
}


def decode_header(value: str) -> str:
    if value.startswith("=?base64?") and value.endswith("?="):
        return base64.b64decode(value[9:-2]).decode()
    return value


def annotated(schema: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    """The (path, name) of each x-mcp-header in a schema's properties chain."""
    out: list[tuple[tuple[str, ...], str]] = []
    if isinstance(schema, dict):
        if "x-mcp-header" in schema and path:
            out.append((path, schema["x-mcp-header"]))
        for name, sub in (schema.get("properties") or {}).items():
            out += annotated(sub, (*path, name))
    return out


CallHandler = Callable[[dict[str, Any], HttpRequest, HttpServer], Awaitable[Reply | dict[str, Any]]]


@dataclass
class ModernHttp:
    """A modern-only server. `tools` are listed (and their x-mcp-header
    arguments enforced); `calls` answer tools/call by tool name with a result
    or a whole Reply (e.g. an SSE stream). `enforce` = the tool names whose
    headers it checks (all when None)."""

    tools: list[dict[str, Any]] = field(default_factory=list)
    calls: dict[str, CallHandler] = field(default_factory=dict)
    enforce: set[str] | None = None
    listed: int = 0

    async def __call__(self, req: HttpRequest, server: HttpServer) -> Reply:
        if req.method != "POST":
            return Reply(405)
        msg = req.message
        if "id" not in msg:
            return Reply(202)
        msg_id, method = msg["id"], msg["method"]
        params = msg.get("params") or {}
        version = (params.get("_meta") or {}).get(era.PROTOCOL_VERSION)
        if version is None:
            return Reply.json(
                wire.error_response(
                    msg_id, -32022, "Unsupported protocol version", {"supported": ["2026-07-28"]}
                ),
                400,
            )
        mismatch = self._check_headers(req, msg)
        if mismatch is not None:
            return Reply.json(wire.error_response(msg_id, -32020, mismatch), 400)
        if method == "server/discover":
            return Reply.json(wire.result_response(msg_id, DISCOVER))
        if method == "tools/list":
            self.listed += 1
            return Reply.json(
                wire.result_response(msg_id, {"resultType": "complete", "tools": self.tools})
            )
        if method == "tools/call" and params.get("name") in self.calls:
            out = await self.calls[params["name"]](msg, req, server)
            if isinstance(out, Reply):
                return out
            return Reply.json(wire.result_response(msg_id, {"resultType": "complete", **out}))
        return Reply.json(wire.error_response(msg_id, -32601, f"Method not found: {method}"), 404)

    def _check_headers(self, req: HttpRequest, msg: wire.Message) -> str | None:
        params = msg.get("params") or {}
        if req.header("mcp-protocol-version") != params["_meta"][era.PROTOCOL_VERSION]:
            return "MCP-Protocol-Version does not match the body"
        if req.header("mcp-method") != msg["method"]:
            return "Mcp-Method does not match the body"
        source = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
        key = source.get(msg["method"])
        if key is not None:
            got = req.header("mcp-name")
            if got is None or decode_header(got) != params.get(key):
                return "Mcp-Name does not match the body"
        if msg["method"] != "tools/call":
            return None
        name = params.get("name")
        if self.enforce is not None and name not in self.enforce:
            return None
        tool = next((t for t in self.tools if t["name"] == name), None)
        for path, header in annotated(tool["inputSchema"] if tool else None):
            value: Any = params.get("arguments")
            for step in path:
                value = value.get(step) if isinstance(value, dict) else None
            got = req.header(f"mcp-param-{header}")
            if value is None:
                if got is not None:
                    return f"Mcp-Param-{header} without a value in the body"
                continue
            text = str(value).lower() if isinstance(value, bool) else str(value)
            if got is None or decode_header(got) != text:
                return f"Mcp-Param-{header} header is missing or does not match"
        return None


@dataclass
class LegacySession:
    sid: str
    version: str
    capabilities: dict[str, Any]
    get_stream: MemoryObjectSendStream[bytes] | None = None
    get_opened: anyio.Event = field(default_factory=anyio.Event)
    answers: dict[wire.RequestId, tuple[anyio.Event, list[wire.Message]]] = field(
        default_factory=dict
    )
    asked: itertools.count[int] = field(default_factory=itertools.count)


class Ask:
    """What a legacy tool handler gets: a way to ask the client on its stream."""

    def __init__(
        self, session: LegacySession, out: MemoryObjectSendStream[bytes], msg: wire.Message
    ) -> None:
        self.session, self.out, self.msg = session, out, msg

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.out.send(sse(wire.notification(method, params)))

    async def ask(self, method: str, params: dict[str, Any]) -> wire.Message:
        msg_id = next(self.session.asked)
        done, box = anyio.Event(), list[wire.Message]()
        self.session.answers[msg_id] = (done, box)
        await self.out.send(sse(wire.request(msg_id, method, params)))
        with anyio.fail_after(5):
            await done.wait()
        return box[0]


LegacyTool = Callable[[Ask, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass
class LegacyHttp:
    """A 2025-11-25 server with sessions, as mcp 1.x serves it: every POST
    answer is an SSE stream (priming event first when `priming`)."""

    tools: dict[str, LegacyTool] = field(default_factory=dict)
    version: str = "2025-11-25"
    priming: bool = False
    get_allowed: bool = True
    # Runs on a tools/list's own stream before its result: a server that
    # asks its client something then.
    on_tools_list: Callable[[Ask], Awaitable[None]] | None = None
    sessions: dict[str, LegacySession] = field(default_factory=dict)
    ended: list[str] = field(default_factory=list)
    _sids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def refuse(self, status: int, message: str) -> Reply:
        # mcp 1.x: the id is "server-error", and a fresh session id comes along.
        body = {
            "jsonrpc": "2.0",
            "id": "server-error",
            "error": {"code": -32600, "message": message},
        }
        return Reply.json(body, status, **{"mcp-session-id": f"junk-{len(self.ended)}"})

    def end_session(self, sid: str) -> None:
        session = self.sessions.pop(sid)
        self.ended.append(sid)
        if session.get_stream is not None:
            session.get_stream.close()

    async def push(self, sid: str, msg: wire.Message) -> None:
        """Send on the session's GET stream (waits until the client opened it)."""
        session = self.sessions[sid]
        with anyio.fail_after(3):
            await session.get_opened.wait()
        stream = session.get_stream
        assert stream is not None
        await stream.send(sse(msg))

    async def __call__(self, req: HttpRequest, server: HttpServer) -> Reply:
        sid = req.header("mcp-session-id")
        if req.method == "GET":
            return self._get(sid, server)
        if req.method == "DELETE":
            if sid in self.sessions:
                self.end_session(sid)
                return Reply(200)
            return Reply(404)
        msg = req.message
        if msg.get("method") == "initialize":
            return self._initialize(msg, server)
        if sid is None:
            return self.refuse(400, "Bad Request: Missing session ID")
        session = self.sessions.get(sid)
        if session is None:
            return self.refuse(404, "Session not found")
        if req.header("mcp-protocol-version") != session.version:
            return self.refuse(400, "Bad Request: unsupported protocol version")
        if "method" not in msg:
            waiting = session.answers.pop(msg["id"], None)
            if waiting is not None:
                waiting[1].append(msg)
                waiting[0].set()
            return Reply(202)
        if "id" not in msg:
            return Reply(202)
        return self._request(session, msg, server)

    def _initialize(self, msg: wire.Message, server: HttpServer) -> Reply:
        sid = f"sess-{next(self._sids)}"
        self.sessions[sid] = LegacySession(sid, self.version, msg["params"]["capabilities"])
        result = {
            "protocolVersion": self.version,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "scripted-http-legacy", "version": "1"},
        }

        async def work(out: MemoryObjectSendStream[bytes]) -> None:
            if self.priming:
                await out.send(PRIMING)
            await out.send(sse(wire.result_response(msg["id"], result)))

        reply = server.feed(work)
        reply.headers["mcp-session-id"] = sid
        return reply

    def _get(self, sid: str | None, server: HttpServer) -> Reply:
        if not self.get_allowed:
            return Reply(405)
        session = self.sessions.get(sid or "")
        if session is None:
            return Reply(404 if sid else 400)
        send, receive = server.stream()
        session.get_stream = send
        session.get_opened.set()
        return Reply(headers={"content-type": "text/event-stream"}, stream=receive)

    def _request(self, session: LegacySession, msg: wire.Message, server: HttpServer) -> Reply:
        method, params = msg["method"], msg.get("params") or {}

        async def work(out: MemoryObjectSendStream[bytes]) -> None:
            if self.priming:
                await out.send(PRIMING + COMMENT)
            if method == "tools/list":
                if self.on_tools_list is not None:
                    await self.on_tools_list(Ask(session, out, msg))
                tools = [{"name": n, "inputSchema": {"type": "object"}} for n in self.tools]
                await out.send(sse(wire.result_response(msg["id"], {"tools": tools})))
            elif method == "tools/call" and params.get("name") in self.tools:
                tool = self.tools[params["name"]]
                result = await tool(Ask(session, out, msg), params.get("arguments") or {})
                await out.send(sse(wire.result_response(msg["id"], result)))
            else:
                await out.send(sse(wire.error_response(msg["id"], -32601, "Method not found")))

        return server.feed(work)


@dataclass
class DualHttp:
    """A dual-era server on one endpoint, as mcp 2.x serves it: a POST whose
    body carries modern `_meta` is served modern, anything else (initialize,
    session requests, GET, DELETE) legacy, with sessions."""

    legacy: LegacyHttp
    modern: ModernHttp

    async def __call__(self, req: HttpRequest, server: HttpServer) -> Reply:
        msg = req.message if req.method == "POST" else None
        params = msg.get("params") if isinstance(msg, dict) else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and era.PROTOCOL_VERSION in meta:
            return await self.modern(req, server)
        return await self.legacy(req, server)


@dataclass
class OldSseHttp:
    """The deprecated HTTP+SSE transport: GET /sse gives an `endpoint` event,
    POSTs there are accepted (202) and answered on the SSE stream."""

    streams: dict[str, MemoryObjectSendStream[bytes]] = field(default_factory=dict)

    async def __call__(self, req: HttpRequest, server: HttpServer) -> Reply:
        if req.path == "/sse":
            if req.method != "GET":
                return Reply(405, b"Method Not Allowed", {"content-type": "text/plain"})
            send, receive = server.stream()
            key = f"s{len(self.streams) + 1}"
            self.streams[key] = send
            await send.send(
                b"event: endpoint\ndata: /messages?session_id=" + key.encode() + b"\n\n"
            )
            return Reply(headers={"content-type": "text/event-stream"}, stream=receive)
        if req.path != "/messages" or req.method != "POST":
            return Reply(404, b"Not Found", {"content-type": "text/plain"})
        stream = self.streams.get(req.query.removeprefix("session_id="))
        if stream is None:
            return Reply(404, b"Could not find session", {"content-type": "text/plain"})
        msg = req.message
        if "id" in msg and "method" in msg:
            await stream.send(sse(self._answer(msg)))
        return Reply(202, b"Accepted", {"content-type": "text/plain"})

    @staticmethod
    def _answer(msg: wire.Message) -> wire.Message:
        if msg["method"] == "initialize":
            return wire.result_response(
                msg["id"],
                {
                    "protocolVersion": "2024-11-05",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "scripted-old-sse", "version": "0"},
                },
            )
        if msg["method"] == "tools/call":
            text = msg["params"]["arguments"]["text"]
            return wire.result_response(msg["id"], {"content": [{"type": "text", "text": text}]})
        return wire.error_response(msg["id"], -32601, "Method not found")
