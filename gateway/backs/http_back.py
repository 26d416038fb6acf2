"""The upstream Streamable HTTP transport: one `HttpServerConnection` is one
upstream "session" — for a modern server a stateless series of POSTs, for a
legacy one an `Mcp-Session-Id` (2025-11-25 transports "Session Management"),
and for a 2024-11-05 server the deprecated HTTP+SSE stream.

It offers the same face as the stdio back (`send`, `send_nowait`,
`receive_batch`, `run_background`, `aclose`, `terminate`), so the pool, the era
probe, sessions and the MRTR bridge run over it unchanged: each request is a
POST, written at once with its answer read in the connection's callbacks
(http_connection) or, once it must wait for something, in a background task;
what comes back — the reply, plus any notifications or server requests on its
SSE stream, or on the legacy GET stream — lands in the queue `receive_batch`
drains. HTTP failures become JSON-RPC error replies under the request's id, so
callers (and `era_probe.judge`) always see a normal answer. Transport only: it
makes no protocol decisions beyond what the transport specs require of a client.

Its parts: `http_session` (where messages go, their headers, what answers set
up), `http_client` and `http_connection` (the one HTTP/1.1 client),
`http_sent_call` (one call sent without a task), `http_stream` (reading
answers and event streams, resumption, the GET stream), `http_sse_transport`
(the 2024-11-05 transport), `http_wire` (what each answer means, no I/O).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup

from gateway import wire
from gateway.backs import http_requests, http_wire
from gateway.backs.http_client import HttpClient
from gateway.backs.http_exchange import HttpExchange
from gateway.backs.http_failures import describe
from gateway.backs.http_requests import HttpRequests
from gateway.backs.http_session import HttpSession
from gateway.backs.http_sse_transport import open_http_sse
from gateway.backs.http_stream import StreamReader
from gateway.upstream_errors import ConnectionLost

log = structlog.get_logger("gateway.backs.http")

_ids = itertools.count(1)


class HttpConnectionEnded(ConnectionLost):
    """The upstream session is over (closed by us, or ended by the server)."""


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
        trace_headers: bool = False,
    ) -> None:
        # The ServerConnection protocol names connections by pid; ours is a number.
        self.pid = next(_ids)
        self.tap: Callable[[str, wire.Message], None] | None = None
        self._session = HttpSession(
            client,
            url,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            headers=headers,
            trace_headers=trace_headers,
        )
        self._max_bytes = max_bytes
        # What waits out a resumption's or the GET stream's retry delay (tests observe it).
        self.sleep: Callable[[float], Awaitable[None]] = anyio.sleep
        self._reader = StreamReader(
            self._session,
            max_bytes,
            answer_server=lambda msg: self._spawn(self._post_message, msg),
            session_gone=self._session_gone,
            sleep=self._wait,
        )
        self.exchange = HttpExchange(self._session, self._reader, self._session_gone)
        self._ready: deque[wire.Message] = deque()
        self._wake = anyio.Event()
        self._ended: str | None = None
        self._tg: TaskGroup | None = None
        self._backlog: list[tuple[Callable[..., Coroutine[Any, Any, None]], tuple[Any, ...]]] = []
        self._stop = anyio.Event()
        # Set when the backlog holds tasks to start: what the direct path's
        # callbacks, which run outside any task, ask for (anyio starts tasks
        # only from one).
        self._kick = anyio.Event()
        self._stopped = anyio.Event()
        self._delete_scope: anyio.CancelScope | None = None
        # Server requests that came on the GET stream, until answered: 2025-11-25
        # says those are unrelated to any running call, so none may claim them.
        self._unattached: set[wire.RequestId] = set()
        self._batch_origins: dict[int, wire.RequestId] = {}
        self.requests = HttpRequests(
            self._session,
            self._reader,
            self.exchange,
            max_bytes,
            spawn=self._spawn,
            push=self._push,
            open_sse=self._open_sse_transport,
            ended=lambda: self._ended,
        )
        self._inflight = self.requests.inflight

    # What the session has set up, for the pool and tests to read.
    @property
    def url(self) -> str:
        return self._session.url

    @property
    def ended(self) -> str | None:
        """Why the connection ended, once it has."""
        return self._ended

    @property
    def session_id(self) -> str | None:
        return self._session.session_id

    @property
    def legacy_version(self) -> str | None:
        return self._session.legacy_version

    @property
    def sse_endpoint(self) -> str | None:
        return self._session.sse_endpoint

    # -- the ServerConnection face ---------------------------------------------
    def send_nowait(self, msg: wire.Message) -> None:
        if self._ended is not None:
            raise HttpConnectionEnded(self._ended)
        if self.tap is not None:
            self.tap("to-server", msg)
        if "method" in msg and "id" in msg:
            self.requests.start(msg)
        elif msg.get("method") == "notifications/cancelled":
            self._cancel(msg)
        else:
            if "method" not in msg:
                self._unattached.discard(msg.get("id"))
            self._spawn(self._post_message, msg)

    async def send(self, msg: wire.Message) -> None:
        if msg.get("method") == "notifications/initialized" and "id" not in msg:
            # Waits for the server to take it: each POST may travel on its own
            # connection, and a request sent meanwhile could reach a server
            # that has not finished initializing (mcp servers register tools
            # on it; the everything server's tools/list then lacks some).
            if self._ended is not None:
                raise HttpConnectionEnded(self._ended)
            if self.tap is not None:
                self.tap("to-server", msg)
            if await self.exchange.message(msg) and self._session.sse_endpoint is None:
                # The session is up: its GET stream, where server requests and
                # notifications not tied to a call arrive (2025-11-25
                # "Listening for Messages from the Server").
                self._spawn(self._reader.listen, self._push_unattached, self._is_over)
            return
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
            key: self.requests.origins.pop(key)
            for key in map(id, batch)
            if key in self.requests.origins
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
                while not self._stop.is_set():  # ends with the session (_end wakes it)
                    backlog, self._backlog = self._backlog, []
                    for fn, args in backlog:
                        tg.start_soon(self._guarded, fn, *args)
                    await self._kick.wait()
                    self._kick = anyio.Event()
                tg.cancel_scope.cancel()
        finally:
            self._tg = None
            self._stopped.set()

    async def aclose(self, grace: float = 5.0) -> int | None:
        """Cancel in-flight exchanges, close streams, DELETE the legacy session."""
        first = self._ended is None
        self._end("connection closed")
        with anyio.CancelScope(shield=True):
            if first and self._session.session_id is not None:
                with anyio.move_on_after(
                    min(grace, self._session.read_timeout)
                ) as self._delete_scope:
                    await self._session.delete()
            with anyio.move_on_after(grace):
                if self._started:
                    await self._stopped.wait()
        return 0

    def terminate(self) -> None:
        """Abort now: no DELETE, every exchange cancelled."""
        if self._delete_scope is not None:
            self._delete_scope.cancel()
        self._end("connection terminated")

    @property
    def streams_name_calls(self) -> bool:
        """Streamable HTTP answers each call on a stream of its own; the old
        HTTP+SSE transport has one stream for everything."""
        return self._session.sse_endpoint is None

    def stream_of(self, msg: wire.Message) -> wire.RequestId | None:
        """The request on whose response stream a message of the batch last
        handed out came, or None (the GET stream)."""
        return self._batch_origins.get(id(msg))

    def outside_calls(self, request_id: wire.RequestId) -> bool:
        """Whether a server request came outside any call's stream (2025-11-25
        "Listening for Messages from the Server": the GET stream's messages
        "SHOULD be unrelated to any concurrently-running JSON-RPC request")."""
        return request_id in self._unattached

    # -- bookkeeping ---------------------------------------------------------------
    async def _wait(self, seconds: float) -> None:
        await self.sleep(seconds)  # looked up now: tests replace `sleep`

    @property
    def _started(self) -> bool:
        return self._tg is not None or self._stopped.is_set()

    def _spawn(self, fn: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        if self._tg is not None and not self._in_callback():
            self._tg.start_soon(self._guarded, fn, *args)
        else:  # run_background starts these (when it starts, or when kicked)
            self._backlog.append((fn, args))
            self._kick.set()

    def _in_callback(self) -> bool:
        """Whether this runs in one of the direct path's callbacks, outside any task."""
        return asyncio.current_task() is None

    async def _guarded(self, fn: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        """A bug or an odd input (say, a header value HTTP cannot carry) in
        one exchange must not take the whole task group, and the gateway, down."""
        try:
            await fn(*args)
        # Any failure: a call still waiting was already answered with a gateway
        # error by _run_request; here the operator gets one line, no traceback.
        except Exception as exc:
            log.error(
                "upstream http task failed", task=fn.__name__, url=self.url, error=describe(exc)
            )

    def _push(self, msg: wire.Message) -> None:
        self._ready.append(msg)
        self._wake.set()

    def _push_unattached(self, msg: wire.Message) -> None:
        if "method" not in msg:
            # The GET stream carries no replies (2025-11-25 "Listening for
            # Messages from the Server"): one there would be routed by its id
            # alone, to whichever call has it.
            http_requests.foreign_log.warning(
                "upstream sent a reply on its GET stream; dropped",
                url=self.url,
                got=str(msg.get("id"))[:64],
            )
            return
        if "id" in msg:
            self._unattached.add(msg["id"])
        self._push(msg)

    def _end(self, reason: str) -> None:
        if self._ended is None:
            self._ended = reason
            log.info("upstream http session over", url=self.url, reason=reason)
            for inflight in list(self._inflight.values()):
                inflight.cancel()  # the tasks' scopes go with the task group anyway
        self._backlog.clear()
        self._stop.set()
        self._kick.set()
        self._wake.set()

    def _session_gone(self, reason: str) -> None:
        """The server ended the legacy session (404 on our session id): every
        pending request fails, then the connection ends as a crashed stdio
        server would, and the pool opens a new session on demand."""
        for msg_id, inflight in list(self._inflight.items()):
            inflight.cancel()
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
            inflight.cancel()
        if inflight is None or not inflight.modern:
            self._spawn(self._post_message, msg)

    # -- notifications and our answers to server requests ------------------------------
    async def _post_message(self, msg: wire.Message) -> None:
        if (
            await self.exchange.message(msg)
            and msg.get("method") == "notifications/initialized"
            and self._session.sse_endpoint is None
        ):
            # The session is up: open the GET stream (as in send()).
            await self._reader.listen(self._push_unattached, self._is_over)

    def _is_over(self) -> bool:
        return self._ended is not None

    # -- the deprecated HTTP+SSE transport (2024-11-05) ------------------------------
    async def _open_sse_transport(self) -> bool:
        return await open_http_sse(
            self._spawn,
            self._session,
            self._reader,
            self._max_bytes,
            deliver=self._deliver_sse,
            session_gone=self._session_gone,
        )

    def _deliver_sse(self, msg: wire.Message) -> None:
        """On HTTP+SSE every reply comes on the one stream: match it to its request."""
        msg_id = msg.get("id")
        if "method" not in msg and isinstance(msg_id, str | int):
            inflight = self._inflight.pop(msg_id, None)
            if inflight is not None and inflight.method == "initialize":
                version = http_wire.negotiated_version(msg)
                if version is not None:
                    self._session.legacy_version = version
        self._push(msg)
