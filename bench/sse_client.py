"""The HTTP+SSE load client: the deprecated transport of 2024-11-05 (2025-11-25
basic/transports "Backwards Compatibility"), raw asyncio + httptools like
bench/http_client.py.

One `SseClient` is one MCP client with one session: a `GET` of the stream
path opens the event stream, whose first `endpoint` event names where to
POST; the client does `initialize` + `notifications/initialized` there, and
every reply arrives as an `event: message` on the stream, matched by id. `c`
requests in flight are `c` POSTs of that one session, pipelined: each reply
read off the stream releases the next request at once.

A POST is answered (202) on its own connection, before or after the reply
comes on the stream, so a connection is busy until its answer: the client
keeps twice `c` keep-alive connections, and a request released while none is
free goes out as soon as one is (its clock already runs: the wait is part of
what the transport costs). Every POST answer is checked (2xx), every reply
too (the id, a result without `isError`, the echoed text, no `resultType`:
the client is a legacy one).

One session rather than `c`: supergateway's SSE output runs ONE stdio child
for all its sessions, writes every session's messages to it unchanged (ids
are not mapped, so two sessions' ids collide) and sends every line the child
writes to EVERY session. Several sessions would make it deliver `n` times
the events and mix their replies; one session is how an SSE client with
concurrent calls uses either, and behind both it is one stdio server
process (the gateway runs one upstream per principal).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httptools
import orjson

from bench.client import CLIENT_INFO, ECHO_TEXT, BenchError, LoadResult
from bench.http_client import MAX_IDLE

# The transport belongs to 2024-11-05: what such a client offers at initialize.
SSE_VERSION = "2024-11-05"
_ECHO = {"name": "echo", "arguments": {"text": ECHO_TEXT}}


class SseParser:
    """An incremental text/event-stream parser (the WHATWG "event stream
    interpretation"): bytes in, whole events out as (type, data).

    Lines end with LF, CRLF or CR; a blank line dispatches the event (none
    if it had no `data`); `:` starts a comment (keep-alives); one space after
    a field's colon is dropped; `data` lines join with LF; the type is
    `message` unless an `event` line names another. `id` and `retry` are
    read and ignored (the bench never resumes a stream)."""

    __slots__ = ("_buf", "_data", "_type")

    def __init__(self) -> None:
        self._buf = b""
        self._type = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[tuple[str, bytes]]:
        buf = self._buf + chunk
        held = b""
        if b"\r" in buf:
            if buf.endswith(b"\r"):  # maybe half of a CRLF: decide with the next chunk
                buf, held = buf[:-1], b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, rest = buf.split(b"\n")
        self._buf = rest + held
        events: list[tuple[str, bytes]] = []
        for line in lines:
            if not line:
                if self._data:
                    events.append((self._type.decode() or "message", b"\n".join(self._data)))
                self._type, self._data = b"", []
                continue
            name, colon, value = line.partition(b":")
            if not name:
                continue  # a comment
            if colon and value.startswith(b" "):
                value = value[1:]
            if name == b"data":
                self._data.append(value)
            elif name == b"event":
                self._type = value
        return events


def post_target(endpoint: bytes) -> str:
    """The path (and query) an `endpoint` event's data names: relative, as
    both servers send it, or a whole URL (supergateway with --baseUrl),
    whose host the bench ignores (it knows where it connected)."""
    url = urlsplit(endpoint.decode().strip())
    if not url.path.startswith("/"):
        raise BenchError(f"endpoint event names no path: {endpoint!r}")
    return url.path + (f"?{url.query}" if url.query else "")


class _Stream(asyncio.Protocol):
    """The session's event stream: one GET, read until the client closes it."""

    def __init__(self, client: SseClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.events = SseParser()
        self.headers: dict[str, str] = {}
        self.status = 0
        self.closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.client.fail(BenchError(f"{self.client.name}: bad HTTP on the stream: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closing:
            self.client.fail(BenchError(f"{self.client.name}: the server closed the stream"))

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        kind = self.headers.get("content-type", "")
        if self.status != 200 or not kind.startswith("text/event-stream"):
            self.client.fail(
                BenchError(f"{self.client.name}: GET stream: HTTP {self.status} {kind}")
            )

    def on_body(self, body: bytes) -> None:
        for kind, data in self.events.feed(body):
            self.client.on_event(kind, data)

    def on_message_complete(self) -> None:
        if not self.closing:
            self.client.fail(BenchError(f"{self.client.name}: the server ended the stream"))

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()


class _Post(asyncio.Protocol):
    """One keep-alive connection for POSTs; one at a time."""

    def __init__(self, client: SseClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.chunks: list[bytes] = []
        self.open = False
        self.msg_id = 0  # the request it carries (0: a notification or nothing)
        self.used = time.monotonic()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport, self.open = transport, True

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.client.fail(BenchError(f"{self.client.name}: bad HTTP answer: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        was_busy = self.open and self.client.is_busy(self)
        self.open = False
        if was_busy:
            self.client.fail(BenchError(f"{self.client.name}: a POST's connection closed"))

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        status, body = self.parser.get_status_code(), b"".join(self.chunks)
        self.chunks = []
        self.used = time.monotonic()
        if not self.parser.should_keep_alive():
            self.open = False  # the server closes it: replaced before the next phase
        self.client.on_post_answer(self, status, body)

    def send(self, msg_id: int, data: bytes) -> None:
        assert self.transport is not None
        self.msg_id = msg_id
        self.transport.write(data)

    def close(self) -> None:
        self.open = False
        if self.transport is not None:
            self.transport.close()


@dataclass(slots=True)
class _Load:
    stop_at_ns: int
    max_replies: int
    done: asyncio.Future[None]
    released: dict[int, int] = field(default_factory=dict)  # id -> when it was released
    latencies: list[int] = field(default_factory=list)
    errors: int = 0
    first_error: Any = None
    started_ns: int = 0
    last_ns: int = 0

    def error(self, what: str) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = what


class SseClient:
    def __init__(self, name: str, host: str, port: int, stream_path: str = "/sse") -> None:
        self.name, self.host, self.port, self.stream_path = name, host, port, stream_path
        self.era = "legacy"  # the transport has no other
        self.target: str | None = None  # where to POST, from the endpoint event
        self._endpoint: asyncio.Future[bytes] | None = None
        self._stream: _Stream | None = None
        self._conns: list[_Post] = []
        self._idle: list[_Post] = []
        self._backlog: deque[int] = deque()  # released requests waiting for a connection
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._load: _Load | None = None
        self._failed: BaseException | None = None
        self._head = b""
        self._echo_pre = self._echo_post = b""
        self.strays = 0  # messages on the stream that answer no request of ours

    # -- framing ----------------------------------------------------------------
    def _post_bytes(self, body: bytes) -> bytes:
        return self._head + b"Content-Length: %d\r\n\r\n" % len(body) + body

    def _request(self, method: str, params: dict[str, Any], msg_id: int) -> bytes:
        body = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}
        return self._post_bytes(orjson.dumps(body))

    def _echo(self, msg_id: int) -> bytes:
        return self._post_bytes(self._echo_pre + str(msg_id).encode() + self._echo_post)

    # -- connections ------------------------------------------------------------------
    async def open_stream(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        self._endpoint = loop.create_future()
        _, stream = await asyncio.wait_for(
            loop.create_connection(lambda: _Stream(self), self.host, self.port), timeout
        )
        self._stream = stream
        assert stream.transport is not None
        stream.transport.write(
            f"GET {self.stream_path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "Accept: text/event-stream\r\nCache-Control: no-cache\r\n\r\n".encode()
        )
        try:
            endpoint = await asyncio.wait_for(self._endpoint, timeout)
        except TimeoutError:
            raise BenchError(f"{self.name}: no endpoint event in {timeout:g}s") from None
        self.target = post_target(endpoint)
        self._head = (
            f"POST {self.target} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "Content-Type: application/json\r\n"
        ).encode()
        raw = orjson.dumps({"method": "tools/call", "params": _ECHO})
        self._echo_pre, self._echo_post = b'{"jsonrpc":"2.0","id":', b"," + raw[1:]

    async def connect(self, count: int, timeout: float = 10.0) -> None:
        """At least `count` open, idle POST connections (long idle ones replaced)."""
        loop = asyncio.get_running_loop()
        stale = time.monotonic() - MAX_IDLE
        for conn in self._conns:
            if conn.used < stale:
                conn.close()
        self._conns = [c for c in self._conns if c.open]
        self._idle = [c for c in self._idle if c.open]
        while len(self._conns) < count:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Post(self), self.host, self.port), timeout
            )
            self._conns.append(conn)
            self._idle.append(conn)

    def is_busy(self, conn: _Post) -> bool:
        return conn in self._conns and conn not in self._idle

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
        for conn in self._conns:
            conn.close()
        self._conns, self._idle = [], []

    async def end_session(self) -> None:
        """Closing the stream ends the session, on both servers."""
        if self._stream is not None:
            self._stream.close()

    # -- one request at a time (the handshake) ------------------------------------------
    async def _send(self, msg_id: int, data: bytes, timeout: float) -> None:
        await self.connect(1)
        deadline = time.monotonic() + timeout
        while not self._idle:  # every connection waits for its answer: bounded by timeout
            if time.monotonic() > deadline:
                raise BenchError(f"{self.name}: no POST answered in {timeout:g}s")
            await asyncio.sleep(0.001)
        self._idle.pop().send(msg_id, data)

    async def call(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One request; its reply off the stream."""
        msg_id = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[msg_id] = fut
        try:
            await self._send(msg_id, self._request(method, params, msg_id), timeout)
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise BenchError(f"{self.name}: no reply to {method} in {timeout:g}s") from None
        finally:
            self._waiting.pop(msg_id, None)

    async def notify(self, method: str, timeout: float) -> None:
        body = orjson.dumps({"jsonrpc": "2.0", "method": method})
        await self._send(0, self._post_bytes(body), timeout)

    async def handshake(self, timeout: float) -> None:
        """The stream, initialize + initialized, tools/list, one checked echo."""
        await self.open_stream(timeout)
        init = {"protocolVersion": SSE_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO}
        reply = await self.call("initialize", init, timeout)
        if not isinstance(reply.get("result"), dict):
            raise BenchError(f"{self.name}: initialize answered {reply}")
        await self.notify("notifications/initialized", timeout)
        tools = await self.call("tools/list", {}, timeout)
        names = [t.get("name") for t in (tools.get("result") or {}).get("tools", [])]
        if "echo" not in names:
            raise BenchError(f"{self.name}: no echo tool in {tools}")
        problem = echo_problem(await self.call("tools/call", _ECHO, timeout))
        if problem:
            raise BenchError(f"{self.name}: {problem}")
        if self._failed is not None:
            raise BenchError(f"{self.name}: {self._failed}")

    # -- callbacks ----------------------------------------------------------------------
    def on_event(self, kind: str, data: bytes) -> None:
        if kind == "endpoint":
            if self._endpoint is not None and not self._endpoint.done():
                self._endpoint.set_result(data)
            return
        if kind != "message":
            return
        try:
            msg = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.fail(BenchError(f"{self.name}: a message event is not JSON: {data[:200]!r}"))
            return
        if not isinstance(msg, dict) or "method" in msg:
            return  # a server notification or request: the echo server sends none
        msg_id = msg.get("id")
        run = self._load
        if run is not None and msg_id in run.released:
            self._on_reply(run, msg_id, msg)
            return
        fut = self._waiting.get(msg_id) if isinstance(msg_id, int) else None
        if fut is not None and not fut.done():
            fut.set_result(msg)
        else:
            self.strays += 1
            if run is not None:
                run.error(f"a reply to no request of ours: {data[:200]!r}")

    def on_post_answer(self, conn: _Post, status: int, body: bytes) -> None:
        msg_id, conn.msg_id = conn.msg_id, 0
        run = self._load
        if not 200 <= status < 300:
            what = f"POST answered HTTP {status} {body[:300]!r}"
            fut = self._waiting.get(msg_id)
            if fut is not None and not fut.done():
                fut.set_exception(BenchError(f"{self.name}: {what}"))
            if run is not None and run.released.pop(msg_id, None) is not None:
                run.error(what)  # no reply will come for it
                self._settle(run, time.perf_counter_ns())
        if not conn.open:
            return
        if run is not None and self._backlog:
            msg_id = self._backlog.popleft()
            conn.send(msg_id, self._echo(msg_id))
        else:
            self._idle.append(conn)

    def _on_reply(self, run: _Load, msg_id: int, msg: dict[str, Any]) -> None:
        now = time.perf_counter_ns()
        run.latencies.append(now - run.released.pop(msg_id))
        run.last_ns = now
        problem = echo_problem(msg)
        if problem:
            run.error(problem)
        self._settle(run, now)

    def _settle(self, run: _Load, now: int) -> None:
        """After a request finished: release the next, or end the phase."""
        if len(run.latencies) + len(run.released) < run.max_replies and now < run.stop_at_ns:
            self._release(run, now)
        elif not run.released and not run.done.done():
            run.done.set_result(None)

    def _release(self, run: _Load, now: int) -> None:
        msg_id = next(self._ids)
        run.released[msg_id] = now
        if self._idle:
            self._idle.pop().send(msg_id, self._echo(msg_id))
        else:
            self._backlog.append(msg_id)

    def fail(self, exc: BaseException) -> None:
        if self._failed is None:
            self._failed = exc
        run = self._load
        if run is not None and not run.done.done():
            run.done.set_exception(exc)
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(exc)
        if self._endpoint is not None and not self._endpoint.done():
            self._endpoint.set_exception(exc)

    # -- load ---------------------------------------------------------------------------
    async def load(
        self, concurrency: int, seconds: float, max_replies: int, work: str = "echo"
    ) -> LoadResult:
        """Keep `concurrency` echo calls in flight on the session for `seconds`
        (or `max_replies`)."""
        if work != "echo":
            raise BenchError(f"{self.name}: the SSE client only calls echo")
        if self._failed is not None:
            raise BenchError(f"{self.name}: {self._failed}")
        await self.connect(2 * concurrency)
        run = _Load(
            stop_at_ns=time.perf_counter_ns() + int(seconds * 1e9),
            max_replies=max(max_replies, concurrency),
            done=asyncio.get_running_loop().create_future(),
        )
        self._load = run
        run.started_ns = now = time.perf_counter_ns()
        try:
            for _ in range(concurrency):
                self._release(run, now)
            await asyncio.wait_for(run.done, seconds + 30.0)
        except TimeoutError:
            raise BenchError(
                f"{self.name}: {len(run.released)} requests unanswered after {seconds + 30:g}s"
            ) from None
        finally:
            self._load = None
            self._backlog.clear()
        # Answers still on their way would find no load: wait (bounded) for the POSTs.
        deadline = time.monotonic() + 5.0
        while len(self._idle) < len([c for c in self._conns if c.open]):
            if time.monotonic() > deadline:
                raise BenchError(f"{self.name}: POSTs unanswered 5 s after their replies")
            await asyncio.sleep(0.001)
        return LoadResult(
            concurrency,
            len(run.latencies),
            (run.last_ns - run.started_ns) / 1e9,
            run.latencies,
            run.errors,
            run.first_error,
        )


def echo_problem(reply: dict[str, Any]) -> str | None:
    """What is wrong with a reply to echo for a legacy client, or None."""
    result = reply.get("result")
    if not isinstance(result, dict) or result.get("isError"):
        return f"echo failed: {reply}"
    content = result.get("content")
    if not isinstance(content, list) or not content or not isinstance(content[0], dict):
        return f"echo answered no content: {result}"
    if content[0].get("text") != ECHO_TEXT:
        return f"echo answered {content}"
    if "resultType" in result:
        return f"a legacy client got a modern result: {result}"
    return None
