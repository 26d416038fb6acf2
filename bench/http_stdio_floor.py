"""The HTTP→stdio floor: the cost of one bare Python hop from Streamable HTTP
clients to a stdio server, with no MCP logic.

    python bench/http_stdio_floor.py --port 8000 -- SERVER_CMD ARGS...
    python bench/http_stdio_floor.py --port 8000 --inline legacy   # no hop

`--inline ERA` spawns nothing and answers with bench/fast_server.py's logic
in-process: the same HTTP server without the stdio hop, the floor's direct
baseline (fast_http_server's uvicorn + ASGI cost more than this whole hop).

An asyncio HTTP/1.1 server (httptools parser, keep-alive, Content-Length
bodies) on 127.0.0.1. `GET /readyz` is 200. Each `POST /mcp` body goes to the
server as one line; the reply line comes back as the 200 `application/json`
body. Notifications and responses (no id) are written and answered 202.
Ids from concurrent HTTP clients may collide, so each request gets a fresh
upstream id (a counter) and its reply gets the client's id back: framing,
like the rest. `initialize` answers carry a fixed `Mcp-Session-Id`, which is
ignored afterwards (one stdio session serves every client); `DELETE /mcp` is
200. One request at a time per connection (as the bench's clients send);
chunked request bodies are not supported. Not a conformance fixture.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httptools
import orjson

if __package__ in (None, ""):  # run as `python bench/http_stdio_floor.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fast_server import LegacyServer, ModernServer, answer

SESSION = b"floor"
_JSON = b"Content-Type: application/json\r\n"
_INIT = b"Mcp-Session-Id: " + SESSION + b"\r\n"  # on initialize answers


def _answer(status: bytes, body: bytes = b"", extra: bytes = b"") -> bytes:
    """One whole HTTP/1.1 response, in one write."""
    length = b"Content-Length: %d\r\n" % len(body)
    kind = _JSON if body else b""
    return b"HTTP/1.1 " + status + b"\r\n" + kind + length + extra + b"\r\n" + body


class Upstream(asyncio.SubprocessProtocol):
    """The stdio server: lines out, reply lines matched to HTTP requests by upstream id."""

    def __init__(self) -> None:
        self.transport: asyncio.SubprocessTransport | None = None
        self.stdin: asyncio.WriteTransport | None = None
        self.pending: dict[int, tuple[HttpConn, Any, bytes]] = {}  # id → (conn, client id, headers)
        self.ids = itertools.count(1)
        self.buf = b""
        self.exited: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self.transport = transport
        stdin = transport.get_pipe_transport(0)
        assert isinstance(stdin, asyncio.WriteTransport)
        self.stdin = stdin

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            if line.strip():
                self._on_line(line)

    def _on_line(self, line: bytes) -> None:
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError:
            return  # not JSON-RPC: nobody to hand it to
        # Server requests and notifications have no HTTP request to answer here
        # (no GET stream): the echo work never sends any.
        upstream_id = msg.get("id") if isinstance(msg, dict) else None
        entry = self.pending.pop(upstream_id, None) if isinstance(upstream_id, int) else None
        if entry is None:
            return
        conn, client_id, extra = entry
        msg["id"] = client_id
        conn.reply(_answer(b"200 OK", orjson.dumps(msg), extra))

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def send(self, conn: HttpConn, msg: dict[str, Any]) -> None:
        """Write one request with a fresh id (its reply answers `conn`)."""
        assert self.stdin is not None
        upstream_id = next(self.ids)
        extra = _INIT if msg.get("method") == "initialize" else b""
        self.pending[upstream_id] = (conn, msg["id"], extra)
        msg["id"] = upstream_id
        self.stdin.write(orjson.dumps(msg) + b"\n")

    def notify(self, body: bytes) -> None:
        assert self.stdin is not None
        self.stdin.write(body.strip() + b"\n")


class Inline:
    """`--inline`: fast_server's logic in this process, in place of the stdio hop."""

    def __init__(self, era: str) -> None:
        self.server = LegacyServer() if era == "legacy" else ModernServer()

    def send(self, conn: HttpConn, msg: dict[str, Any]) -> None:
        out = answer(self.server, orjson.dumps(msg)) or b""
        extra = _INIT if msg.get("method") == "initialize" else b""
        conn.reply(_answer(b"200 OK", out.rstrip(b"\n"), extra))

    def notify(self, body: bytes) -> None:
        answer(self.server, body)


