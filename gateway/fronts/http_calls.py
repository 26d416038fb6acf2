"""Running one client call on the HTTP front and answering it: for a
2025-11-25 session on a resumable SSE stream (legacy_streams); else as JSON
when the reply is all there is, as an SSE stream when something comes
first, and closing the stream cancels. Every wait is cut at the end of the
shutdown grace, when the client gets a gateway error instead."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable

import anyio
import orjson
from anyio.abc import TaskGroup

from gateway import wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.core import http_binding
from gateway.fronts.asgi import ClientGone, Receive, Send, watch_disconnect
from gateway.fronts.http_access import HttpAccess
from gateway.fronts.http_answers import (
    Answer,
    answer_request,
    is_reply_to,
    needs_affinity,
    respond,
)
from gateway.fronts.http_output import HttpOutput, Inbox, Out
from gateway.fronts.legacy_session import LegacySession
from gateway.fronts.legacy_streams import LegacyStreams, WholeAnswer
from gateway.fronts.metrics import Metrics
from gateway.fronts.port import GatewayPort
from gateway.loop_clock import LazyClock

ExtraHeaders = Callable[[wire.Message], list[tuple[bytes, bytes]]]
JSON_HEADERS = ((b"content-type", b"application/json"),)


class HttpCall:
    """One client call on the HTTP front, from open() to close()."""

    __slots__ = (
        "extra_headers",
        "gone",
        "inbox",
        "link",
        "modern",
        "msg",
        "output",
        "session",
        "since",
        "started",
    )

    def __init__(
        self,
        link: ClientLink,
        output: HttpOutput,
        msg: wire.Message,
        inbox: Inbox,
        modern: bool,
        extra_headers: ExtraHeaders | None,
        session: LegacySession | None,
        gone: ClientGone | None,
    ) -> None:
        self.link = link
        self.output = output
        self.msg = msg
        self.inbox = inbox
        self.modern = modern
        self.extra_headers = extra_headers
        self.session = session
        self.gone = gone
        self.started = 0.0  # perf_counter, for the latency metric
        self.since = 0.0  # the loop's clock, for the poll and priming times


class HttpCalls:
    def __init__(
        self,
        service: GatewayPort,
        metrics: Metrics,
        access: HttpAccess,
        tools: http_binding.ToolHeaderCache,
    ) -> None:
        self.service = service
        self.metrics = metrics
        self.access = access
        self.tools = tools  # learnt from the replies to tools/list that pass by
        self.tg: TaskGroup | None = None  # the server's, where the service runs each call
        config = service.config
        self._forward_authorization = config.http_forward_authorization
        # The wait of each call in progress: cut at the end of the shutdown grace.
        self._waits: set[anyio.CancelScope] = set()
        # Responses waiting for their first message without a scope (Inbox.first).
        self._firsts: set[Inbox] = set()
        self._cut_off = False
        self.clock = LazyClock()
        # Held MRTR calls live on this replica: a client that keeps cookies
        # brings this one back with its retry, and a balancer that routes on
        # it (deploy/haproxy) sends the retry here (issue #13).
        self.affinity = affinity_header(config, service.replica)
        self.streams = LegacyStreams(
            retry=config.http_sse_retry,
            poll_after=config.http_sse_poll_after,
            window=config.http_sse_resume_window,
            waits=self._waits,
            firsts=self._firsts,
            cut_off=lambda: self._cut_off,
            clock=self.clock,
        )

    async def run(
        self,
        link: ClientLink,
        output: HttpOutput,
        msg: wire.Message,
        receive: Receive,
        send: Send,
        *,
        modern: bool,
        extra_headers: ExtraHeaders | None = None,
        session: LegacySession | None = None,
        gone: ClientGone | None = None,
    ) -> None:
        """Run one request and answer it, counted against its principal's
        requests in progress. `gone`: the server's word when the client
        leaves, if it gives one."""
        call = self.open(link, output, msg, modern, extra_headers, session, gone)
        try:
            assert self.tg is not None
            await self.service.handle_client_message(link, msg, self.tg, checked=True)
            await self.answer(call, receive, send)
        finally:
            self.close(call)

    def open(
        self,
        link: ClientLink,
        output: HttpOutput,
        msg: wire.Message,
        modern: bool,
        extra_headers: ExtraHeaders | None,
        session: LegacySession | None,
        gone: ClientGone | None,
    ) -> HttpCall:
        """A call begins: counted (429 past the principal's limit), its inbox
        open. close() ends it, every way out."""
        self.access.begin(link.principal, msg["id"])
        try:
            inbox = output.open(msg)
        except BaseException:  # released on every way out, then raised on
            self.access.end(link.principal)
            raise
        call = HttpCall(link, output, msg, inbox, modern, extra_headers, session, gone)
        call.started = time.perf_counter()
        call.since = self.clock()
        return call

    def close(self, call: HttpCall) -> None:
        call.output.close(call.msg["id"])
        call.inbox.discard()  # the answer is over: what it did not write goes
        self.access.end(call.link.principal)

    async def answer(self, call: HttpCall, receive: Receive, send: Send) -> None:
        """Answer a call sent upstream, from its inbox: whatever came already
        and whatever comes until its reply (or the client leaves, or the
        shutdown grace ends)."""
        link, msg, stream, gone = call.link, call.msg, call.inbox, call.gone
        msg_id = msg["id"]
        session = call.session
        if session is not None and session.resumable:
            last = await self._answer_resumable(call, receive, send)
            if last is not None:
                self.observe(call, last)
            return
        answer = Answer()
        first: Out | None = None
        if not self._cut_off:
            self._firsts.add(stream)
            try:
                with contextlib.suppress(anyio.EndOfStream):  # answered 404 below
                    first = await stream.first(math.inf, gone)
            finally:
                self._firsts.discard(stream)

        async def answer_it() -> wire.Message | None:
            return await answer_request(
                stream,
                send,
                msg_id,
                call.modern,
                call.extra_headers,
                answer,
                forward_authorization=self._forward_authorization,
                affinity=self.affinity if call.modern else None,
                first=first,
            )

        # None when the client went away first (the watcher cancelled) or
        # the session ended under the request: both cancel it upstream.
        reply: wire.Message | None = None
        if first is not None and is_reply_to(first.msg, msg_id):
            # Most calls: the reply is all there is, and no task watches the client.
            reply = await answer_it()
        elif gone is None or not gone.gone:  # else nobody is left to answer
            async with anyio.create_task_group() as tg:
                # The end of the shutdown grace cancels the wait too (not a
                # scope of its own: it would cost the call more).
                self._waits.add(tg.cancel_scope)
                try:
                    if self._cut_off:
                        tg.cancel_scope.cancel()
                    tg.start_soon(watch_disconnect, receive, tg.cancel_scope)
                    reply = await answer_it()
                    tg.cancel_scope.cancel()
                finally:
                    self._waits.discard(tg.cancel_scope)
        if self._cut_off and answer.state in ("none", "sse"):
            # The shutdown grace is over: the client gets a gateway error
            # (as its last SSE event if a stream is open), the upstream a
            # cancellation.
            reply = wire.gateway_error(
                msg_id, wire.INTERNAL_ERROR, "The gateway is shutting down", reason="shutdown"
            )
            await answer.finish(send, reply)
            self.service.cancel_request(link, msg_id)
        elif reply is None:
            self.service.cancel_request(link, msg_id)
        if reply is not None:
            self.observe(call, reply)

    def whole_answer(self, call: HttpCall, reply: wire.Message) -> WholeAnswer | None:
        """The answer to a call whose reply came first, whole: the status,
        headers and body the slow path would write, for the front's own
        server to write at once. None when it carries a header from
        upstream (an authorization challenge): the slow path checks those."""
        session = call.session
        if session is not None and session.resumable:
            return self.streams.whole_answer(session.streams, reply)
        if call.extra_headers is not None or (
            self._forward_authorization and http_binding.auth_refusal(reply) is not None
        ):
            return None
        status = http_binding.status_for(reply) if call.modern else 200
        headers: tuple[tuple[bytes, bytes], ...] = JSON_HEADERS
        if self.affinity is not None and needs_affinity(reply.get("result")):
            headers = (*JSON_HEADERS, self.affinity)
        return WholeAnswer(status, headers, orjson.dumps(reply))

    @property
    def cut_off_now(self) -> bool:
        return self._cut_off

    async def _answer_resumable(
        self, call: HttpCall, receive: Receive, send: Send
    ) -> wire.Message | None:
        assert call.session is not None
        link, msg_id = call.link, call.msg["id"]
        outcome = await self.streams.answer(
            call.session.streams, call.inbox, msg_id, receive, send, call.gone, call.since
        )
        if outcome is None:  # the session ended before anything came
            await respond(
                send, 404, wire.error_response(msg_id, wire.INVALID_REQUEST, "Session ended")
            )
            self.service.cancel_request(link, msg_id)
            return None
        if outcome.cancel_upstream:
            self.service.cancel_request(link, msg_id)
        return outcome.reply

    def observe(self, call: HttpCall, reply: wire.Message) -> None:
        link = call.link
        self.tools.observe(reply)
        self.metrics.observe_request(
            call.msg["method"],
            link,
            reply,
            time.perf_counter() - call.started,
            self.service.path_for(link.session is not None),
        )

    def cut_off(self) -> None:
        """The shutdown grace is over: every call still waiting is answered
        with an error now, before the server gives up on its connections."""
        self._cut_off = True
        for wait in list(self._waits):
            wait.cancel()
        for inbox in list(self._firsts):
            inbox.interrupt()


def affinity_header(config: Config, replica: str) -> tuple[bytes, bytes] | None:
    """The Set-Cookie that names this replica (None: `[http] affinity_cookie`
    is empty). It lasts as long as a held call waits for its retry, or a
    task of the gateway's own lives."""
    name = config.http_affinity_cookie
    if not name:
        return None
    tasks = config.tasks_ttl if config.tasks_for_modern_clients else 0
    age = math.ceil(max(config.state_ttl, tasks))
    cookie = f"{name}={replica}; Path=/; Max-Age={age}; HttpOnly; SameSite=Lax"
    return (b"set-cookie", cookie.encode("latin-1"))
