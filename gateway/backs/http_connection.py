"""The HTTP back's one HTTP/1.1 connection: every exchange of the back —
a call's POST, initialize, a notification, the GET stream, DELETE, the
HTTP+SSE stream, over http or https — is written at once on a keep-alive
connection and its answer parsed in the event loop's own callbacks, with no
task, cancel scope or socket stream per exchange: the stdio back's model (a
write now, the answer through a callback). httptools (llhttp, the parser of
the HTTP front's uvicorn) does the parsing, so nothing here reads HTTP by
hand; asyncio's TLS transport carries the same callbacks for https.

What is variable is the exchange's to choose, once the answer's head is in
(`Exchange.body_for`): its body read whole (a JSON reply, a refusal) and
reported at once; an event stream handed chunk by chunk to a sink, still in
the callbacks; or the body handed to a task that awaits it (`BodyFeed`),
which is how the awaiting form (http_client) reads everything.

Why no h11 path beside it: py-spy on the stdio front → HTTP back at 32 in
flight put 69 % of the gateway's CPU in a task per request (a cancel scope
for every read and write, anyio's socket stream, the idle-socket `select`,
h11's per-request objects); and two implementations drift (issue #30: the
other one followed redirects, this one did not).
"""

from __future__ import annotations

import asyncio
from typing import Final, Literal, Protocol

import httptools

from gateway.backs.http_body_feed import BodyFeed
from gateway.backs.http_failures import (
    HEAD_TOO_LONG,
    MAX_HEAD_BYTES,
    describe,
    wrote_past_answer,
)

# How long a stream may go on after the sink has what it needed before its
# connection is closed instead of reused.
_LINGER = 0.2

_HEAD, _HEADED, _BUFFER, _STREAM, _INFO, _OVER, _EVENTS = range(7)

# What every connection reads into (asyncio.BufferedProtocol): a read is
# parsed, and what the parser keeps copied out, before the next read can
# happen, so one buffer serves them all. A plain Protocol gets a new bytes
# object of asyncio's 256 KiB read size for each read, shrunk to what came:
# malloc's mmap and trim thresholds can make that two system calls a read,
# which cost a stdio front → HTTP back hop up to a quarter of its throughput
# (a profile put `recv` at 17 µs a call against 4 µs in the same run).
_READ_SIZE = 64 * 1024
_buffer = memoryview(bytearray(_READ_SIZE))

WHOLE: Final = "whole"  # the body read whole, then `answered`
FEED: Final = "feed"  # the body to a task, through `streaming`
BodyChoice = Literal["whole", "feed"]


class Exchange(Protocol):
    """What a connection reports about the exchange it carries; each report
    comes once at most, outside the parser."""

    def body_for(self, status: int, headers: dict[str, str]) -> EventSink | BodyChoice:
        """The answer's head is in (final, not 1xx): how to take its body."""

    def answered(self, status: int, headers: dict[str, str], body: bytes | None, size: int) -> None:
        """The whole answer (WHOLE); `body` None: `size` bytes, over the limit."""

    def streaming(self, status: int, headers: dict[str, str], feed: BodyFeed) -> None:
        """The answer's body arrives through `feed` (FEED), to be read by a
        task, which closes it once it is through (read or not)."""

    def failed(self, why: str) -> None:
        """The exchange failed below HTTP (as HttpClientError's text)."""

    def retry(self) -> None:
        """A reused connection closed before any answer: nothing of the
        request was taken, so it may be sent again on another one."""


class Pool(Protocol):
    """Where a connection goes back once its answer is read (http_client.OriginPool)."""

    host: str
    port: int

    def release(self, connection: HttpConnection) -> None: ...
    def forget(self, connection: HttpConnection) -> None: ...


class EventSink(Protocol):
    """An answer's body, taken chunk by chunk outside the parser."""

    def feed(self, chunk: bytes) -> bool:
        """True once it needs no more of the body (the rest is read only to
        free the connection, and for `_LINGER` at most)."""

    def end(self, error: str | None) -> None:
        """The body ended; `error`: it broke, and why."""


class HttpConnection(asyncio.BufferedProtocol):
    """One keep-alive connection, one exchange at a time."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._call: Exchange | None = None
        self._limit = 0
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
        self._feed: BodyFeed | None = None
        self._sink: EventSink | None = None  # _EVENTS: what takes the body
        self._stop_linger()

    # -- what the pool and the caller do ------------------------------------------------
    def send(self, data: bytes, call: Exchange, write_timeout: float, limit: int) -> None:
        """Write request `data`; `limit`: the most body bytes a WHOLE answer may have."""
        assert self._transport is not None and self._call is None
        self._reset()
        self._call = call
        self._limit = limit
        self._transport.write(data)
        if self._transport.get_write_buffer_size():
            # The server does not take the request: its write is bounded.
            loop = asyncio.get_running_loop()
            self._write_timer = loop.call_later(write_timeout, self._write_overdue, call)

    def drop(self, call: Exchange) -> None:
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

    def _write_overdue(self, call: Exchange) -> None:
        self._write_timer = None
        transport = self._transport
        if self._call is call and transport is not None and transport.get_write_buffer_size():
            self.abort()
            call.failed("timed out waiting for the upstream")

    # -- asyncio.Protocol ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return _buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(_buffer[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
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
            # llhttp buffers a head without end: bounded here.
            if self._head_bytes > MAX_HEAD_BYTES:
                self._broken(HEAD_TOO_LONG)
                return
        if self._mode == _HEADED and call is not None:
            self._choose(call)
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

    def _choose(self, call: Exchange) -> None:
        """The head is in: the exchange says how its body goes, and what came
        with the head goes that way."""
        choice = call.body_for(self._status, self._headers)
        if choice == WHOLE:
            self._mode = _BUFFER
            if self._size > self._limit:
                self._mode, self._chunks = _OVER, []
        elif choice == FEED:
            self._mode = _STREAM
            feed = self._feed = BodyFeed(self)
            for chunk in self._chunks:
                feed.put(chunk)
            self._chunks = []
            if self._complete:
                feed.end()
            self._call = None  # a task reads on through the feed
            call.streaming(self._status, self._headers, feed)
        else:
            self._mode, self._sink = _EVENTS, choice

    def _pump(self) -> None:
        """Hand the sink what the parser took from the body; once the body is
        whole the connection is free first (the sink may send the next
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

    def _parse(self, data: bytes | memoryview) -> bool:
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
        # Without a length or chunks a body ends when the connection does.
        cut = None if unframed else "the upstream closed the connection mid-body"
        if sink is not None and not self._complete:
            sink.end(cut)
            return
        if feed is not None and not self._complete:
            feed.end(cut)
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
        self._mode = _INFO if status < 200 else _HEADED  # 1xx: skipped, the answer follows

    def on_body(self, body: bytes) -> None:
        if self._trailing:
            return
        mode = self._mode
        if mode == _STREAM:
            assert self._feed is not None
            self._feed.put(body)
        elif mode in (_EVENTS, _HEADED):
            self._chunks.append(body)  # to the sink (or the choice) after this read's parse
            self._size += len(body)
        elif mode == _BUFFER:
            self._size += len(body)
            if self._size > self._limit:
                self._mode, self._chunks = _OVER, []
            else:
                self._chunks.append(body)
        elif mode == _OVER:
            self._size += len(body)

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
