"""The upstream Streamable HTTP transport: one `HttpServerConnection` is one
upstream "session" — for a modern server a stateless series of POSTs, for a
legacy one an `Mcp-Session-Id` (2025-11-25 transports "Session Management"),
and for a 2024-11-05 server the deprecated HTTP+SSE stream.

It offers the same face as the stdio back (`send`, `send_nowait`,
`receive_batch`, `run_background`, `aclose`, `terminate`), so the pool, the era
probe, sessions and the MRTR bridge run over it unchanged: each request is a
POST in a background task, and what comes back — the reply, plus any
notifications or server requests on its SSE stream, or on the legacy GET
stream — lands in the queue `receive_batch` drains. HTTP failures become
JSON-RPC error replies under the request's id, so callers (and
`era_probe.judge`) always see a normal answer. Transport only: it makes no
protocol decisions beyond what the transport specs require of a client.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import orjson
import structlog
from anyio.abc import TaskGroup

from gateway import era, wire
from gateway.backs import http_wire
from gateway.backs.http_client import HttpClient, HttpClientError, Response, Timeout
from gateway.backs.http_wire import SseParser
from gateway.core import backoff, http_binding, upstream_checks
from gateway.log_limit import LogLimiter
from gateway.upstream_errors import ConnectionLost

log = structlog.get_logger("gateway.backs.http")

_ids = itertools.count(1)
# A legacy GET stream that ended or broke is reopened after this, or after the
# server's `retry` hint, doubling while it keeps failing (core/backoff).
_GET_RETRY_FIRST = 1.0
_GET_RETRY_MAX = 30.0
# A legacy call's stream that the server closed before the reply is resumed
# with GET + Last-Event-ID (2025-11-25 "Resumability and Redelivery") after
# the server's `retry` hint, this long without one, and never longer than the
# cap: a call must not sit out minutes because a server asked it to.
_RESUME_DELAY = 1.0
_RESUME_DELAY_MAX = 3.0
# Resumptions in a row that bring no new event before the call fails: a
# server that keeps closing an empty stream is not making progress.
_MAX_IDLE_RESUMES = 3
# Pages of our own tools/list refresh after a -32020 (a bound, not a limit
# any real server reaches).
_MAX_TOOL_PAGES = 50

Deliver = Callable[[wire.Message], None]


class HttpConnectionEnded(ConnectionLost):
    """The upstream session is over (closed by us, or ended by the server)."""


@dataclass(slots=True)
class _Inflight:
    method: str
    scope: anyio.CancelScope
    modern: bool


@dataclass(slots=True)
class _Refused:
    """A request the server did not answer with a JSON-RPC reply of its own
    making: `reply` is what the caller will see; `status` is None when the
    exchange failed below HTTP."""

    reply: wire.Message
    status: int | None


@dataclass(slots=True)
class _StreamCursor:
    """Where a call's SSE stream got to: the last event id (what a resumption
    asks to continue after), the server's latest `retry` hint in ms, and how
    many events came (to tell a resumption that brought something from one
    that did not)."""

    last_id: str | None = None
    retry_ms: int | None = None
    events: int = 0

    def saw(self, event: http_wire.SseEvent) -> None:
        self.events += 1
        if event.id is not None:
            self.last_id = event.id or None  # an empty id resets it (WHATWG)
        if event.retry is not None:
            self.retry_ms = event.retry


class HttpServerConnection:
    def __init__(
        self,
        client: HttpClient,
        url: str,
        *,
        connect_timeout: float,
        read_timeout: float,
        max_bytes: int,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url
        # The ServerConnection protocol names connections by pid; ours is a number.
        self.pid = next(_ids)
        self.tap: Callable[[str, wire.Message], None] | None = None
        self.session_id: str | None = None
        self.legacy_version: str | None = None
        self.sse_endpoint: str | None = None  # set once on the deprecated HTTP+SSE transport
        self._client = client
        self._base = {
            **(headers or {}),
            "Accept": http_wire.ACCEPT,
            "Content-Type": "application/json",
        }
        # Requests stay open as long as the session's own bounds allow (a call
        # can be parked for an MRTR round): only connecting is bounded here.
        self._stream_timeout = Timeout(connect=connect_timeout, read=None, write=connect_timeout)
        self._short_timeout = Timeout(
            connect=connect_timeout, read=read_timeout, write=read_timeout
        )
        self._read_timeout = read_timeout
        self._max_bytes = max_bytes
        self._ready: deque[wire.Message] = deque()
        self._wake = anyio.Event()
        self._ended: str | None = None
        self._tg: TaskGroup | None = None
        self._backlog: list[tuple[Callable[..., Coroutine[Any, Any, None]], tuple[Any, ...]]] = []
        self._stop = anyio.Event()
        self._stopped = anyio.Event()
        self._inflight: dict[wire.RequestId, _Inflight] = {}
        self._delete_scope: anyio.CancelScope | None = None
        self._tool_params: dict[str, tuple[http_binding.HeaderParam, ...]] = {}
        self._tools_generation = 0
        self._tools_lock = anyio.Lock()
        self._own_ids = itertools.count(1)
        # Server requests that came on the GET stream, until answered: 2025-11-25
        # says those are unrelated to any running call, so none may claim them.
        self._unattached: set[wire.RequestId] = set()
        # A server that sends junk in a loop gets one log line a minute.
        self._junk_log = LogLimiter(log)
        # Which request's response stream each queued notification came on,
        # by message identity; handed over per batch (`stream_of`).
        self._origins: dict[int, wire.RequestId] = {}
        self._batch_origins: dict[int, wire.RequestId] = {}
        # A server whose streams cannot be resumed gets one warning a minute.
        self._resume_log = LogLimiter(log)
        # What waits out a resumption's retry delay (tests observe it).
        self.sleep: Callable[[float], Awaitable[None]] = anyio.sleep

    # -- the ServerConnection face ---------------------------------------------
    def send_nowait(self, msg: wire.Message) -> None:
        if self._ended is not None:
            raise HttpConnectionEnded(self._ended)
        if self.tap is not None:
            self.tap("to-server", msg)
        if "method" in msg and "id" in msg:
            modern = era.is_modern(msg) and self.session_id is None and self.sse_endpoint is None
            scope = anyio.CancelScope()
            self._inflight[msg["id"]] = _Inflight(msg["method"], scope, modern)
            self._spawn(self._run_request, msg, scope)
        elif msg.get("method") == "notifications/cancelled":
            self._cancel(msg)
        else:
            if "method" not in msg:
                self._unattached.discard(msg.get("id"))
            self._spawn(self._post_message, msg)

    async def send(self, msg: wire.Message) -> None:
        # Never waits for the POST: a caller such as the reader answering a
        # server request must not stall on a round trip.
        self.send_nowait(msg)
        await anyio.lowlevel.checkpoint()

    def cork(self) -> None:
        return None  # every message is its own POST: nothing to batch

    def uncork(self) -> None:
        return None

    async def receive_batch(self) -> list[wire.Message]:
        """Every message received since the last call (at least one);
        HttpConnectionEnded once the session is over and the queue is empty."""
        while not self._ready:
            if self._ended is not None:
                raise HttpConnectionEnded(self._ended)
            await self._wake.wait()
            self._wake = anyio.Event()
        batch = list(self._ready)
        self._ready.clear()
        self._batch_origins = {
            key: self._origins.pop(key) for key in map(id, batch) if key in self._origins
        }
        if self.tap is not None:
            for msg in batch:
                self.tap("from-server", msg)
        return batch

    async def run_background(self) -> None:
        """Owns every task of this connection (POSTs, the GET stream) until it ends."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                for fn, args in self._backlog:
                    tg.start_soon(self._guarded, fn, *args)
                self._backlog.clear()
                await self._stop.wait()
                tg.cancel_scope.cancel()
        finally:
            self._tg = None
            self._stopped.set()

    async def aclose(self, grace: float = 5.0) -> int | None:
        """Cancel in-flight exchanges, close streams, DELETE the legacy session."""
        first = self._ended is None
        self._end("connection closed")
        with anyio.CancelScope(shield=True):
            if first and self.session_id is not None:
                with anyio.move_on_after(min(grace, self._read_timeout)) as self._delete_scope:
                    await self._delete_session()
            with anyio.move_on_after(grace):
                if self._started:
                    await self._stopped.wait()
        return 0

    def terminate(self) -> None:
        """Abort now: no DELETE, every exchange cancelled."""
        if self._delete_scope is not None:
            self._delete_scope.cancel()
        self._end("connection terminated")

    # -- bookkeeping ---------------------------------------------------------------
    @property
    def _started(self) -> bool:
        return self._tg is not None or self._stopped.is_set()

    def _spawn(self, fn: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        if self._tg is not None:
            self._tg.start_soon(self._guarded, fn, *args)
        else:  # run_background has not started yet: it takes these first
            self._backlog.append((fn, args))

    async def _guarded(self, fn: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        """A bug or an odd input (say, a header value HTTP cannot carry) in
        one exchange must not take the whole task group, and the gateway, down."""
        try:
            await fn(*args)
        # Any failure: a call still waiting was already answered with a gateway
        # error by _run_request; here the operator gets one line, no traceback.
        except Exception as exc:
            log.error(
                "upstream http task failed", task=fn.__name__, url=self.url, error=_describe(exc)
            )

    def _push(self, msg: wire.Message) -> None:
        self._ready.append(msg)
        self._wake.set()

    def _push_unattached(self, msg: wire.Message) -> None:
        if "method" in msg and "id" in msg:
            self._unattached.add(msg["id"])
        self._push(msg)

    @property
    def streams_name_calls(self) -> bool:
        """Streamable HTTP answers each call on a stream of its own; the old
        HTTP+SSE transport has one stream for everything."""
        return self.sse_endpoint is None

    def stream_of(self, msg: wire.Message) -> wire.RequestId | None:
        """The request on whose response stream a message of the batch last
        handed out came, or None (the GET stream)."""
        return self._batch_origins.get(id(msg))

    def outside_calls(self, request_id: wire.RequestId) -> bool:
        """Whether a server request came outside any call's stream (2025-11-25
        "Listening for Messages from the Server": the GET stream's messages
        "SHOULD be unrelated to any concurrently-running JSON-RPC request")."""
        return request_id in self._unattached

    def _end(self, reason: str) -> None:
        if self._ended is None:
            self._ended = reason
            log.info("upstream http session over", url=self.url, reason=reason)
        self._backlog.clear()
        self._stop.set()
        self._wake.set()

    def _session_gone(self, reason: str) -> None:
        """The server ended the legacy session (404 on our session id): every
        pending request fails, then the connection ends as a crashed stdio
        server would, and the pool opens a new session on demand."""
        for msg_id in list(self._inflight):
            self._push(
                wire.gateway_error(
                    msg_id, wire.INTERNAL_ERROR, f"Upstream {reason}", reason="upstream-failed"
                )
            )
        self._inflight.clear()
        self._end(reason)

    def _cancel(self, msg: wire.Message) -> None:
        """2026-07-28: closing the response stream is the cancellation, and no
        notifications/cancelled is sent. Legacy: the notification is the
        cancellation (a disconnect is not), so it is POSTed, and the stream closed."""
        params = msg.get("params") or {}
        target = params.get("requestId")
        inflight = self._inflight.pop(target, None) if isinstance(target, str | int) else None
        if inflight is not None:
            inflight.scope.cancel()
        if inflight is None or not inflight.modern:
            self._spawn(self._post_message, msg)

    def _headers(self, msg: wire.Message) -> dict[str, str]:
        headers = dict(self._base)
        if self.sse_endpoint is not None:
            return headers
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
        if self.legacy_version is not None:
            headers["MCP-Protocol-Version"] = self.legacy_version
        elif self.session_id is None and era.is_modern(msg):
            headers.update(http_binding.modern_headers(msg, self._tool_params))
        return headers

    # -- requests --------------------------------------------------------------------
    async def _run_request(self, msg: wire.Message, scope: anyio.CancelScope) -> None:
        msg_id = msg["id"]
        try:
            with scope:
                generation = self._tools_generation
                refused = await self._exchange(msg, self._deliver_for(msg))
                if refused is not None and self._header_mismatch(msg, refused):
                    # "Client Behavior": on HeaderMismatch, re-read the tools'
                    # schemas and retry once with the headers they now call for.
                    await self._refresh_tools(msg, generation)
                    refused = await self._exchange(msg, self._deliver_for(msg))
                if (
                    refused is not None
                    and self._legacy_sse_fallback(msg, refused)
                    and await self._open_sse_transport()
                ):
                    refused = await self._exchange(msg, self._deliver_for(msg))
                if refused is not None:
                    self._deliver_for(msg)(refused.reply)
        except Exception as exc:
            if msg_id in self._inflight:  # the caller still waits: answer it
                self._deliver_for(msg)(http_wire.failure_reply(msg_id, _describe(exc)))
            raise
        finally:
            if self.sse_endpoint is None:  # HTTP+SSE: the reply comes later, on the stream
                self._inflight.pop(msg_id, None)

    def _deliver_for(self, request: wire.Message) -> Deliver:
        """How messages on a request's response reach the queue: the reply to
        it is looked at first (initialize, tools/list), the rest goes as is."""
        msg_id = request["id"]

        def deliver(msg: wire.Message) -> None:
            if "method" not in msg and msg.get("id") == msg_id:
                self._inflight.pop(msg_id, None)
                self._observe_reply(request, msg)
            elif "method" in msg and "id" not in msg:
                self._origins[id(msg)] = msg_id
            self._push(msg)

        return deliver

    def _observe_reply(self, request: wire.Message, reply: wire.Message) -> None:
        result = reply.get("result")
        if not isinstance(result, dict):
            return
        method = request["method"]
        if method == "initialize" and not era.is_modern(request):
            version = result.get("protocolVersion")
            if isinstance(version, str):
                self.legacy_version = version
        elif method == "tools/list" and era.is_modern(request):
            self._take_tools(result)

    async def _exchange(self, msg: wire.Message, deliver: Deliver) -> _Refused | None:
        """POST one request. Messages of a 2xx answer go to `deliver` as they
        come; anything else is returned as a refusal for the caller to judge."""
        msg_id = msg["id"]
        url = self.sse_endpoint or self.url
        headers = self._headers(msg)
        sent_session = "Mcp-Session-Id" in headers
        try:
            async with self._client.stream(
                "POST",
                url,
                content=orjson.dumps(msg),
                headers=headers,
                timeout=self._stream_timeout,
            ) as resp:
                if resp.is_success:
                    if self.sse_endpoint is not None:
                        await self._read_body(resp)  # read, so the connection is reused
                        return None  # 2024-11-05: the answer comes on the SSE stream
                    self._take_session(msg, resp)
                    return await self._read_answer(msg_id, resp, deliver)
                body = await self._read_body(resp)
                if resp.status_code == 404 and sent_session:
                    self._session_gone("session ended by the server (HTTP 404)")
                    return None
                challenge = resp.headers.get("www-authenticate")
                return _Refused(
                    http_wire.refusal_reply(msg_id, resp.status_code, body, challenge),
                    resp.status_code,
                )
        except HttpClientError as exc:
            return _Refused(http_wire.failure_reply(msg_id, _describe(exc)), None)

    def _take_session(self, msg: wire.Message, resp: Response) -> None:
        """2025-11-25 "Session Management": the session id comes with the
        InitializeResult. mcp 1.x sets one on refusals too: only this one counts."""
        if msg["method"] == "initialize" and not era.is_modern(msg):
            session_id = resp.headers.get("mcp-session-id")
            if session_id and all("!" <= ch <= "~" for ch in session_id):
                self.session_id = session_id

    async def _read_answer(
        self, msg_id: wire.RequestId, resp: Response, deliver: Deliver
    ) -> _Refused | None:
        ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype == "text/event-stream":
            cursor = _StreamCursor()
            try:
                if await self._read_events(resp, deliver, until=msg_id, cursor=cursor):
                    return None
            except HttpClientError as exc:
                # A broken stream is a disconnect too ("Resumability and
                # Redelivery"), resumable as a closed one; else as before.
                if cursor.last_id is None or self.session_id is None:
                    raise
                log.debug("upstream stream broke", id=msg_id, error=_describe(exc))
            if cursor.last_id is None or self.session_id is None:
                # Nothing to resume from, or a modern exchange: 2026-07-28
                # dropped resumability (changelog 9, SEP-2575).
                why = "stream ended without a reply"
                return _Refused(http_wire.failure_reply(msg_id, why), None)
            return await self._resume(msg_id, cursor, deliver)
        body = await self._read_reply_body(msg_id, resp)
        if isinstance(body, _Refused):
            return body
        if resp.status_code == 202 or not body:
            why = f"HTTP {resp.status_code} with no reply to a request"
            return _Refused(upstream_checks.malformed_reply(msg_id, why), None)
        if ctype != "application/json":
            why = f"unexpected content type {ctype or '(none)'}"
            return _Refused(upstream_checks.malformed_reply(msg_id, why), None)
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _Refused(
                upstream_checks.malformed_reply(msg_id, "the HTTP body is not JSON"), None
            )
        deep = upstream_checks.may_nest_too_deep(body)
        got_reply = False
        for item in value if isinstance(value, list) else [value]:
            message = self._decode(upstream_checks.screen_value(item, deep=deep), body)
            if message is not None:
                got_reply |= "method" not in message and message.get("id") == msg_id
                deliver(message)
        if got_reply:
            return None
        return _Refused(http_wire.failure_reply(msg_id, "body holds no reply"), None)

    async def _read_events(
        self,
        resp: Response,
        deliver: Deliver,
        until: wire.RequestId | None = None,
        cursor: _StreamCursor | None = None,
    ) -> bool:
        """Deliver each message of an SSE stream; True once the reply to
        `until` came. `cursor` follows the event ids and retry hints."""
        parser = SseParser(self._max_bytes)
        track = cursor.saw if cursor is not None else _ignore
        chunks = resp.aiter_bytes()
        got = False
        async for chunk in chunks:
            for event in parser.feed(chunk):
                track(event)
                got = self._handle_event(event, deliver, until) or got
            if got:
                break
        if not got:
            last = parser.close()
            for event in last:
                track(event)
            return any([self._handle_event(event, deliver, until) for event in last])
        # The server ends the stream after the reply: read that end, so the
        # connection goes back to the pool, but do not wait on one that lingers.
        with anyio.move_on_after(0.2):
            async for _ in chunks:
                pass
        return True

    async def _resume(
        self, msg_id: wire.RequestId, cursor: _StreamCursor, deliver: Deliver
    ) -> _Refused | None:
        """2025-11-25 "Resumability and Redelivery": the server closed a
        legacy call's stream before the reply (a disconnect is not a
        cancellation), so GET it again from the last event id, as often as
        it closes, and deliver what comes as the original stream's messages.
        Bounded by the call's own scope (timeout, cancel) and by
        `_MAX_IDLE_RESUMES` resumptions in a row that bring no new event."""
        idle = 0
        while True:  # each pass reopens the stream once; ends as the docstring says
            if cursor.last_id is None:
                why = "stream ended without a reply"
                return _Refused(http_wire.failure_reply(msg_id, why), None)
            if idle >= _MAX_IDLE_RESUMES:
                why = f"it ended {idle} times in a row with nothing new"
                return self._resume_failed(msg_id, why)
            hint = cursor.retry_ms / 1000 if cursor.retry_ms is not None else _RESUME_DELAY
            delay = min(hint, _RESUME_DELAY_MAX)
            log.debug("upstream stream resumed", id=msg_id, after=cursor.last_id, delay=delay)
            await self.sleep(delay)
            headers = {**self._headers({}), "Accept": "text/event-stream"}
            headers.pop("Content-Type", None)
            headers["Last-Event-ID"] = cursor.last_id
            before = cursor.events
            try:
                async with self._client.stream(
                    "GET", self.url, headers=headers, timeout=self._stream_timeout
                ) as resp:
                    status = resp.status_code
                    ctype = resp.headers.get("content-type", "")
                    if resp.is_success and "event-stream" in ctype:
                        if await self._read_events(resp, deliver, until=msg_id, cursor=cursor):
                            return None
                    else:
                        await self._read_body(resp)  # read, so the connection is reused
                    if status == 404 and "Mcp-Session-Id" in headers:
                        # Fails this call too, as every pending one.
                        self._session_gone("session ended by the server (HTTP 404 on GET)")
                        return None
                    if 400 <= status < 500 or (resp.is_success and "event-stream" not in ctype):
                        return self._resume_failed(msg_id, f"GET answered HTTP {status}", status)
                    # A 5xx is an outage, not a refusal: tried again, as an idle pass.
            except HttpClientError as exc:
                log.debug("upstream stream resumption broke", id=msg_id, error=_describe(exc))
            idle = 0 if cursor.events > before else idle + 1

    def _resume_failed(
        self, msg_id: wire.RequestId, why: str, status: int | None = None
    ) -> _Refused:
        self._resume_log.warning("upstream stream not resumed", url=self.url, reason=why)
        # No status for the caller to judge: a refused GET is no verdict on the POST.
        return _Refused(http_wire.resume_failed_reply(msg_id, why, status), None)

    def _handle_event(
        self, event: http_wire.SseEvent, deliver: Deliver, until: wire.RequestId | None
    ) -> bool:
        if event.event != "message" or not event.data.strip():
            return False  # priming events (an id, empty data), retry hints
        message = self._decode(upstream_checks.screen_line(event.data), event.data)
        if message is None:
            return False
        deliver(message)
        return until is not None and "method" not in message and message.get("id") == until

    def _decode(
        self, outcome: wire.Message | upstream_checks.Refused, raw: bytes | str
    ) -> wire.Message | None:
        """A screened message, or what stands in for a refused one: the error
        for the call it names (None if it names none). A malformed request of
        the server's is answered here."""
        if not isinstance(outcome, upstream_checks.Refused):
            return outcome
        self._junk_log.warning(
            "upstream sent a malformed message",
            reason=outcome.reason,
            data=raw[:200] if isinstance(raw, str) else raw[:200].decode("utf-8", "replace"),
            url=self.url,
        )
        if outcome.to_server is not None:
            self._spawn(self._post_message, outcome.to_server)
        return outcome.to_call

    async def _read_reply_body(self, msg_id: wire.RequestId, resp: Response) -> bytes | _Refused:
        """A request's JSON reply body, or the refusal its caller gets when
        the body is over the size limit or breaks off."""
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > self._max_bytes:
                    self._junk_log.warning(
                        "upstream HTTP body over the size limit dropped", size=size, url=self.url
                    )
                    why = f"the reply is over the {self._max_bytes}-byte message limit"
                    return _Refused(upstream_checks.malformed_reply(msg_id, why), None)
                chunks.append(chunk)
        except HttpClientError as exc:
            return _Refused(http_wire.failure_reply(msg_id, _describe(exc)), None)
        return b"".join(chunks)

    async def _read_body(self, resp: Response) -> bytes | None:
        """The body, or None if it is over the message size limit (or breaks)."""
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > self._max_bytes:
                    log.warning("upstream HTTP body over the size limit dropped", size=size)
                    return None
                chunks.append(chunk)
        except HttpClientError:
            return None
        return b"".join(chunks)

    # -- x-mcp-header: the tools/list cache -------------------------------------------
    def _take_tools(self, result: dict[str, Any]) -> None:
        """Learn the annotated arguments of listed tools, and drop the tools
        whose annotations are invalid (2026-07-28 "Schema Extension": an HTTP
        client must exclude them from tools/list)."""
        tools = result.get("tools")
        if not isinstance(tools, list):
            return
        kept: list[Any] = []
        for tool in tools:
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                kept.append(tool)
                continue
            try:
                params = http_binding.tool_header_params(tool)
            except http_binding.InvalidAnnotation as exc:
                log.warning("upstream tool excluded", tool=tool["name"], reason=str(exc))
                self._tool_params.pop(tool["name"], None)
                continue
            self._tool_params[tool["name"]] = params
            kept.append(tool)
        if len(kept) != len(tools):
            result["tools"] = kept

    def _header_mismatch(self, msg: wire.Message, refused: _Refused) -> bool:
        return (
            msg["method"] == "tools/call"
            and era.is_modern(msg)
            and refused.reply.get("error", {}).get("code") == wire.HEADER_MISMATCH
        )

    async def _refresh_tools(self, call: wire.Message, generation: int) -> None:
        """Our own tools/list, all pages, unless another refresh finished
        since `call` was first sent."""
        async with self._tools_lock:
            if self._tools_generation != generation:
                return
            self._tools_generation += 1
            cursor: object = None
            for _ in range(_MAX_TOOL_PAGES):
                params: dict[str, Any] = {"_meta": http_wire.modern_meta(call)}
                if cursor is not None:
                    params["cursor"] = cursor
                request = wire.request(f"gw-http-{next(self._own_ids)}", "tools/list", params)
                replies: list[wire.Message] = []
                await self._exchange(request, replies.append)
                answer = next((m for m in replies if m.get("id") == request["id"]), None)
                result = answer.get("result") if answer is not None else None
                if not isinstance(result, dict):
                    log.warning("tools/list refresh failed", answer=answer)
                    return
                self._take_tools(result)
                cursor = result.get("nextCursor")
                if not cursor:
                    return

    # -- notifications and our answers to server requests ------------------------------
    async def _post_message(self, msg: wire.Message) -> None:
        """A notification or a response: the server answers 202 and nothing more."""
        url = self.sse_endpoint or self.url
        headers = self._headers(msg)
        try:
            async with self._client.stream(
                "POST",
                url,
                content=orjson.dumps(msg),
                headers=headers,
                timeout=self._short_timeout,
            ) as resp:
                body = await self._read_body(resp)
        except HttpClientError as exc:
            log.warning("upstream POST failed", what=_what(msg), error=_describe(exc))
            return
        if resp.status_code == 404 and "Mcp-Session-Id" in headers:
            self._session_gone("session ended by the server (HTTP 404)")
        elif not resp.is_success:
            log.warning(
                "upstream refused a message",
                what=_what(msg),
                status=resp.status_code,
                body=(body or b"")[:200].decode("utf-8", "replace"),
            )
        elif msg.get("method") == "notifications/initialized" and self.sse_endpoint is None:
            # The session is up: open the GET stream, where server requests and
            # notifications not tied to a call arrive (2025-11-25 "Listening
            # for Messages from the Server").
            await self._run_get_stream()

    # -- the legacy GET stream --------------------------------------------------------
    async def _run_get_stream(self) -> None:
        failures = 0  # ends of the stream since it last opened
        hint: float | None = None  # the server's `retry`, in seconds
        while self._ended is None:  # each pass opens the stream once
            headers = {**self._headers({}), "Accept": "text/event-stream"}
            headers.pop("Content-Type", None)
            try:
                async with self._client.stream(
                    "GET", self.url, headers=headers, timeout=self._stream_timeout
                ) as resp:
                    status = resp.status_code
                    if status == 405:
                        log.debug("upstream offers no GET stream", url=self.url)
                        return
                    if status == 404 and "Mcp-Session-Id" in headers:
                        self._session_gone("session ended by the server (HTTP 404 on GET)")
                        return
                    ctype = resp.headers.get("content-type", "")
                    if 400 <= status < 500 or (resp.is_success and "event-stream" not in ctype):
                        log.warning("upstream GET stream refused", status=status, ctype=ctype)
                        return
                    if resp.is_success:
                        failures, hint = 0, None
                        parser = SseParser(self._max_bytes)
                        async for chunk in resp.aiter_bytes():
                            for event in parser.feed(chunk):
                                if event.retry is not None:
                                    hint = event.retry / 1000
                                self._handle_event(event, self._push_unattached, None)
            except HttpClientError as exc:
                log.debug("upstream GET stream broke", error=_describe(exc))
            failures += 1
            first = _GET_RETRY_FIRST if hint is None else hint
            # Never sooner than the server asked, even past our own cap.
            await self.sleep(backoff.delay(failures, first, max(first, _GET_RETRY_MAX)))

    async def _delete_session(self) -> None:
        """2025-11-25: a client that no longer needs its session DELETEs it
        (405 means the server does not allow that; nothing more to do)."""
        headers = self._headers({})
        headers.pop("Content-Type", None)
        try:
            await self._client.request(
                "DELETE", self.url, headers=headers, timeout=self._short_timeout
            )
        except HttpClientError as exc:
            log.debug("upstream session DELETE failed", error=_describe(exc))

    # -- the deprecated HTTP+SSE transport (2024-11-05) ------------------------------
    def _legacy_sse_fallback(self, msg: wire.Message, refused: _Refused) -> bool:
        """2025-11-25 "Backwards Compatibility": an `initialize` POST refused
        with 400/404/405 (and, 2026-07-28, no modern error in the body) means
        the URL may be an old HTTP+SSE endpoint."""
        return (
            msg["method"] == "initialize"
            and not era.is_modern(msg)
            and self.sse_endpoint is None
            and refused.status in (400, 404, 405)
            and not http_wire.is_modern_error(refused.reply)
        )

    async def _open_sse_transport(self) -> bool:
        """GET the URL and wait for its `endpoint` event; True once it names
        where to POST (then every message comes on that stream)."""
        found = anyio.Event()
        assert self._tg is not None  # called from one of its tasks
        self._tg.start_soon(self._run_sse_transport, found)
        with anyio.move_on_after(self._read_timeout):
            await found.wait()
        if self.sse_endpoint is None:
            return False
        log.info("upstream uses the deprecated HTTP+SSE transport", endpoint=self.sse_endpoint)
        return True

    async def _run_sse_transport(self, found: anyio.Event) -> None:
        headers = {k: v for k, v in self._base.items() if k != "Content-Type"}
        headers["Accept"] = "text/event-stream"
        try:
            async with self._client.stream(
                "GET", self.url, headers=headers, timeout=self._stream_timeout
            ) as resp:
                if not resp.is_success or "event-stream" not in resp.headers.get(
                    "content-type", ""
                ):
                    return
                parser = SseParser(self._max_bytes)
                async for chunk in resp.aiter_bytes():
                    for event in parser.feed(chunk):
                        if event.event == "endpoint" and self.sse_endpoint is None:
                            self.sse_endpoint = http_wire.endpoint_url(self.url, event.data)
                            if self.sse_endpoint is None:
                                log.warning("endpoint on another origin refused", data=event.data)
                                return
                            found.set()
                        else:
                            self._handle_event(event, self._deliver_sse, None)
        except HttpClientError as exc:
            log.warning("upstream HTTP+SSE stream broke", error=_describe(exc))
        finally:
            found.set()
            if self.sse_endpoint is not None:
                # The stream is the session: once it ends, so does the connection.
                self._session_gone("HTTP+SSE stream ended")

    def _deliver_sse(self, msg: wire.Message) -> None:
        """On HTTP+SSE every reply comes on the one stream: match it to its request."""
        msg_id = msg.get("id")
        if "method" not in msg and isinstance(msg_id, str | int):
            inflight = self._inflight.pop(msg_id, None)
            if inflight is not None and inflight.method == "initialize":
                result = msg.get("result")
                if isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
                    self.legacy_version = result["protocolVersion"]
        self._push(msg)


def _ignore(event: http_wire.SseEvent) -> None:
    return None


def _what(msg: wire.Message) -> str:
    return str(msg.get("method") or f"reply to {msg.get('id')!r}")


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
