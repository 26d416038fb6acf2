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
from anyio.abc import TaskGroup

from gateway import wire
from gateway.client_link import ClientLink
from gateway.core import http_binding
from gateway.fronts.asgi import ClientGone, Receive, Send, watch_disconnect
from gateway.fronts.http_access import HttpAccess
from gateway.fronts.http_answers import Answer, answer_request, is_reply_to, respond
from gateway.fronts.http_output import HttpOutput, Inbox
from gateway.fronts.legacy_session import LegacySession
from gateway.fronts.legacy_streams import LegacyStreams
from gateway.fronts.metrics import Metrics
from gateway.fronts.port import GatewayPort

ExtraHeaders = Callable[[wire.Message], list[tuple[bytes, bytes]]]


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
        self.streams = LegacyStreams(
            retry=config.http_sse_retry,
            poll_after=config.http_sse_poll_after,
            window=config.http_sse_resume_window,
            waits=self._waits,
            firsts=self._firsts,
            cut_off=lambda: self._cut_off,
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
        self.access.begin(link.principal, msg["id"])
        try:
            await self._run(link, output, msg, receive, send, modern, extra_headers, session, gone)
        finally:
            self.access.end(link.principal)

    async def _run(
        self,
        link: ClientLink,
        output: HttpOutput,
        msg: wire.Message,
        receive: Receive,
        send: Send,
        modern: bool,
        extra_headers: ExtraHeaders | None,
        session: LegacySession | None,
        gone: ClientGone | None,
    ) -> None:
        msg_id = msg["id"]
        started = time.perf_counter()
        assert self.tg is not None
        answer = Answer()
        stream = output.open(msg)
        try:
            await self.service.handle_client_message(link, msg, self.tg, checked=True)
            if session is not None and session.resumable:
                last = await self._answer_resumable(session, stream, msg_id, receive, send, gone)
                if last is not None:
                    self._observe(msg, link, last, started)
                return
            first: wire.Message | None = None
            if not self._cut_off:
                self._firsts.add(stream)
                try:
                    with contextlib.suppress(anyio.EndOfStream):  # answered 404 below
                        first = await stream.first(math.inf, gone)
                finally:
                    self._firsts.discard(stream)
            # None when the client went away first (the watcher cancelled) or
            # the session ended under the request: both cancel it upstream.
            reply: wire.Message | None = None
            if first is not None and is_reply_to(first, msg_id):
                # Most calls: the reply is all there is, and no task watches the client.
                reply = await answer_request(
                    stream,
                    send,
                    msg_id,
                    modern,
                    extra_headers,
                    answer,
                    forward_authorization=self._forward_authorization,
                    first=first,
                )
            elif gone is None or not gone.gone:  # else nobody is left to answer
                async with anyio.create_task_group() as tg:
                    # The end of the shutdown grace cancels the wait too (not a
                    # scope of its own: it would cost the call more).
                    self._waits.add(tg.cancel_scope)
                    try:
                        if self._cut_off:
                            tg.cancel_scope.cancel()
                        tg.start_soon(watch_disconnect, receive, tg.cancel_scope)
                        reply = await answer_request(
                            stream,
                            send,
                            msg_id,
                            modern,
                            extra_headers,
                            answer,
                            forward_authorization=self._forward_authorization,
                            first=first,
                        )
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
                self._observe(msg, link, reply, started)
        finally:
            output.close(msg_id)
            stream.close()

    async def _answer_resumable(
        self,
        session: LegacySession,
        stream: Inbox,
        msg_id: wire.RequestId,
        receive: Receive,
        send: Send,
        gone: ClientGone | None,
    ) -> wire.Message | None:
        outcome = await self.streams.answer(session.streams, stream, msg_id, receive, send, gone)
        if outcome is None:  # the session ended before anything came
            await respond(
                send, 404, wire.error_response(msg_id, wire.INVALID_REQUEST, "Session ended")
            )
            self.service.cancel_request(session.link, msg_id)
            return None
        if outcome.cancel_upstream:
            self.service.cancel_request(session.link, msg_id)
        return outcome.reply

    def _observe(
        self, msg: wire.Message, link: ClientLink, reply: wire.Message, started: float
    ) -> None:
        self.tools.observe(reply)
        self.metrics.observe_request(
            msg["method"],
            link,
            reply,
            time.perf_counter() - started,
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
