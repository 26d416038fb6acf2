"""The HTTP back's call path at the speed of a bare relay: a request is
written at once on an idle keep-alive connection, and its answer is parsed in
the event loop's own callbacks, with no task, cancel scope, socket stream or
timeout scope per call: the stdio back's model (a write now, the reply
through a callback). httptools (llhttp, the parser of the HTTP front's
uvicorn) does the parsing, so nothing here reads HTTP by hand.

Why not the general path (http_client): py-spy on the stdio front → HTTP
back run at 32 in flight put 69 % of the gateway's CPU in its task per
request: a cancel scope for every read and write, anyio's socket stream, the
idle-socket `select`, h11's per-request objects and header checks.

A connection handles one whole exchange itself when the answer is a complete
body (a JSON reply, a refusal): `DirectCall.answered` gets it at once. A 2xx
event stream goes, chunk by chunk, to the sink the caller gives for it
(`DirectCall.events`), still in the callbacks; without one it goes on in a
task of the caller's (`DirectCall.streaming`), which reads the rest of the
body as the general path's `Response`. Asyncio only (another loop takes
the general path); http, and https over asyncio's TLS transport, whose
callbacks are the same.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import anyio
import httptools

from gateway.backs.http_client import (
    HEAD_TOO_LONG,
    MAX_HEAD_BYTES,
    HttpClientError,
    Response,
    connect_failure,
    describe,
    wrote_past_answer,
)

# Body bytes an event stream may hold unread before the socket stops being
# read (the general path reads only as its consumer asks).
_FEED_HIGH = 1 << 20

# How long a stream may go on after the sink has what it needed before its
# connection is closed instead of reused (the general path's bound too).
_LINGER = 0.2

_HEAD, _BUFFER, _STREAM, _INFO, _OVER, _EVENTS = range(6)


class DirectCall(Protocol):
    """What a connection reports about the exchange it carries; each method
    is called once at most, outside the parser."""

    def answered(self, status: int, headers: dict[str, str], body: bytes | None, size: int) -> None:
        """The whole answer; `body` None: `size` bytes, over the message size limit."""

    def events(self, headers: dict[str, str]) -> EventSink | None:
        """A 2xx event stream: the sink that takes its body here, in the
        callbacks, or None to read it in a task (`streaming`)."""

    def streaming(self, response: Response, done: Callable[[], None]) -> None:
        """A 2xx event stream: its body arrives through `response`; `done`
        once its reader is through with it (read or not)."""

    def failed(self, why: str) -> None:
        """The exchange failed below HTTP (as HttpClientError's text)."""

    def retry(self) -> None:
        """A reused connection closed before any answer: nothing of the
        request was taken, so it may be sent again on another one."""


class EventSink(Protocol):
    """An event stream's body, taken chunk by chunk outside the parser."""

    def feed(self, chunk: bytes) -> bool:
        """True once it needs no more of the stream (the rest is read only to
        free the connection, and for `_LINGER` at most)."""

    def end(self, error: str | None) -> None:
        """The stream ended; `error`: it broke, and why."""


class _Feed:
    """The body of a streamed answer, from the callbacks to a task."""

    def __init__(self, connection: DirectConnection) -> None:
        self._connection: DirectConnection | None = connection
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._ended = False
        self._error: str | None = None
        self._wake: anyio.Event | None = None

    def put(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._size += len(chunk)
        if self._size > _FEED_HIGH and self._connection is not None:
            self._connection.pause()
        self._notify()

    def end(self, error: str | None = None) -> None:
        self._ended, self._error, self._connection = True, error, None
        self._notify()

    def _notify(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            # Ends at the body's end or raises its failure; a call overdue is
            # aborted by the session's sweeper, which cancels this task too.
            while True:
                while not self._chunks:
                    if self._ended:
                        if self._error is not None:
                            raise HttpClientError(self._error)
                        return
                    self._wake = anyio.Event()
                    await self._wake.wait()
                chunk = self._chunks.popleft()
                self._size -= len(chunk)
                if self._connection is not None and self._size <= _FEED_HIGH:
                    self._connection.resume()
                yield chunk
        finally:
            self.close()

    def drain(self) -> list[bytes]:
        """What came so far, taken out (a sink reads on in the callbacks)."""
        chunks = list(self._chunks)
        self._chunks.clear()
        self._size = 0
        return chunks

    def close(self) -> None:
        """The reader is done. Left before the end, the answer's rest is
        unread, so the connection cannot serve another request."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class DirectConnection(asyncio.Protocol):
    """One keep-alive connection, one exchange at a time."""

    def __init__(self, pool: DirectPool) -> None:
        self._pool = pool
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._call: DirectCall | None = None
        self.reused = False
        self.closed = False
        self._paused = False
        self._write_timer: asyncio.TimerHandle | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._reset()

    def _reset(self) -> None:
        self._mode = _HEAD
        self._status = 0
        self._headers: dict[str, str] = {}
        self._chunks: list[bytes] = []
        self._size = 0
        self._answered = False  # a byte of the answer has arrived
        self._head_bytes = 0  # read while the head was not yet whole
        self._complete = False
        self._keep_alive = False
        self._trailing = False  # bytes came after the answer: not ours to read
        self._feed: _Feed | None = None
        self._sink: EventSink | None = None  # _EVENTS: what takes the stream's body
        self._stop_linger()

    # -- what the pool and the caller do ------------------------------------------------
    def send(self, data: bytes, call: DirectCall, write_timeout: float) -> None:
        assert self._transport is not None and self._call is None
        self._reset()
        self._call = call
        self._transport.write(data)
        if self._transport.get_write_buffer_size():
            # The server does not take the request: bounded as the general
            # path bounds its write.
            loop = asyncio.get_running_loop()
            self._write_timer = loop.call_later(write_timeout, self._write_overdue, call)

    def drop(self, call: DirectCall) -> None:
        """The caller gave up on `call` (cancelled): the answer will not be
        read, so the connection is closed rather than reused."""
        if self._call is call:
            self._call = None
            self._sink = None
            self.close()

    def close(self) -> None:
        self._call = None
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        self._call = None
        self.closed = True
        if self._transport is not None:
            self._transport.abort()

    def pause(self) -> None:
        if not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self._transport is not None and not self.closed:
            self._paused = False
            self._transport.resume_reading()

    def _write_overdue(self, call: DirectCall) -> None:
        self._write_timer = None
        transport = self._transport
        if self._call is call and transport is not None and transport.get_write_buffer_size():
            self.abort()
            call.failed("timed out waiting for the upstream")

    # -- asyncio.Protocol ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        call = self._call
        if call is None and self._feed is None:
            self.close()  # the server wrote to an idle connection: not reusable
            return
        if call is not None:
            self._answered = True
            if self._write_timer is not None:
                self._write_timer.cancel()
                self._write_timer = None
        if not self._parse(data):
            return  # the answer broke: whoever reads it was told
        if self._mode == _HEAD:
            self._head_bytes += len(data)
            # httptools buffers a header without end: the general path's bound.
            if self._head_bytes > MAX_HEAD_BYTES:
                self._broken(HEAD_TOO_LONG)
                return
        if self._mode == _STREAM and call is not None and self._feed is not None:
            feed = self._feed
            sink = call.events(self._headers)
            if sink is not None:  # read here: what came with the head first
                self._mode, self._sink, self._feed = _EVENTS, sink, None
                self._chunks = feed.drain()
                self.resume()  # a feed that filled up paused it; the sink never does
            else:
                self._call = None  # a task reads on through the feed
                call.streaming(Response(self._status, self._headers, feed.chunks()), feed.close)
        if self._mode == _EVENTS:
            self._pump()
        elif self._mode == _STREAM:
            if self._complete:
                self._done()
        elif call is None:
            return
        elif self._mode == _OVER:
            self.close()
            call.answered(self._status, self._headers, None, self._size)
        elif self._complete and self._mode == _BUFFER:
            self._done()
            call.answered(self._status, self._headers, b"".join(self._chunks), self._size)

    def _pump(self) -> None:
        """Hand the sink what the parser took from the stream; once the stream
        is whole the connection is free first (the sink may send the next
        request), then the sink hears of the end."""
        sink, chunks, self._chunks = self._sink, self._chunks, []
        if sink is None:
            return
        complete = self._complete
        if complete:
            self._done()
        done = False
        for chunk in chunks:
            done = sink.feed(chunk)
        if complete:
            sink.end(None)
        elif done and self._linger is None:
            loop = asyncio.get_running_loop()
            self._linger = loop.call_later(_LINGER, self._linger_over)

    def _linger_over(self) -> None:
        """The sink had what it needed, and the stream goes on: the rest is not
        read, so the connection is not reused."""
        self._linger = None
        if self._mode == _EVENTS and not self._complete:
            self._sink = None
            self.close()

    def _stop_linger(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None

    def _parse(self, data: bytes) -> bool:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self._complete:  # junk after a whole answer: it stands, the connection goes
                self._trailing = True
                return True
            self._broken(describe(exc))
            return False
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool.forget(self)
        if self._write_timer is not None:
            self._write_timer.cancel()
        self._stop_linger()
        call, feed, self._call = self._call, self._feed, None
        sink, self._sink = self._sink, None
        unframed = "content-length" not in self._headers and not self._chunked()
        if sink is not None and not self._complete:
            sink.end(None if unframed else "the upstream closed the connection mid-body")
            return
        if feed is not None and not self._complete:
            # Without a length or chunks the body ends when the connection does.
            feed.end(None if unframed else "the upstream closed the connection mid-body")
            self._feed = None
            return
        if call is None:
            return
        if not self._answered and self.reused:
            call.retry()
        elif self._mode == _BUFFER and unframed:
            call.answered(self._status, self._headers, b"".join(self._chunks), self._size)
        elif self._mode in (_BUFFER, _OVER):
            call.failed("the upstream closed the connection mid-body")
        else:
            call.failed(describe(exc) if exc is not None else "EndOfStream")

    def _chunked(self) -> bool:
        return "chunked" in self._headers.get("transfer-encoding", "").lower()

    def _broken(self, why: str) -> None:
        call, feed, sink = self._call, self._feed, self._sink
        self.abort()
        self._feed = self._sink = None
        if sink is not None:  # the sink answers the call (or already has)
            sink.end(why)
        elif call is not None:  # not handed over yet
            call.failed(why)
        elif feed is not None:
            feed.end(why)

    def _done(self) -> None:
        """The answer is read: the connection serves the next request."""
        self._call = None
        self._feed = None
        self._sink = None
        self._stop_linger()
        self.resume()  # a feed that filled up paused it, and is now done with it
        if self._keep_alive and not self.closed and not self._trailing:
            self._pool.release(self)
        else:
            if self._trailing:
                wrote_past_answer(self._pool.host, self._pool.port)
            self.close()

    # -- httptools callbacks (nothing here may raise, nor call out) -----------------------
    def on_message_begin(self) -> None:
        if self._complete:
            self._trailing = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._trailing:
            return
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        headers = self._headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        if self._trailing:
            return
        status = self._parser.get_status_code()
        self._status = status
        if status < 200:
            self._mode = _INFO  # informational: skipped, the answer follows
            return
        ctype = self._headers.get("content-type", "").split(";")[0].strip().lower()
        if 200 <= status < 300 and ctype == "text/event-stream":
            self._mode = _STREAM
            self._feed = _Feed(self)
        else:
            self._mode = _BUFFER

    def on_body(self, body: bytes) -> None:
        if self._trailing:
            return
        if self._mode == _STREAM:
            assert self._feed is not None
            self._feed.put(body)
        elif self._mode == _EVENTS:
            self._chunks.append(body)  # to the sink after this read's parse
        elif self._mode == _BUFFER:
            self._size += len(body)
            if self._size > self._pool.max_bytes:
                self._mode = _OVER
            else:
                self._chunks.append(body)

    def on_message_complete(self) -> None:
        if self._trailing:
            return
        if self._mode == _INFO:
            self._headers = {}
            self._mode = _HEAD
            self._head_bytes = 0
            return
        self._complete = True
        # Asked now: once the parser has moved past the message it forgets.
        self._keep_alive = self._parser.should_keep_alive()
        if self._mode == _STREAM:
            assert self._feed is not None
            self._feed.end()


class DirectPool:
    """Idle keep-alive connections to one origin, most recent first; `tls`:
    an https origin, verified with that context (asyncio's TLS transport
    carries the same callbacks)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_idle: int,
        max_bytes: int,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.tls = tls
        self.max_bytes = max_bytes
        self._max_idle = max_idle
        self._idle: list[DirectConnection] = []
        self._open: set[DirectConnection] = set()
        self._closed = False

    def take(self) -> DirectConnection | None:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                connection.reused = True
                return connection
        return None

    async def connect(self, timeout: float) -> DirectConnection:
        if self._closed:
            raise HttpClientError("the client is closed")
        loop = asyncio.get_running_loop()
        try:
            with anyio.fail_after(timeout):
                _, connection = await loop.create_connection(
                    lambda: DirectConnection(self),
                    self.host,
                    self.port,
                    ssl=self.tls,
                    server_hostname=self.host if self.tls is not None else None,
                    ssl_handshake_timeout=timeout if self.tls is not None else None,
                )
        except TimeoutError:
            raise HttpClientError(f"connecting to {self.host}:{self.port} timed out") from None
        except OSError as exc:
            raise connect_failure(self.host, self.port, exc) from None
        self._open.add(connection)
        return connection

    def release(self, connection: DirectConnection) -> None:
        if self._closed:
            connection.close()
            return
        self._idle.append(connection)
        if len(self._idle) > self._max_idle:
            self._idle.pop(0).close()

    def forget(self, connection: DirectConnection) -> None:
        self._open.discard(connection)

    def close(self) -> None:
        self._closed = True
        self._idle.clear()
        for connection in list(self._open):
            connection.abort()
        self._open.clear()