class HttpConn(asyncio.Protocol):
    """One client connection: parse requests, answer in one write each."""

    def __init__(self, upstream: Upstream | Inline) -> None:
        self.upstream = upstream
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.keep_alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None  # a reply still on its way is dropped in reply()

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.keep_alive = False
            self.reply(_answer(b"400 Bad Request"))

    # httptools callbacks
    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        method, path = self.parser.get_method(), self.url.split(b"?", 1)[0]
        body = b"".join(self.body)
        self.url, self.body = b"", []
        self.keep_alive = self.parser.should_keep_alive()
        if path == b"/readyz" and method == b"GET":
            self.reply(_answer(b"200 OK", b'{"status":"ready"}'))
        elif path != b"/mcp":
            self.reply(_answer(b"404 Not Found"))
        elif method == b"POST":
            self._post(body)
        elif method == b"DELETE":
            self.reply(_answer(b"200 OK"))
        else:
            self.reply(_answer(b"405 Method Not Allowed"))

    def _post(self, body: bytes) -> None:
        # Parsing the body is the one way to find its id, which must be mapped.
        try:
            msg = orjson.loads(body)
        except orjson.JSONDecodeError:
            self.reply(_answer(b"400 Bad Request"))
            return
        if not isinstance(msg, dict):
            self.reply(_answer(b"400 Bad Request"))
        elif "id" in msg and "method" in msg:
            self.upstream.send(self, msg)  # answered when the reply line comes
        else:
            self.upstream.notify(body)
            self.reply(_answer(b"202 Accepted"))

    def reply(self, data: bytes) -> None:
        if self.transport is None:
            return
        self.transport.write(data)
        if not self.keep_alive:
            self.transport.close()


async def serve_inline(port: int, era: str) -> int:
    loop = asyncio.get_running_loop()
    inline = Inline(era)
    server = await loop.create_server(lambda: HttpConn(inline), "127.0.0.1", port)
    await _signalled(loop)
    server.close()
    return 0


def _signalled(loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
    """A future that completes on SIGTERM or SIGINT."""
    stop: asyncio.Future[None] = loop.create_future()

    def on_signal() -> None:
        if not stop.done():
            stop.set_result(None)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    return stop


async def serve(port: int, command: Sequence[str]) -> int:
    loop = asyncio.get_running_loop()
    _, upstream = await loop.subprocess_exec(
        Upstream, *command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None
    )
    server = await loop.create_server(lambda: HttpConn(upstream), "127.0.0.1", port)
    stop = _signalled(loop)
    try:
        # Ends on SIGTERM/SIGINT or when the server exits.
        await asyncio.wait([stop, upstream.exited], return_when=asyncio.FIRST_COMPLETED)
    finally:
        server.close()
        transport = upstream.transport
        assert transport is not None
        if upstream.stdin is not None:
            upstream.stdin.close()  # the server's end of input: it exits
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(upstream.exited), 5.0)
        if not upstream.exited.done():
            transport.kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(upstream.exited, 5.0)
        transport.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[args.index("--") + 1 :] if "--" in args else []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--inline", choices=["legacy", "modern"], help="no hop (see above)")
    opts = parser.parse_args(args[: args.index("--")] if "--" in args else args)
    if opts.inline:
        return asyncio.run(serve_inline(opts.port, opts.inline))
    if not command:
        parser.error("the server command goes after --")
    return asyncio.run(serve(opts.port, command))


if __name__ == "__main__":
    sys.exit(main())
