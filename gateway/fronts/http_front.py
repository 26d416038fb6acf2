"""The downstream Streamable HTTP transport: an ASGI app at /mcp serving both
eras on one endpoint (2026-07-28 and 2025-11-25 basic/transports), plus
/healthz, /readyz and /metrics.

It frames, authenticates and routes; the gateway service decides. A modern
POST is one request on an ephemeral client link; a legacy `initialize` mints a
session (Mcp-Session-Id) whose link lives until DELETE or idle expiry.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

import anyio
import structlog
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream

from gateway import era, inbound, wire
from gateway.client_link import ClientLink
from gateway.core import http_binding
from gateway.core.routing import LegacyClientSession
from gateway.fronts.asgi import Receive, Scope, Send, watch_disconnect
from gateway.fronts.http_access import HttpAccess
from gateway.fronts.http_answers import (
    Answer,
    HttpError,
    answer_request,
    headers_of,
    read_body,
    readiness_answer,
    respond,
    respond_empty,
    respond_text,
    serve_session_stream,
)
from gateway.fronts.http_output import HttpOutput
from gateway.fronts.legacy_session import LegacySession
from gateway.fronts.legacy_streams import LegacyStreams
from gateway.fronts.metrics import Metrics
from gateway.fronts.port import GatewayPort

log = structlog.get_logger("gateway.fronts.http")

ENDPOINT = "/mcp"


class HttpFront:
    def __init__(self, service: GatewayPort, metrics: Metrics) -> None:
        self.service = service
        self.config = service.config
        self.metrics = metrics
        self.sessions: dict[str, LegacySession] = {}
        self._tools = http_binding.ToolHeaderCache()
        self.tg: TaskGroup | None = None
        self.access = HttpAccess(self.config, service.remember_credential)
        # The wait of each call in progress: cut at the end of the shutdown grace.
        self._waits: set[anyio.CancelScope] = set()
        self._cut_off = False
        self._streams = LegacyStreams(
            retry=self.config.http_sse_retry,
            poll_after=self.config.http_sse_poll_after,
            window=self.config.http_sse_resume_window,
            waits=self._waits,
            cut_off=lambda: self._cut_off,
        )

    # -- ASGI ----------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        try:
            headers = headers_of(scope)
            if path == "/healthz":
                # Probes (a kubelet's among them) come with any Host and no token.
                await respond(send, 200, {"status": "alive"})
                return
            if path == "/readyz":
                await self._readyz(send, details=self.access.may_read_details(scope, headers))
                return
            self.access.check_host(scope, headers)
            if path == "/metrics":
                self.access.check_admin(headers)
                await respond_text(
                    send,
                    200,
                    self.metrics.render(self.service.snapshot(), len(self.sessions)),
                    "text/plain; version=0.0.4",
                )
            elif path != ENDPOINT:
                await respond(
                    send, 404, wire.error_response(None, wire.METHOD_NOT_FOUND, "Not found")
                )
            else:
                principal = self.access.principal(headers)
                if method == "POST":
                    await self._post(headers, principal, receive, send)
                elif method == "GET":
                    await self._get(headers, principal, receive, send)
                elif method == "DELETE":
                    await self._delete(headers, principal, send)
                else:
                    raise HttpError(405, "Method not allowed")
        except HttpError as exc:
            self.metrics.count_http_error(exc.status)
            await respond(send, exc.status, exc.body, exc.headers)

    async def _readyz(self, send: Send, *, details: bool) -> None:
        """The status for anyone; the era, the server's identity and the
        failure only for those who may read /metrics (README "As an HTTP
        sidecar")."""
        status, body = readiness_answer(self.service.readiness())
        await respond(send, status, body if details else {"status": body["status"]})

    # -- POST --------------------------------------------------------------------
    async def _post(
        self, headers: dict[str, str], principal: str, receive: Receive, send: Send
    ) -> None:
        if not http_binding.accepts_json_and_sse(headers.get("accept")):
            raise HttpError(
                406, "Not Acceptable: Accept must list application/json and text/event-stream"
            )
        ctype = headers.get("content-type", "")
        if not ctype.split(";")[0].strip().lower() == "application/json":
            raise HttpError(415, "Unsupported Media Type: the body must be application/json")
        limit = self.config.max_message_bytes
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise HttpError(413, f"Payload Too Large: the limit is {limit} bytes", close=True)
        body = await read_body(receive, limit)
        try:
            msg = wire.decode(body)
        except wire.InvalidMessage as exc:
            if exc.reply is not None:
                self.metrics.count_http_error(400)
                await respond(send, 400, exc.reply)
                return
            raise HttpError(400, exc.reason) from None
        kind = wire.kind_of(msg)
        if kind is wire.Kind.REQUEST or kind is wire.Kind.NOTIFICATION:
            # Before anything here reads a field (the progress token, the
            # name for Mcp-Name): a wrong shape is -32602, HTTP 400.
            wrong = inbound.problem(msg)
            if wrong is not None:
                msg_id = msg.get("id") if kind is wire.Kind.REQUEST else None
                raise HttpError(
                    400,
                    f"Invalid params: {wrong[0]} {wrong[1]}",
                    wire.INVALID_PARAMS,
                    msg_id,
                    field=wrong[0],
                )
        session_id = headers.get("mcp-session-id")
        header_version = headers.get("mcp-protocol-version", "").strip()
        modern = session_id is None and (
            era.is_modern(msg) or header_version in era.MODERN_VERSIONS
        )
        if kind is not wire.Kind.REQUEST:
            await self._post_other(msg, kind, session_id, principal, modern, send)
            return
        if modern:
            await self._modern_request(headers, principal, msg, receive, send)
        elif session_id is None and msg["method"] == "initialize":
            await self._initialize(principal, msg, receive, send)
        else:
            session = self._session(session_id, principal, msg.get("id"))
            await self._stream_request(
                session.link, session.output, msg, receive, send, modern=False, session=session
            )

    async def _post_other(
        self,
        msg: wire.Message,
        kind: wire.Kind,
        session_id: str | None,
        principal: str,
        modern: bool,
        send: Send,
    ) -> None:
        """Notifications and the client's answers to server requests: 202."""
        if session_id is not None:
            session = self._session(session_id, principal, None)
            if kind is wire.Kind.NOTIFICATION:
                assert self.tg is not None
                await self.service.handle_client_message(session.link, msg, self.tg, checked=True)
            else:
                self.service.handle_client_reply(session.link, msg)
        elif not modern:
            raise HttpError(400, "Bad Request: Mcp-Session-Id header is required")
        await respond_empty(send, 202)

    async def _modern_request(
        self,
        headers: dict[str, str],
        principal: str,
        msg: wire.Message,
        receive: Receive,
        send: Send,
    ) -> None:
        if not era.is_modern(msg):
            # A modern header over a body without the per-request fields
            # (2026-07-28 "Per-request protocol fields": -32602, HTTP 400).
            await respond(
                send,
                400,
                wire.error_response(
                    msg.get("id"),
                    wire.INVALID_PARAMS,
                    f"Invalid params: _meta[{era.PROTOCOL_VERSION!r}] and "
                    f"_meta[{era.CLIENT_CAPABILITIES!r}] are required",
                ),
            )
            return
        problem = None
        if era.is_modern(msg):
            name = (msg.get("params") or {}).get("name")
            problem = http_binding.check_modern_headers(
                headers, msg, self._tools.params(name) if isinstance(name, str) else None
            )
        if problem is not None:
            self.metrics.count_http_error(400)
            await respond(send, 400, problem)
            return
        output = HttpOutput()
        link = ClientLink(
            send=output.send, send_nowait=output.deliver, principal=principal, transport="http"
        )
        self.service.links.add(link)
        try:
            await self._stream_request(link, output, msg, receive, send, modern=True)
        finally:
            self.service.drop_link(link)

    async def _initialize(
        self, principal: str, msg: wire.Message, receive: Receive, send: Send
    ) -> None:
        if len(self.sessions) >= self.config.http_max_sessions:
            raise HttpError(503, "Too many sessions", wire.INTERNAL_ERROR, msg.get("id"))
        output = HttpOutput()
        link = ClientLink(
            send=output.send, send_nowait=output.deliver, principal=principal, transport="http"
        )
        session = LegacySession(secrets.token_urlsafe(24), link, output)
        self.service.links.add(link)
        opened: list[LegacyClientSession | None] = []

        def extra(reply: wire.Message) -> list[tuple[bytes, bytes]]:
            opened.append(link.session)
            if link.session is None:
                return []
            self.sessions[session.id] = session
            log.info("http session opened", session=session.id[:8], principal=principal)
            return [(b"mcp-session-id", session.id.encode())]

        try:
            await self._stream_request(
                link, output, msg, receive, send, modern=False, extra_headers=extra
            )
        finally:
            if not opened or opened[0] is None:
                self.service.drop_link(link)

    def _session(
        self, session_id: str | None, principal: str, msg_id: wire.RequestId | None
    ) -> LegacySession:
        if session_id is None:
            raise HttpError(400, "Bad Request: Mcp-Session-Id header is required", msg_id=msg_id)
        session = self.sessions.get(session_id)
        if session is None:
            raise HttpError(404, "Session not found", msg_id=msg_id)
        if session.link.principal != principal:
            raise HttpError(404, "Session not found", msg_id=msg_id)
        session.last_seen = time.monotonic()
        return session

    async def _stream_request(
        self,
        link: ClientLink,
        output: HttpOutput,
        msg: wire.Message,
        receive: Receive,
        send: Send,
        *,
        modern: bool,
        extra_headers: Callable[[wire.Message], list[tuple[bytes, bytes]]] | None = None,
        session: LegacySession | None = None,
    ) -> None:
        """Run one request and answer it: for a 2025-11-25 session on a
        resumable SSE stream (legacy_streams); else JSON when the reply is all
        there is, an SSE stream when something comes first, and closing the
        stream cancels."""
        msg_id = msg["id"]
        with self.access.in_progress(link.principal, msg_id):
            await self._run_streamed(
                link, output, msg, receive, send, modern, extra_headers, session
            )

    async def _run_streamed(
        self,
        link: ClientLink,
        output: HttpOutput,
        msg: wire.Message,
        receive: Receive,
        send: Send,
        modern: bool,
        extra_headers: Callable[[wire.Message], list[tuple[bytes, bytes]]] | None,
        session: LegacySession | None,
    ) -> None:
        msg_id = msg["id"]
        started = time.perf_counter()
        assert self.tg is not None
        answer = Answer()
        stream = output.open(msg)
        try:
            await self.service.handle_client_message(link, msg, self.tg, checked=True)
            if session is not None and session.resumable:
                last = await self._answer_resumable(session, stream, msg_id, receive, send)
                if last is not None:
                    self._observe_call(msg, link, last, started)
                return
            # None when the client went away first (the watcher cancelled) or
            # the session ended under the request: both cancel it upstream.
            reply: wire.Message | None = None
            async with anyio.create_task_group() as tg:
                # The end of the shutdown grace cancels the wait too (not a
                # scope of its own: it would cost every request).
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
                        forward_authorization=self.config.http_forward_authorization,
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
                self._observe_call(msg, link, reply, started)
        finally:
            output.close(msg_id)
            stream.close()

    async def _answer_resumable(
        self,
        session: LegacySession,
        stream: MemoryObjectReceiveStream[wire.Message],
        msg_id: wire.RequestId,
        receive: Receive,
        send: Send,
    ) -> wire.Message | None:
        outcome = await self._streams.answer(session.streams, stream, msg_id, receive, send)
        if outcome is None:  # the session ended before anything came
            await respond(
                send, 404, wire.error_response(msg_id, wire.INVALID_REQUEST, "Session ended")
            )
            self.service.cancel_request(session.link, msg_id)
            return None
        if outcome.cancel_upstream:
            self.service.cancel_request(session.link, msg_id)
        return outcome.reply

    def _observe_call(
        self, msg: wire.Message, link: ClientLink, reply: wire.Message, started: float
    ) -> None:
        self._tools.observe(reply)
        self.metrics.observe_request(
            msg["method"],
            link,
            reply,
            time.perf_counter() - started,
            self.service.path_for(link.session is not None),
        )

    def cut_off_calls(self) -> None:
        """The shutdown grace is over: every call still waiting is answered
        with an error now, before the server gives up on its connections."""
        self._cut_off = True
        for wait in list(self._waits):
            wait.cancel()

    def end_streams(self) -> None:
        """Shutdown begins: GET streams end now (they never would by themselves)."""
        for session in self.sessions.values():
            session.output.close_get()

    # -- GET / DELETE (legacy sessions) ---------------------------------------------
    async def _get(
        self, headers: dict[str, str], principal: str, receive: Receive, send: Send
    ) -> None:
        session_id = headers.get("mcp-session-id")
        if session_id is None:
            # 2026-07-28: no GET endpoint for modern clients.
            raise HttpError(405, "Method not allowed: use POST (or subscriptions/listen)")
        if "text/event-stream" not in headers.get("accept", ""):
            raise HttpError(406, "Not Acceptable: GET needs Accept: text/event-stream")
        session = self._session(session_id, principal, None)
        last_event_id = headers.get("last-event-id")
        if last_event_id is not None:
            # 2025-11-25 "Resumability and Redelivery": go on with that stream.
            if not await self._streams.resume(session.streams, last_event_id, receive, send):
                raise HttpError(
                    400,
                    "Bad Request: Last-Event-ID names no stream of this session that can be"
                    " resumed (it ended, expired, or was never sent)",
                    reason="unknown-event-id",
                )
            return
        stream = session.output.open_get()
        if stream is None:
            raise HttpError(409, "Conflict: this session already has a GET stream")
        try:
            await serve_session_stream(stream, receive, send)
        finally:
            session.output.close_get()
            stream.close()

    async def _delete(self, headers: dict[str, str], principal: str, send: Send) -> None:
        session_id = headers.get("mcp-session-id")
        if session_id is None:
            raise HttpError(405, "Method not allowed: no session to end")
        session = self._session(session_id, principal, None)
        self.end_session(session, "deleted by the client")
        await respond_empty(send, 200)

    def end_session(self, session: LegacySession, why: str) -> None:
        self.sessions.pop(session.id, None)
        self.service.drop_link(session.link)
        session.output.close_all()
        log.info("http session ended", session=session.id[:8], why=why)

    async def expire_idle_sessions(self) -> None:
        """End legacy sessions nobody used for `http_session_idle` seconds."""
        idle = self.config.http_session_idle
        while True:  # each pass sleeps a tenth of the idle limit
            await anyio.sleep(min(idle / 10, 60))
            cutoff = time.monotonic() - idle
            for session in list(self.sessions.values()):
                if session.last_seen < cutoff and not session.link.inflight:
                    self.end_session(session, "idle")
                else:
                    session.streams.sweep(anyio.current_time(), self._streams.window)
