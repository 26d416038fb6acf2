"""The requests of one upstream HTTP session, from the client's message to
what its answer came to: each a SentCall written at once and settled in its
connection's callbacks (http_sent_call), one path for all of them. A task
runs only a step that waits -- a connect, a tools/list refresh before the
one retry (2026-07-28 "Client Behavior"), the HTTP+SSE fallback (2025-11-25
"Backwards Compatibility"), a stream's resumption -- and sends the same
SentCall on. Every reply on an exchange is its own request's, and each
request gets one (issue #29)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import anyio
import orjson
import structlog

from gateway import wire
from gateway.backs import http_wire
from gateway.backs.http_client import MAX_REDIRECTS, OriginPool, Target, request_bytes
from gateway.backs.http_exchange import HttpExchange
from gateway.backs.http_failures import HttpClientError, describe
from gateway.backs.http_sent_call import SentCall
from gateway.backs.http_session import Deliver, HttpSession
from gateway.backs.http_stream import AnswerEvents, HttpRefusal, StreamReader
from gateway.log_limit import LogLimiter

log = structlog.get_logger("gateway.backs.http")
# A server answering calls under each other's ids: one line a minute.
foreign_log = LogLimiter(log)
# A server behind a redirect costs a round trip a call: one hint a minute.
redirect_log = LogLimiter(log)

Spawn = Callable[..., None]


@dataclass(slots=True)
class Inflight:
    method: str
    modern: bool
    # Ends the exchange (its connection, and a task's scope while one runs a step).
    cancel: Callable[[], None] = lambda: None


class HttpRequests:
    """`spawn(fn, *args)` runs a step in a task of the connection's; `push`
    queues a message for the runtime; `open_sse` falls back to HTTP+SSE;
    `ended` says why the connection is over, once it is."""

    def __init__(
        self,
        session: HttpSession,
        reader: StreamReader,
        exchange: HttpExchange,
        max_bytes: int,
        *,
        spawn: Callable[..., None],
        push: Callable[[wire.Message], None],
        open_sse: Callable[[], Coroutine[Any, Any, bool]],
        ended: Callable[[], str | None],
    ) -> None:
        self._session = session
        self._reader = reader
        self.exchange = exchange
        self._max_bytes = max_bytes
        self._spawn_task = spawn
        self._push_message = push
        self._open_sse = open_sse
        self._ended = ended
        self.inflight: dict[wire.RequestId, Inflight] = {}
        # Which request's response stream each queued notification came on,
        # by message identity (the connection hands them over per batch).
        self.origins: dict[int, wire.RequestId] = {}
        # Each URL the session POSTs to (the upstream's, an HTTP+SSE endpoint,
        # a redirect's target), parsed once, and its origin's connections.
        self._targets: dict[str, tuple[Target, OriginPool]] = {}

    @property
    def ended(self) -> str | None:
        return self._ended()

    def start(self, msg: wire.Message) -> None:
        """A client's request, on its way."""
        inflight = Inflight(msg["method"], self._session.is_stateless(msg))
        self.inflight[msg["id"]] = inflight
        call = SentCall(
            self, msg, self.deliver_for(msg), self._settled, self._session.tools_generation
        )
        inflight.cancel = call.abort
        self._send(call)

    def _send(self, call: SentCall, url: str | None = None) -> None:
        """Write `call` for `url` (the session's POST URL if None) now, or
        fail it with the reason it cannot be written."""
        session = self._session
        msg = call.msg
        body = orjson.dumps(msg)
        where = url or session.post_url
        try:
            aimed = self._targets.get(where)
            if aimed is None:
                target = Target.of(where)
                aimed = self._targets[where] = (target, session.client.pool(target))
            data = session.post_bytes(msg, body) if url is None else None
            if data is None:  # not the session's cached head: judged header by header
                data = request_bytes("POST", aimed[0], session.headers(msg), body)
        except HttpClientError as exc:
            call.failed(describe(exc))
            return
        # What headers() sends: a 404 then means our session is gone.
        sent_session = session.session_id is not None and session.sse_endpoint is None
        call.aim(where, data, aimed[1], sent_session)
        self.dispatch(call)

    def dispatch(self, call: SentCall) -> None:
        assert call.pool is not None
        connection = call.pool.take()
        if connection is None:
            self._spawn_task(self._connect, call)
        else:
            call.connection = connection
            connection.send(call.data, call, self._session.stream_timeout.write, self._max_bytes)

    async def _connect(self, call: SentCall) -> None:
        assert call.pool is not None
        try:
            connection = await call.pool.connect(self._session.stream_timeout.connect)
        except HttpClientError as exc:
            call.failed(describe(exc))
            return
        if call.aborted:
            call.pool.release(connection)
            return
        call.connection = connection
        connection.send(call.data, call, self._session.stream_timeout.write, self._max_bytes)

    def redirected(self, call: SentCall, url: str) -> None:
        """The server redirected a request's POST (http_wire's rule, checked
        by the client): written again, there."""
        call.hops += 1
        if call.hops > MAX_REDIRECTS:
            call.failed(f"more than {MAX_REDIRECTS} redirects")
            return
        redirect_log.info(
            "upstream redirects its POSTs; point [upstream] url at the target to save a round trip",
            url=self._session.url,
            target=url[:200],
        )
        self._send(call, url)

    def _settled(self, call: SentCall, refused: HttpRefusal | None) -> None:
        """What a client's request came to: done, or refused (the refusal
        delivered), or a turn that waits -- a tools/list refresh before the
        one retry it allows (2026-07-28 "Client Behavior"), the HTTP+SSE
        fallback (2025-11-25 "Backwards Compatibility") -- in a task."""
        msg = call.msg
        session = self._session
        if refused is not None and not call.refreshed:
            if http_wire.asks_header_refresh(msg, refused.reply):
                self._in_task(call, self._refresh_and_resend)
                return
            if session.sse_endpoint is None and http_wire.may_be_http_sse(
                msg, refused.status, refused.reply
            ):
                self._in_task(call, self._fallback, refused)
                return
        if refused is not None:
            self._refused(msg, refused)
        if session.sse_endpoint is None:  # HTTP+SSE: the reply comes on the stream
            self.inflight.pop(msg["id"], None)

    async def _refresh_and_resend(self, call: SentCall) -> None:
        await self._session.refresh_tools(call.msg, call.generation, self.request)
        call.refreshed = True
        self._send(call)  # with the headers the tools now call for

    async def _fallback(self, call: SentCall, refused: HttpRefusal) -> None:
        call.refreshed = True  # one turn a request
        if await self._open_sse():
            self._send(call)
        else:
            self._settled(call, refused)

    async def request(self, msg: wire.Message, deliver: Deliver) -> HttpRefusal | None:
        """A request of the gateway's own, awaited: a future over a SentCall."""
        done = anyio.Event()
        outcome: list[HttpRefusal | None] = []

        def settled(call: SentCall, refused: HttpRefusal | None) -> None:
            outcome.append(refused)
            done.set()

        call = SentCall(self, msg, deliver, settled, self._session.tools_generation)
        self._send(call)
        try:
            await done.wait()  # bounded by the caller's scope
        finally:
            if not done.is_set():
                call.abort()
        return outcome[0]

    def _refused(self, msg: wire.Message, refused: HttpRefusal) -> None:
        """What a request's exchange came to instead of a reply, unless it was
        answered already (a reply under another id stood in for its own)."""
        if msg["id"] in self.inflight:
            self.deliver_for(msg)(refused.reply)

    def answer_events(self, call: SentCall, headers: dict[str, str]) -> AnswerEvents | None:
        """A request's event-stream answer, read in the connection's
        callbacks; None on the old HTTP+SSE transport (its replies come on
        the session's one stream)."""
        session = self._session
        if session.sse_endpoint is not None:
            return None
        msg = call.msg
        session.take_session(msg, headers.get("mcp-session-id"))
        return self._reader.answer_events(
            msg["id"],
            call.deliver,
            lambda refused: call.settled(call, refused),
            lambda first: self._in_task(call, self._resumed, first),
        )

    async def _resumed(
        self, call: SentCall, first: Callable[[], Awaitable[HttpRefusal | None]]
    ) -> None:
        call.settled(call, await first())

    def _in_task(self, call: SentCall, step: Callable[..., Awaitable[None]], *args: Any) -> None:
        """A step of `call` that waits, in a task of the connection's."""
        self._spawn_task(self._step, call, step, *args)

    async def _step(self, call: SentCall, step: Callable[..., Awaitable[None]], *args: Any) -> None:
        # The scope is made here, in the task: the callbacks run outside any.
        call.scope = scope = anyio.CancelScope()
        if call.aborted:
            scope.cancel()
        msg_id = call.msg["id"]
        try:
            with scope:
                await step(call, *args)
        except Exception as exc:
            if msg_id in self.inflight:  # the caller still waits: answer it
                call.deliver(http_wire.failure_reply(msg_id, describe(exc)))
            raise
        finally:
            call.scope = None

    def direct_failed(self, call: SentCall, exc: Exception) -> None:
        """A bug or an odd input met in a call's callbacks: as _guarded says."""
        log.error(
            "upstream http task failed",
            task="_direct_call",
            url=self._session.url,
            error=describe(exc),
        )
        if call.msg["id"] in self.inflight:  # the caller still waits: answer it
            call.deliver(http_wire.failure_reply(call.msg["id"], describe(exc)))

    def deliver_for(self, request: wire.Message) -> Deliver:
        """How messages on a request's response reach the queue: the reply to
        it is looked at first (initialize, tools/list), the rest goes as is."""
        msg_id = request["id"]

        def deliver(msg: wire.Message) -> None:
            if "method" not in msg and msg.get("id") != msg_id:
                # A reply belongs to the exchange it came on (issue #29): one
                # under another call's id (another principal's, perhaps) must
                # never reach that call. This exchange's own call fails.
                foreign_log.warning(
                    "upstream answered another call's id on this exchange",
                    url=self._session.url,
                    expected=msg_id,
                    got=str(msg.get("id"))[:64],
                )
                msg = wire.gateway_error(
                    msg_id,
                    wire.INTERNAL_ERROR,
                    "Upstream server failed: it answered this request with another request's id",
                    reason="upstream-failed",
                )
            if "method" not in msg:
                if self.inflight.pop(msg_id, None) is None:
                    # Answered already (the server sent a second reply, or a
                    # reply under another id stood in for it), or cancelled:
                    # one reply a request.
                    foreign_log.warning(
                        "upstream replied to a request already answered or given up; dropped",
                        url=self._session.url,
                        id=str(msg_id)[:64],
                    )
                    return
                self._session.observe_reply(request, msg)
            elif "id" not in msg:
                self.origins[id(msg)] = msg_id
            self._push_message(msg)

        return deliver
