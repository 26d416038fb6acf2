"""One request of the HTTP back, written at once on a keep-alive connection
and answered in that connection's callbacks (http_connection.Exchange):
every request takes this one path. What its answer comes to -- its messages
to `deliver`, then nothing (a reply came) or the refusal its caller gets
instead -- goes to `settled`; a redirect, a retry after a stale connection
or a connect goes back to the HttpServerConnection that sent it (the owner),
which starts a task only for a step that waits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import anyio

from gateway import wire
from gateway.backs import http_wire
from gateway.backs.http_body_feed import BodyFeed
from gateway.backs.http_client import OriginPool
from gateway.backs.http_connection import WHOLE, BodyChoice, EventSink, HttpConnection
from gateway.backs.http_exchange import HttpExchange
from gateway.backs.http_session import Deliver
from gateway.backs.http_stream import HttpRefusal

Settled = Callable[["SentCall", HttpRefusal | None], None]


class CallOwner(Protocol):
    """The connection a SentCall reports to (http_back.HttpServerConnection)."""

    exchange: HttpExchange

    @property
    def ended(self) -> str | None: ...

    def answer_events(self, call: SentCall, headers: dict[str, str]) -> EventSink | None: ...

    def redirected(self, call: SentCall, url: str) -> None: ...

    def dispatch(self, call: SentCall) -> None: ...

    def direct_failed(self, call: SentCall, exc: Exception) -> None: ...


class SentCall:
    """A request and where it stands: its bytes and origin (`aim`), the
    connection carrying it, a redirect its answer asked for."""

    __slots__ = (
        "_owner",
        "aborted",
        "connection",
        "data",
        "deliver",
        "generation",
        "hop",
        "hops",
        "msg",
        "pool",
        "refreshed",
        "scope",
        "sent_session",
        "settled",
        "streamed",
        "url",
    )

    def __init__(
        self,
        owner: CallOwner,
        msg: wire.Message,
        deliver: Deliver,
        settled: Settled,
        generation: int,
    ) -> None:
        self._owner = owner
        self.msg = msg
        self.deliver = deliver
        self.settled = settled
        self.generation = generation  # the tools' headers it was first sent under
        self.data = b""
        self.url = ""  # where it is written to (a redirect's next hop resolves against it)
        self.pool: OriginPool | None = None
        self.sent_session = False
        self.connection: HttpConnection | None = None
        self.aborted = False
        self.hop: http_wire.Redirect | None = None  # what the answer's redirect leads to
        self.hops = 0
        self.refreshed = False  # sent again after a tools/list refresh (once at most)
        self.scope: anyio.CancelScope | None = None  # while a task takes a step of it
        self.streamed: Callable[[], None] | None = None

    def aim(self, url: str, data: bytes, pool: OriginPool, sent_session: bool) -> None:
        """What to write, where, next (the first time, after a redirect, a
        refresh or a fallback)."""
        self.url, self.data, self.pool, self.sent_session = url, data, pool, sent_session
        self.connection, self.hop = None, None

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

    # -- http_connection.Exchange -------------------------------------------------------
    def body_for(self, status: int, headers: dict[str, str]) -> EventSink | BodyChoice:
        if not self._live():
            return WHOLE
        hop = self._owner.exchange.redirect(self.url, status, headers)
        if hop is not None:
            self.hop = hop  # its body is read whole and dropped, then it is sent there
            return WHOLE
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if not (200 <= status < 300 and ctype == "text/event-stream"):
            return WHOLE
        guarded = _Guarded(self)
        try:
            sink = self._owner.answer_events(self, headers)
        # As in answered: the call gets a gateway error, the stream is read
        # to its end and dropped, and nothing reaches the event loop.
        except Exception as exc:
            guarded.fail(exc)
            return guarded
        if sink is None:
            return WHOLE  # HTTP+SSE: the reply comes on the other stream
        guarded.sink = sink
        return guarded

    def answered(self, status: int, headers: dict[str, str], body: bytes | None, size: int) -> None:
        if not self._live():
            return
        if self.hop is not None:
            if self.hop.url is None:
                self.failed(self.hop.refused or "redirect refused")
            else:
                self._owner.redirected(self, self.hop.url)
            return
        try:
            refused = self._owner.exchange.settle(
                self.msg, status, headers, body, size, self.sent_session, self.deliver
            )
            self.settled(self, refused)
        # Any failure: as a task's in _guarded (the caller gets a gateway error).
        except Exception as exc:
            self._owner.direct_failed(self, exc)

    def streaming(self, status: int, headers: dict[str, str], feed: BodyFeed) -> None:
        feed.close()  # never chosen by body_for: were it, the call still ends
        self.failed("the answer's body was not read")

    def failed(self, why: str) -> None:
        if not self._live():
            return
        try:
            self.settled(self, HttpRefusal(http_wire.failure_reply(self.msg["id"], why), None))
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
