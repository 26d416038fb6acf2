"""A request of the HTTP back sent without a task (http_connection's
callbacks): what its connection reports — answered whole, answering with a
stream, redirected, failed, to be sent again — goes to the
HttpServerConnection that sent it (the owner), which settles it the way its
tasks settle any other."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio

from gateway import wire
from gateway.backs import http_wire
from gateway.backs.http_body_feed import BodyFeed
from gateway.backs.http_client import Response
from gateway.backs.http_connection import (
    FEED,
    WHOLE,
    BodyChoice,
    EventSink,
    HttpConnection,
)
from gateway.backs.http_exchange import HttpExchange
from gateway.backs.http_session import Deliver
from gateway.backs.http_stream import HttpRefusal


class CallOwner(Protocol):
    """The connection a SentCall reports to (http_back.HttpServerConnection)."""

    exchange: HttpExchange

    def answer_events(self, call: SentCall, headers: dict[str, str]) -> EventSink | None: ...

    @property
    def ended(self) -> str | None: ...

    def deliver_for(self, request: wire.Message) -> Deliver: ...

    def direct_settled(self, call: SentCall, refused: HttpRefusal | None) -> None: ...

    def direct_failed(self, call: SentCall, exc: Exception) -> None: ...

    def continue_in_task(
        self, call: SentCall, first: Callable[[], Awaitable[HttpRefusal | None]]
    ) -> None: ...

    def dispatch(self, call: SentCall) -> None: ...

    def redirected(self, call: SentCall, url: str) -> None: ...


async def known(refused: HttpRefusal | None) -> HttpRefusal | None:
    """An outcome already settled, as continue_in_task takes one to wait for."""
    return refused


class SentCall:
    """A request sent without a task: what its connection reports
    (http_connection.Exchange) goes to the connection that sent it."""

    __slots__ = (
        "_owner",
        "aborted",
        "connection",
        "data",
        "generation",
        "hop",
        "msg",
        "scope",
        "sent_session",
        "streamed",
    )

    def __init__(
        self,
        owner: CallOwner,
        msg: wire.Message,
        data: bytes,
        generation: int,
        sent_session: bool,
    ) -> None:
        self._owner = owner
        self.msg = msg
        self.data = data
        self.generation = generation
        self.sent_session = sent_session
        self.connection: HttpConnection | None = None
        self.hop: http_wire.Redirect | None = None  # what the answer's redirect leads to
        self.aborted = False
        self.scope: anyio.CancelScope | None = None  # once a task has taken it on
        self.streamed: Callable[[], None] | None = None  # ends its event stream's reading

    def abort(self) -> None:
        """Cancelled (or the session is over): the exchange ends here."""
        self.aborted = True
        if self.connection is not None:
            self.connection.drop(self)
        if self.scope is not None:
            self.scope.cancel()
        if self.streamed is not None:
            self.streamed()

    def _live(self) -> bool:
        return not self.aborted and self._owner.ended is None

    def body_for(self, status: int, headers: dict[str, str]) -> EventSink | BodyChoice:
        if not self._live():
            return WHOLE
        owner = self._owner
        hop = owner.exchange.redirect(self.msg, status, headers)
        if hop is not None:
            self.hop = hop  # its body is read whole and dropped, then it is sent there
            return WHOLE
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if not (200 <= status < 300 and ctype == "text/event-stream"):
            return WHOLE
        guarded = _Guarded(self)
        try:
            sink = owner.answer_events(self, headers)
        # As in answered: the call gets a gateway error, the stream is read
        # to its end and dropped, and nothing reaches the event loop.
        except Exception as exc:
            guarded.fail(exc)
            return guarded
        if sink is None:
            return FEED
        guarded.sink = sink
        return guarded

    def answered(self, status: int, headers: dict[str, str], body: bytes | None, size: int) -> None:
        if not self._live():
            return
        owner = self._owner
        if self.hop is not None:
            if self.hop.url is None:
                self.failed(self.hop.refused or "redirect refused")
            else:
                owner.redirected(self, self.hop.url)
            return
        try:
            deliver = owner.deliver_for(self.msg)
            refused = owner.exchange.settle(
                self.msg, status, headers, body, size, self.sent_session, deliver
            )
            owner.direct_settled(self, refused)
        # Any failure: as a task's in _guarded (the caller gets a gateway error).
        except Exception as exc:
            owner.direct_failed(self, exc)

    def streaming(self, status: int, headers: dict[str, str], feed: BodyFeed) -> None:
        if not self._live():
            feed.close()
            return
        owner = self._owner
        deliver = owner.deliver_for(self.msg)
        self.streamed = feed.close  # an abort before the task starts closes it too
        response = Response(status, headers, feed.chunks())

        async def first() -> HttpRefusal | None:
            try:
                return await owner.exchange.answer(self.msg, response, self.sent_session, deliver)
            finally:
                feed.close()

        owner.continue_in_task(self, first)

    def failed(self, why: str) -> None:
        if not self._live():
            return
        try:
            refused = HttpRefusal(http_wire.failure_reply(self.msg["id"], why), None)
            self._owner.direct_settled(self, refused)
        # As in answered: a callback must not raise into the event loop.
        except Exception as exc:
            self._owner.direct_failed(self, exc)

    def retry(self) -> None:
        if self._live():
            self.connection = None
            self._owner.dispatch(self)


class _Guarded:
    """A call's event sink as its connection's callbacks call it: a failure
    in it answers the call as `answered` does, and never reaches the loop."""

    __slots__ = ("_call", "_failed", "sink")

    def __init__(self, call: SentCall) -> None:
        self._call = call
        self.sink: EventSink | None = None
        self._failed = False

    def feed(self, chunk: bytes) -> bool:
        if self._failed or self.sink is None or not self._call._live():
            return True
        try:
            return self.sink.feed(chunk)
        except Exception as exc:
            self.fail(exc)
            return True

    def end(self, error: str | None) -> None:
        if self._failed or self.sink is None or not self._call._live():
            return
        try:
            self.sink.end(error)
        except Exception as exc:
            self.fail(exc)

    def fail(self, exc: Exception) -> None:
        self._failed = True
        self._call._owner.direct_failed(self._call, exc)
