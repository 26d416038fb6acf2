"""Each HTTP connection's side of the front's limits, enforced in uvicorn's
httptools protocol before anything reaches the ASGI app: head size (431),
slow heads and slow bodies (408), idle connections (closed), and the 503 of
a connection over the cap or evicted to make room (connection_guard.py
decides which).

This leans on uvicorn's HttpToolsProtocol internals (its parser callbacks,
`cycle`, `pipeline`, `on_response_complete`); pyproject pins uvicorn to the versions
tests/test_http_limits.py was run against, and that test checks the hooks
still exist.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httptools
import orjson
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from gateway import wire
from gateway.fronts.asgi import CLIENT_GONE, ClientGone, client_gone
from gateway.fronts.connection_guard import (
    BODY,
    HEAD,
    IDLE,
    NEVER,
    REFUSALS,
    SERVING,
    ConnectionGuard,
)
from gateway.fronts.direct_answer import CycleAnswer
from gateway.fronts.direct_posts import TEXT_HEADERS, DirectPosts
from gateway.fronts.one_write_answers import OneWriteTransport


def protocol_class(
    guard: ConnectionGuard, direct: DirectPosts | None = None
) -> type[LimitedHttpToolsProtocol]:
    """A protocol class for uvicorn's `Config(http=...)`, bound to one guard
    and the front's direct answers."""

    class Bound(LimitedHttpToolsProtocol):
        pass

    Bound.guard = guard
    Bound.direct = direct
    return Bound


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    guard: ConnectionGuard
    direct: DirectPosts | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = self.guard.limits
        self.deadline = NEVER  # loop time; the guard's sweep calls expire() after it
        self.phase = IDLE
        self._in_head = False
        self._done = False  # refused or evicted: nothing more is read
        # Sizes of the current head, counted per chunk (not per header, to
        # keep a request cheap): an upper bound (every chunk since the one
        # it began in, whole) and a lower bound (chunks wholly inside it).
        self._head_upper = 0
        self._head_lower = 0
        self._chunk = 0  # the size of the chunk being parsed
        self._begun = 0  # requests begun on this connection
        # The request being answered (self.cycle is the last one parsed,
        # which may be pipelined behind it), and one offered to `direct`
        # once its body is in.
        self._answering: RequestResponseCycle | None = None
        self._offered: tuple[RequestResponseCycle, Any] | None = None
        self._completing = False  # in on_response_complete

    def _set_deadline(self, phase: str, seconds: float) -> None:
        self.phase = phase
        self.deadline = self.loop.time() + seconds

    # -- lifecycle -----------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self.guard.admit(self):
            self._refuse(
                503,
                "too-many-connections",
                "Service Unavailable: too many connections",
            )
            return
        # Idle from the start: a connection that never sends a byte is closed too.
        self._set_deadline(IDLE, self.limits.idle_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.forget(self)
        self.deadline = NEVER
        super().connection_lost(exc)
        self._client_gone()

    def _client_gone(self) -> None:
        """Tell the request being answered that its client left (pipelined
        ones never start)."""
        for cycle in (self._answering, self.cycle):
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True
                gone = client_gone(cycle.scope)  # type: ignore[arg-type]
                if gone is not None:
                    gone.fire()

    # -- direct answers (fronts/direct_posts.py) --------------------------------
    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        self._answering = cycle
        direct = self.direct
        if (
            direct is not None
            and app is self.app
            and not cycle.waiting_for_100_continue
            and direct.offered(cycle.scope)  # type: ignore[arg-type]
        ):
            if cycle.more_body:
                if _declared_length(cycle) <= HIGH_WATER_LIMIT:  # else uvicorn pauses reading
                    self._offered = (cycle, app)  # offered once its body is in
                    return
            elif self._completing:
                # A pipelined request, started from the end of the answer
                # before it (maybe inside an upstream reply's callback): later.
                self.loop.call_soon(self._offer, cycle, app)
                return
            elif self._offer_now(cycle):
                return
        super()._start_asgi_task(cycle, app)

    def _offer(self, cycle: RequestResponseCycle, app: Any) -> None:
        if not self._offer_now(cycle):
            super()._start_asgi_task(cycle, app)

    def _offer_now(self, cycle: RequestResponseCycle) -> bool:
        gone = client_gone(cycle.scope)  # type: ignore[arg-type]
        if cycle.disconnected or gone is None or self.direct is None:
            return False
        answer = CycleAnswer(cycle, self.transport, gone, super()._start_asgi_task)
        try:
            return self.direct.take(cycle.scope, bytes(cycle.body), answer)  # type: ignore[arg-type]
        # A defect: the client gets a 500 and the connection goes on, as
        # uvicorn does after an app's exception.
        except Exception as exc:
            self.direct.failed(exc)
            answer.respond(500, TEXT_HEADERS, b"Internal Server Error")
            return True

    def _abort(self) -> None:
        """The app gives up on its response (ClientGone.abort): the request
        counts as left by its client, so the app may return unfinished."""
        self._client_gone()
        self.transport.abort()

    def serving(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def drop(self, why: str) -> None:
        self._done = True
        self.deadline = NEVER
        self.guard.refusals.note(why)
        self.transport.close()

    def evictable(self) -> bool:
        if self.phase == IDLE:
            return True
        if self.phase == HEAD:  # unless pipelined behind a call still running
            return not self.serving()
        # Its body still coming, unless queued behind a call still running.
        return self.phase == BODY and not self.pipeline

    def evict(self) -> None:
        message = "Service Unavailable: too many connections; this one was not sending fast enough"
        if self.phase == BODY:
            self.refuse_body(503, "evicted", message)
        elif self.phase == HEAD:
            self._refuse(503, "evicted", message)
        else:
            self.drop(REFUSALS["evicted"])

    def expire(self) -> None:
        self.deadline = NEVER
        if self.phase == IDLE:
            self.guard.forget(self)
            if not self.transport.is_closing():
                self.transport.close()
        elif self.phase == HEAD:
            self._head_timed_out()
        elif self.phase == BODY:
            self._body_timed_out()

    # -- input ---------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        # Unlike uvicorn, bytes alone do not make a connection active (a
        # client sending a CRLF now and then would hold it): a request
        # beginning does (on_message_begin).
        if self._done:
            return
        whole_chunk_in_head, begun = self._in_head, self._begun
        self._chunk = len(data)
        if whole_chunk_in_head:
            self._head_upper += self._chunk
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # Served as plain HTTP/1.1 (e.g. curl's "Upgrade: h2c"), as
            # uvicorn does, minus its warning per request.
            return
        except httptools.HttpParserError:
            if not self._done:
                self._refuse(400, "bad-http", "Bad Request: invalid HTTP request")
            return
        if self._in_head and whole_chunk_in_head and begun == self._begun:
            # Still the same head, still incomplete: httptools buffers its
            # headers until each is complete, so refuse at the limit rather
            # than after the whole of it.
            self._head_lower += self._chunk
            if self._head_lower > self.limits.max_header_bytes:
                self._refuse_head()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        gone = ClientGone(self.loop)
        gone.abort = self._abort
        extensions: dict[str, Any] = {CLIENT_GONE: gone}
        self.scope["extensions"] = extensions
        self.guard.touch(self)
        self._begun += 1
        self._in_head = True
        self._head_upper = self._chunk
        self._head_lower = 0
        self._set_deadline(HEAD, self.limits.header_timeout)

    def on_headers_complete(self) -> None:
        self._in_head = False
        if self._head_upper > self.limits.max_header_bytes and self._head_size() > (
            self.limits.max_header_bytes
        ):
            self._refuse_head()
            raise _Refused  # stop parsing: nothing of this request runs
        self._set_deadline(BODY, self.limits.body_timeout)
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and self.guard.draining:
            cycle.keep_alive = False
        if cycle is not None and cycle.transport is self.transport:  # not an upgrade
            # Its task has not run yet: every answer's head and body in one write.
            cycle.transport = OneWriteTransport(self.transport, self.loop)  # type: ignore[assignment]

    def _head_size(self) -> int:
        """The head's bytes: request line, header lines, blank line (less any
        extra whitespace around header values)."""
        line = len(self.parser.get_method()) + len(self.url) + len(b"  HTTP/1.1\r\n")
        return line + sum(len(n) + len(v) + 4 for n, v in self.headers) + 2

    def on_message_complete(self) -> None:
        if self.cycle is not None and self.cycle.response_complete and not self.pipeline:
            # Answered before its body ended (e.g. 401): idle from now.
            self._set_deadline(IDLE, self.limits.idle_timeout)
        else:
            self.phase, self.deadline = SERVING, NEVER
        super().on_message_complete()
        offered = self._offered
        if offered is not None and offered[0] is self.cycle and not offered[0].more_body:
            self._offered = None
            self._offer(*offered)

    def on_response_complete(self) -> None:
        # uvicorn's, with the idle deadline instead of a keep-alive timer.
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._completing = True
            try:
                self._start_asgi_task(cycle, app)
            finally:
                self._completing = False
        elif self.phase == SERVING:
            self._set_deadline(IDLE, self.limits.idle_timeout)

    # -- refusals ------------------------------------------------------------
    def _refuse_head(self) -> None:
        self._refuse(
            431,
            "header-too-large",
            f"Request Header Fields Too Large: the limit is {self.limits.max_header_bytes} bytes",
        )

    def _head_timed_out(self) -> None:
        if self.serving():
            # A pipelined head, behind a request still being answered: its
            # time starts once that answer is out.
            self._set_deadline(HEAD, self.limits.header_timeout)
            return
        if self._in_head:
            self._refuse(408, "header-timeout", "Request Timeout: the head came too slowly")

    def _body_timed_out(self) -> None:
        self.refuse_body(408, "body-timeout", "Request Timeout: the body came too slowly")

    def refuse_body(self, status: int, reason: str, message: str) -> None:
        cycle = self.cycle
        if cycle is not None and not cycle.response_started and not self.pipeline:
            # The app is waiting in receive(): it sees a disconnect, and its
            # answer goes nowhere (send is a no-op once disconnected).
            cycle.disconnected = True
            cycle.message_event.set()
            self._client_gone()
            self._refuse(status, reason, message, body_phase=True)
        else:
            # Answered already (e.g. 401 before the body), or queued behind
            # another request's answer: only closing is left.
            self.drop(REFUSALS[reason])

    def _refuse(self, status: int, reason: str, message: str, body_phase: bool = False) -> None:
        if self._done:
            return
        cycle = self.cycle
        # A pipelined request's refusal would be read as the answer to the
        # one before it, unless that one is answered: else only close.
        if cycle is None or cycle.response_complete or body_phase:
            code = wire.INTERNAL_ERROR if status >= 500 else wire.INVALID_REQUEST
            body = orjson.dumps(wire.gateway_error(None, code, message, reason=reason))
            head = [
                STATUS_LINE[status],
                b"content-type: application/json\r\n",
                b"content-length: %d\r\n" % len(body),
                b"connection: close\r\n\r\n",
            ]
            self.transport.write(b"".join(head) + body)
        self.guard.on_refusal(status)
        self.drop(REFUSALS[reason])


class _Refused(Exception):
    """Raised from a parser callback to stop parsing a refused request."""


def _declared_length(cycle: RequestResponseCycle) -> int:
    """The request's Content-Length (uvicorn's parser checked it); a chunked
    body counts as endless."""
    for name, value in cycle.scope["headers"]:
        if name == b"content-length":
            return int(value)
    return HIGH_WATER_LIMIT + 1
