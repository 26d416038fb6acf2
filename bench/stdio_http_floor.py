"""The stdio→HTTP floor: the cost of one bare Python hop from a stdio client
to a Streamable HTTP server, with no MCP logic.

    python bench/stdio_http_floor.py --url http://127.0.0.1:8001/mcp

Reads JSON-RPC lines on stdin and POSTs each to `--url` over keep-alive
HTTP/1.1 (raw asyncio + httptools), one connection per request in flight,
taken from a pool that grows to the concurrency the client uses. Each answer
(a JSON body, or the `data:` lines of a `text/event-stream` body) is written
to stdout as one line; 202s write nothing. Framing only: the transport's
headers are derived from the line (`Mcp-Method`, `Mcp-Name` and
`MCP-Protocol-Version` from `_meta` for a modern request; `Mcp-Session-Id`,
taken from the `initialize` answer, and the negotiated `MCP-Protocol-Version`
for a legacy one). Ends at end of input once every answer is written (bounded).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import httptools
import orjson

PV = "io.modelcontextprotocol/protocolVersion"
NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
DRAIN_TIMEOUT = 30.0  # at end of input: how long answers still in flight are awaited
# Servers close idle keep-alive connections (uvicorn after 5 s): one idle for
# longer than this is closed rather than used, so no close races a request.
MAX_IDLE = 2.0


class Relay:
    """stdin lines → POSTs on pooled connections → stdout lines."""

    def __init__(self, host: str, port: int, path: str, out: asyncio.WriteTransport) -> None:
        self.host, self.port, self.out = host, port, out
        self.head = f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n".encode() + (
            b"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        )
        self.idle: list[HttpConn] = []
        self.queue: collections.deque[bytes] = collections.deque()  # waiting for a connection
        self.connecting = 0
        self.inflight = 0
        self.session = b""  # the legacy session's headers, once initialize answered
        self.idle_event = asyncio.Event()
        self.failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def request(self, line: bytes) -> tuple[bytes, bool]:
        """The whole HTTP request for one line (headers from the line: framing)."""
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError:
            msg = None
        extra = b""
        params = msg.get("params") if isinstance(msg, dict) else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(msg, dict) and isinstance(meta, dict) and PV in meta:
            method = str(msg.get("method", ""))
            extra = f"MCP-Protocol-Version: {meta[PV]}\r\nMcp-Method: {method}\r\n".encode()
            field = NAMED.get(method)
            if field is not None and isinstance(params, dict) and field in params:
                extra += f"Mcp-Name: {params[field]}\r\n".encode()
        else:
            extra = self.session
        initialize = isinstance(msg, dict) and msg.get("method") == "initialize"
        length = b"Content-Length: %d\r\n\r\n" % len(line)
        return self.head + extra + length + line, initialize

    def on_line(self, line: bytes) -> None:
        self.inflight += 1
        self.idle_event.clear()
        stale = time.monotonic() - MAX_IDLE
        while self.idle:
            conn = self.idle.pop()
            if conn.used > stale:
                conn.send(*self.request(line))
                return
            conn.close()
        self.queue.append(line)
        if self.connecting < len(self.queue):
            self.connecting += 1
            asyncio.get_running_loop().create_task(self._connect()).add_done_callback(_reraise)

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: HttpConn(self), self.host, self.port), 10.0
            )
        except (OSError, TimeoutError) as exc:
            self.fail(exc)
            return
        finally:
            self.connecting -= 1
        self.release(conn)

    def release(self, conn: HttpConn) -> None:
        """A connection is free: the next waiting line, or the idle pool."""
        if self.queue:
            conn.send(*self.request(self.queue.popleft()))
        elif conn.open:
            conn.used = time.monotonic()
            self.idle.append(conn)

    def on_answer(self, conn: HttpConn, answer: Answer, initialize: bool) -> None:
        if initialize and "mcp-session-id" in answer.headers:
            self.session = self._session_headers(answer)
        for line in answer.lines():
            self.out.write(line + b"\n")
        self.inflight -= 1
        if self.inflight == 0:
            self.idle_event.set()
        self.release(conn)

    def _session_headers(self, answer: Answer) -> bytes:
        sid = answer.headers["mcp-session-id"]
        version = ""
        for line in answer.lines():  # once per session: the negotiated version
            reply: Any = orjson.loads(line)
            version = str(((reply or {}).get("result") or {}).get("protocolVersion", ""))
        out = f"Mcp-Session-Id: {sid}\r\n"
        return (out + (f"MCP-Protocol-Version: {version}\r\n" if version else "")).encode()

    def fail(self, exc: BaseException) -> None:
        """A connection failed: a request is lost, so the relay ends (loudly)."""
        if not self.failed.done():
            print(f"stdio_http_floor: {exc}", file=sys.stderr)
            self.failed.set_result(None)


def _reraise(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]


class Answer:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def lines(self) -> list[bytes]:
        """The JSON-RPC messages of the answer, one line each."""
        if not self.body.strip():
            return []
        if self.headers.get("content-type", "").startswith("text/event-stream"):
            return [ln[5:].strip() for ln in self.body.split(b"\n") if ln.startswith(b"data:")]
        return [self.body.strip()]


class HttpConn(asyncio.Protocol):
    """One keep-alive connection to the server; one request at a time."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []
        self.open = False
        self.busy = False
        self.initialize = False
        self.used = time.monotonic()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport, self.open = transport, True

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        if self in self.relay.idle:
            self.relay.idle.remove(self)
        if self.busy:
            self.relay.fail(ConnectionError("the server closed a connection mid-request"))

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.relay.fail(exc)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        answer = Answer(self.parser.get_status_code(), self.headers, b"".join(self.body))
        self.headers, self.body, self.busy = {}, [], False
        if not self.parser.should_keep_alive():
            self.open = False
            assert self.transport is not None
            self.transport.close()
        self.relay.on_answer(self, answer, self.initialize)

    def close(self) -> None:
        self.open = False
        if self.transport is not None:
            self.transport.close()

    def send(self, data: bytes, initialize: bool) -> None:
        assert self.transport is not None
        self.busy, self.initialize = True, initialize
        self.transport.write(data)


class Stdin(asyncio.Protocol):
    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.buf = b""
        self.eof: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            if line.strip():
                self.relay.on_line(line)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.buf.strip():
            self.relay.on_line(self.buf)
        if not self.eof.done():
            self.eof.set_result(None)


async def relay(url: str) -> int:
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname is None:
        print("stdio_http_floor: --url must be http://HOST:PORT/PATH", file=sys.stderr)
        return 2
    loop = asyncio.get_running_loop()
    out, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout.buffer)
    assert isinstance(out, asyncio.WriteTransport)
    rel = Relay(parts.hostname, parts.port or 80, parts.path or "/", out)
    _, stdin = await loop.connect_read_pipe(lambda: Stdin(rel), sys.stdin.buffer)
    # Ends at end of input, or when a connection fails.
    await asyncio.wait([stdin.eof, rel.failed], return_when=asyncio.FIRST_COMPLETED)
    if rel.inflight and not rel.failed.done():
        try:
            await asyncio.wait_for(rel.idle_event.wait(), DRAIN_TIMEOUT)
        except TimeoutError:
            print(f"stdio_http_floor: {rel.inflight} answers never came", file=sys.stderr)
    for conn in rel.idle:
        conn.close()
    out.close()
    return 1 if rel.failed.done() else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the server's endpoint, http://HOST:PORT/PATH")
    args = parser.parse_args(argv)
    try:
        return asyncio.run(relay(args.url))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
