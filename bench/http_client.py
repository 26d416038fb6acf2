"""The HTTP load client: Streamable HTTP MCP over keep-alive HTTP/1.1, raw
asyncio + httptools (the C parser uvicorn uses).

One `HttpClient` is one MCP client: a pool of keep-alive connections to one
endpoint, each carrying one request at a time; `c` requests in flight use
`c` connections, and each answer releases the next request on its
connection at once. A legacy client (2025-11-25) does `initialize`, keeps the
`Mcp-Session-Id` and sends it, with the negotiated `MCP-Protocol-Version`, on
every request; a modern one (2026-07-28) sends each request alone with the
`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` headers and the `_meta`
fields. Requests are serialised once; each use splices in its id.

A load of `ask` calls (the MRTR round trip over HTTP) keeps interactions in
flight instead, as bench/client.py does over stdio: a modern client declaring
elicitation meets `input_required` and retries at once on the same connection
with `inputResponses` and the `requestState`; each interaction is timed from
its first request to its final result (`Hello, bench`).

Raw protocol callbacks rather than httpx: on 2 cores the client competes
with what it measures, and httpx costs several times more CPU per request
(bench/README.md has the figures). Answers may be JSON or an SSE stream (the
reply is its last `data:` line); every one is checked (HTTP 200, the id, no
error, `isError` false).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import httptools
import orjson

from bench.client import (
    ASK_TEXT,
    CAPS,
    CLIENT_INFO,
    ECHO_TEXT,
    ELICIT_ANSWER,
    LEGACY,
    MODERN,
    MODERN_META,
    BenchError,
    LoadResult,
)

ACCEPT = b"application/json, text/event-stream"
# Servers close idle keep-alive connections (uvicorn and node after 5 s): one
# idle for longer than this is replaced before a phase, so no close races a request.
MAX_IDLE = 2.0
_ECHO = {"name": "echo", "arguments": {"text": ECHO_TEXT}}
_ASK: dict[str, Any] = {"name": "ask", "arguments": {}}


def retry_params(result: dict[str, Any]) -> dict[str, Any] | None:
    """The retry an `input_required` result asks for (every elicitation accepted),
    or None when the result is final."""
    if result.get("resultType") != "input_required":
        return None
    asks = result.get("inputRequests") or {}
    params: dict[str, Any] = {
        **_ASK,
        "inputResponses": {
            key: ELICIT_ANSWER
            for key, ask in asks.items()
            if isinstance(ask, dict) and ask.get("method") == "elicitation/create"
        },
    }
    if "requestState" in result:
        params["requestState"] = result["requestState"]
    return params


@dataclass(slots=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def message(self, msg_id: int) -> dict[str, Any] | None:
        """The JSON-RPC reply to `msg_id` in a JSON or SSE body, if any."""
        if self.headers.get("content-type", "").startswith("text/event-stream"):
            for line in reversed(self.body.split(b"\n")):
                if line.startswith(b"data:"):
                    with contextlib.suppress(orjson.JSONDecodeError):
                        msg = orjson.loads(line[5:])
                        if isinstance(msg, dict) and msg.get("id") == msg_id:
                            return msg
            return None
        try:
            msg = orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return None
        return msg if isinstance(msg, dict) and msg.get("id") == msg_id else None


class _Conn(asyncio.Protocol):
    """One keep-alive connection; one request at a time."""

    def __init__(self, client: HttpClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.headers: dict[str, str] = {}
        self.chunks: list[bytes] = []
        self.open = False
        self.msg_id = 0
        self.sent_ns = 0
        self.used = time.monotonic()
        self.waiter: asyncio.Future[Answer] | None = None

    # asyncio callbacks
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
        self.open = False
        if self.msg_id:
            self.msg_id = 0
            why = BenchError(f"{self.client.name}: connection closed with a request in flight")
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_exception(why)
            self.client.fail(why)

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        answer = Answer(self.parser.get_status_code(), self.headers, b"".join(self.chunks))
        self.headers, self.chunks = {}, []
        self.used = time.monotonic()
        if not self.parser.should_keep_alive():
            self.open = False  # the server closes it: reopened before the next phase
        msg_id, self.msg_id = self.msg_id, 0
        if self.waiter is not None:
            waiter, self.waiter = self.waiter, None
            if not waiter.done():
                waiter.set_result(answer)
        else:
            self.client.on_answer(self, msg_id, answer)

    def send(self, msg_id: int, data: bytes) -> None:
        self.sent_ns = time.perf_counter_ns()
        self.send_more(msg_id, data)

    def send_more(self, msg_id: int, data: bytes) -> None:
        """The next request of the same interaction: its clock keeps running."""
        assert self.transport is not None
        self.msg_id = msg_id
        self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


@dataclass(slots=True)
class _Load:
    make: Any  # Callable[[int], bytes]
    stop_at_ns: int
    max_replies: int
    done: asyncio.Future[None]
    latencies: list[int] = field(default_factory=list)
    inflight: int = 0
    errors: int = 0
    first_error: Any = None
    started_ns: int = 0
    last_ns: int = 0
    ask: bool = False  # MRTR interactions: follow input_required, expect ASK_TEXT
    follow_ups: int = 0


class HttpClient:
    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        era: str,
        path: str = "/mcp",
        caps: dict[str, Any] | None = None,
    ) -> None:
        self.name, self.host, self.port, self.era, self.path = name, host, port, era, path
        self.caps = caps or {}  # the client capabilities it declares
        self.meta = {**MODERN_META, CAPS: self.caps}
        self.session_id: str | None = None
        self.version = MODERN if era == "modern" else LEGACY
        self._conns: list[_Conn] = []
        self._ids = itertools.count(1)
        self._load: _Load | None = None

    # -- framing ----------------------------------------------------------------
    def _fixed_headers(self, method: str, name: str | None) -> bytes:
        lines = [
            f"POST {self.path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            "Content-Type: application/json",
            f"Accept: {ACCEPT.decode()}",
        ]
        if self.era == "modern":
            lines += [f"MCP-Protocol-Version: {MODERN}", f"Mcp-Method: {method}"]
            if name is not None:
                lines.append(f"Mcp-Name: {name}")
        elif self.session_id is not None:
            lines.append(f"Mcp-Session-Id: {self.session_id}")
            lines.append(f"MCP-Protocol-Version: {self.version}")
        return ("\r\n".join(lines) + "\r\n").encode()

    def maker(self, method: str, params: dict[str, Any] | None, notify: bool = False) -> Any:
        """A function msg_id -> the whole HTTP request, serialised once."""
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            body["params"] = {**params, "_meta": self.meta} if self.era == "modern" else params
        name = params.get("name") if params and method == "tools/call" else None
        head = self._fixed_headers(method, name if isinstance(name, str) else None)
        if notify:
            data = orjson.dumps(body)
            whole = head + b"Content-Length: %d\r\n\r\n" % len(data) + data
            return lambda _msg_id: whole
        raw = orjson.dumps(body)
        pre, post = b'{"jsonrpc":"2.0","id":', b"," + raw[len(b'{"jsonrpc":"2.0",') :]

        def make(msg_id: int) -> bytes:
            ident = str(msg_id).encode()
            size = len(pre) + len(ident) + len(post)
            return head + b"Content-Length: %d\r\n\r\n" % size + pre + ident + post

        return make

    # -- connections --------------------------------------------------------------
    async def connect(self, count: int, timeout: float = 10.0) -> None:
        """At least `count` open connections (closed and long idle ones are replaced)."""
        loop = asyncio.get_running_loop()
        stale = time.monotonic() - MAX_IDLE
        for conn in self._conns:
            if conn.used < stale:
                conn.open = False
                conn.close()
        self._conns = [c for c in self._conns if c.open]
        while len(self._conns) < count:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Conn(self), self.host, self.port), timeout
            )
            self._conns.append(conn)

    def close(self) -> None:
        for conn in self._conns:
            conn.close()
        self._conns = []

    async def call(
        self, method: str, params: dict[str, Any] | None, timeout: float = 30.0
    ) -> tuple[Answer, dict[str, Any] | None]:
        """One request on the first connection; the answer and its reply."""
        await self.connect(1)
        conn = self._conns[0]
        msg_id = next(self._ids)
        conn.waiter = asyncio.get_running_loop().create_future()
        conn.send(msg_id, self.maker(method, params)(msg_id))
        try:
            answer = await asyncio.wait_for(conn.waiter, timeout)
        except TimeoutError:
            raise BenchError(f"{self.name}: no answer to {method} in {timeout:g}s") from None
        return answer, answer.message(msg_id)

    async def notify(self, method: str, timeout: float = 30.0) -> Answer:
        await self.connect(1)
        conn = self._conns[0]
        conn.waiter = asyncio.get_running_loop().create_future()
        conn.send(0, self.maker(method, None, notify=True)(0))
        try:
            return await asyncio.wait_for(conn.waiter, timeout)
        except TimeoutError:
            raise BenchError(f"{self.name}: no answer to {method} in {timeout:g}s") from None

    async def handshake(self, timeout: float) -> None:
        """Legacy: initialize (keeping the session id) + initialized. Modern:
        server/discover. Then tools/list and one checked echo."""
        if self.era == "legacy":
            init = {"protocolVersion": LEGACY, "capabilities": self.caps, "clientInfo": CLIENT_INFO}
            answer, reply = await self.call("initialize", init, timeout)
            result = (reply or {}).get("result")
            sid = answer.headers.get("mcp-session-id")
            if answer.status != 200 or not isinstance(result, dict) or not sid:
                raise BenchError(f"{self.name}: initialize: HTTP {answer.status} {answer.body!r}")
            self.session_id, self.version = sid, result.get("protocolVersion", LEGACY)
            note = await self.notify("notifications/initialized", timeout)
            if note.status not in (200, 202):
                raise BenchError(f"{self.name}: initialized: HTTP {note.status}")
        else:
            answer, reply = await self.call("server/discover", {}, timeout)
            versions = ((reply or {}).get("result") or {}).get("supportedVersions", [])
            if answer.status != 200 or MODERN not in versions:
                raise BenchError(f"{self.name}: discover: HTTP {answer.status} {answer.body!r}")
        answer, reply = await self.call("tools/list", {}, timeout)
        tools = ((reply or {}).get("result") or {}).get("tools", [])
        if "echo" not in [t.get("name") for t in tools]:
            raise BenchError(f"{self.name}: no echo tool: HTTP {answer.status} {answer.body!r}")
        answer, reply = await self.call("tools/call", _ECHO, timeout)
        result = (reply or {}).get("result")
        if not isinstance(result, dict) or result.get("isError"):
            raise BenchError(f"{self.name}: echo failed: HTTP {answer.status} {answer.body!r}")
        if result["content"][0]["text"] != ECHO_TEXT:
            raise BenchError(f"{self.name}: echo answered {result}")
        if (result.get("resultType") == "complete") != (self.era == "modern"):
            raise BenchError(f"{self.name}: a {self.era} client got {result}")
        if self.era == "modern" and self.caps.get("elicitation") is not None:
            if "ask" not in [t.get("name") for t in tools]:
                raise BenchError(f"{self.name}: no ask tool")
            await self.check_ask(timeout)

    async def check_ask(self, timeout: float) -> None:
        """One `ask` interaction, every step checked: input_required, then the retry."""
        answer, reply = await self.call("tools/call", _ASK, timeout)
        result = (reply or {}).get("result") or {}
        asks = result.get("inputRequests")
        retry = retry_params(result)
        if (
            retry is None
            or not isinstance(result.get("requestState"), str)
            or not isinstance(asks, dict)
            or [a.get("method") for a in asks.values()] != ["elicitation/create"]
        ):
            raise BenchError(
                f"{self.name}: ask did not ask for input: HTTP {answer.status} {reply}"
            )
        answer, reply = await self.call("tools/call", retry, timeout)
        result = (reply or {}).get("result") or {}
        if _text(result) != ASK_TEXT or result.get("resultType") != "complete":
            raise BenchError(f"{self.name}: ask answered HTTP {answer.status} {reply}")

    async def end_session(self) -> None:
        """DELETE the legacy session (best effort, bounded)."""
        if self.session_id is None or not any(c.open for c in self._conns):
            return
        conn = next(c for c in self._conns if c.open)
        data = (
            f"DELETE {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Mcp-Session-Id: {self.session_id}\r\n"
            f"MCP-Protocol-Version: {self.version}\r\nContent-Length: 0\r\n\r\n"
        ).encode()
        conn.waiter = asyncio.get_running_loop().create_future()
        conn.send(0, data)
        with contextlib.suppress(TimeoutError, BenchError):
            await asyncio.wait_for(conn.waiter, 5.0)

    # -- load -------------------------------------------------------------------------
    async def load(
        self, concurrency: int, seconds: float, max_replies: int, work: str = "echo"
    ) -> LoadResult:
        """Keep `concurrency` echo calls (work="ask": MRTR interactions) in flight
        for `seconds` (or `max_replies`)."""
        await self.connect(concurrency)
        loop = asyncio.get_running_loop()
        ask = work == "ask"
        run = _Load(
            make=self.maker("tools/call", _ASK if ask else _ECHO),
            stop_at_ns=time.perf_counter_ns() + int(seconds * 1e9),
            max_replies=max(max_replies, concurrency),
            done=loop.create_future(),
            ask=ask,
        )
        self._load = run
        run.started_ns = time.perf_counter_ns()
        try:
            for conn in self._conns[:concurrency]:
                self._next(conn, run)
            await asyncio.wait_for(run.done, seconds + 30.0)
        except TimeoutError:
            raise BenchError(
                f"{self.name}: {run.inflight} requests unanswered after {seconds + 30:g}s"
            ) from None
        finally:
            self._load = None
        return LoadResult(
            concurrency,
            len(run.latencies),
            (run.last_ns - run.started_ns) / 1e9,
            run.latencies,
            run.errors,
            run.first_error,
            run.follow_ups,
        )

    def _next(self, conn: _Conn, run: _Load) -> None:
        msg_id = next(self._ids)
        run.inflight += 1
        conn.send(msg_id, run.make(msg_id))

    def on_answer(self, conn: _Conn, msg_id: int, answer: Answer) -> None:
        run = self._load
        if run is None:
            return
        now = time.perf_counter_ns()
        reply = answer.message(msg_id) if answer.status == 200 else None
        result = reply.get("result") if reply is not None else None
        retry = retry_params(result) if run.ask and isinstance(result, dict) else None
        if retry is not None and conn.open:  # the interaction goes on under a new id
            run.follow_ups += 1
            new_id = next(self._ids)
            conn.send_more(new_id, self.maker("tools/call", retry)(new_id))
            return
        run.inflight -= 1
        run.latencies.append(now - conn.sent_ns)
        run.last_ns = now
        if (
            not isinstance(result, dict)
            or result.get("isError")
            or (run.ask and _text(result) != ASK_TEXT)
        ):
            run.errors += 1
            if run.first_error is None:
                run.first_error = f"HTTP {answer.status} {answer.body[:300]!r}"
        more = len(run.latencies) + run.inflight < run.max_replies and now < run.stop_at_ns
        if more and conn.open:
            self._next(conn, run)
            return
        if more:  # the server closed the connection: count it, the phase goes on with fewer
            run.errors += 1
            run.first_error = run.first_error or "the server closed a keep-alive connection"
        if run.inflight == 0 and not run.done.done():
            run.done.set_result(None)

    def fail(self, exc: BaseException) -> None:
        run = self._load
        if run is not None and not run.done.done():
            run.done.set_exception(exc)


def _text(result: dict[str, Any]) -> str | None:
    """The first text content of a tool result, if any."""
    content = result.get("content")
    if isinstance(content, list) and content and isinstance(content[0], dict):
        text = content[0].get("text")
        return text if isinstance(text, str) else None
    return None
