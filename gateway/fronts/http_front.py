"""The downstream Streamable HTTP transport: an ASGI app at /mcp serving both
eras on one endpoint (2026-07-28 and 2025-11-25 basic/transports), plus
/healthz, /readyz and /metrics.

It frames, authenticates and routes; the gateway service decides. A modern
POST is one request on an ephemeral client link; a legacy `initialize` mints a
session (Mcp-Session-Id) whose link lives until DELETE or idle expiry.
What a request's head and body call for is core/http_requests' and
core/http_binding's to say; running a call and answering it is http_calls',
the legacy sessions http_sessions'.
"""

from __future__ import annotations

import anyio
from anyio.abc import TaskGroup

from gateway import wire
from gateway.core import http_binding, http_posts, http_requests
from gateway.core.http_posts import PostKind
from gateway.fronts.asgi import ClientGone, Receive, Scope, Send, client_gone
from gateway.fronts.client_queues import ClientQueues
from gateway.fronts.direct_posts import DirectPosts
from gateway.fronts.http_access import HttpAccess
from gateway.fronts.http_answers import (
    HttpError,
    headers_of,
    read_body,
    readiness_answer,
    respond,
    respond_empty,
    respond_text,
)
from gateway.fronts.http_calls import HttpCalls
from gateway.fronts.http_output import http_link
from gateway.fronts.http_sessions import HttpSessions
from gateway.fronts.legacy_session import LegacySession
from gateway.fronts.metrics import Metrics
from gateway.fronts.port import GatewayPort
from gateway.fronts.sse_front import MESSAGES_PATH, STREAM_PATH, SseFront

ENDPOINT = "/mcp"


class HttpFront:
    def __init__(self, service: GatewayPort, metrics: Metrics) -> None:
        self.service = service
        self.config = service.config
        self.metrics = metrics
        self._tools = http_binding.ToolHeaderCache()
        self.access = HttpAccess(self.config, service.remember_credential)
        self._calls = HttpCalls(service, metrics, self.access, self._tools)
        # What waits to be written to the clients, per stream and per principal.
        self.queues = ClientQueues.of(self.config)
        self._sessions = HttpSessions(service, self._calls, self.queues)
        # The plain POSTs, answered by the front's own server without a task.
        self.direct = DirectPosts(service, self.access, self._calls, self._sessions, self._tools)
        # The deprecated HTTP+SSE transport's clients, when it is on.
        self.sse = (
            SseFront(service, self.access, metrics, self.queues)
            if self.config.http_sse_front
            else None
        )
        if self.sse is not None:
            # One `[http] max_sessions` for the legacy sessions of both transports.
            self._sessions.others = self.sse.sessions.by_id

    @property
    def tg(self) -> TaskGroup | None:
        """The server's task group, where the service runs each call (set
        once it runs)."""
        return self._calls.tg

    @tg.setter
    def tg(self, tg: TaskGroup | None) -> None:
        self._calls.tg = tg
        if self.sse is not None:
            self.sse.tg = tg

    @property
    def sessions(self) -> dict[str, LegacySession]:
        return self._sessions.by_id

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
                    self.metrics.render(
                        self.service.snapshot(),
                        len(self.sessions),
                        0 if self.sse is None else len(self.sse.sessions.by_id),
                        self.queues.total,
                    ),
                    "text/plain; version=0.0.4",
                )
            elif self.sse is not None and path in (STREAM_PATH, MESSAGES_PATH):
                await self._sse(scope, headers, receive, send)
            elif path != ENDPOINT:
                await respond(
                    send, 404, wire.error_response(None, wire.METHOD_NOT_FOUND, "Not found")
                )
            else:
                principal = self.access.principal(headers)
                if method == "POST":
                    await self._post(headers, principal, receive, send, client_gone(scope))
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
        failure only for those who may read /metrics (docs/http.md, "As an
        HTTP sidecar")."""
        status, body = readiness_answer(self.service.readiness())
        await respond(send, status, body if details else {"status": body["status"]})

    async def _sse(
        self, scope: Scope, headers: dict[str, str], receive: Receive, send: Send
    ) -> None:
        """The deprecated HTTP+SSE transport: GET its stream, POST its messages."""
        assert self.sse is not None
        path, method = scope["path"], scope["method"]
        principal = self.access.principal(headers)
        if path == STREAM_PATH and method == "GET":
            refusal = self._sessions.refusal(principal)
            await self.sse.open_stream(principal, refusal, receive, send, client_gone(scope))
        elif path == MESSAGES_PATH and method == "POST":
            await self.sse.post(scope.get("query_string", b""), headers, principal, receive, send)
        else:
            raise HttpError(405, "Method not allowed")

    # -- POST --------------------------------------------------------------------
    async def _post(
        self,
        headers: dict[str, str],
        principal: str,
        receive: Receive,
        send: Send,
        gone: ClientGone | None,
    ) -> None:
        limit = self.config.max_message_bytes
        _refuse(http_requests.post_refusal(headers, limit))
        body = await read_body(receive, limit)
        post = http_posts.classify(headers, body, self._tools)
        kind, msg = post.kind, post.msg
        if kind is PostKind.REFUSED:
            assert post.refusal is not None
            self.metrics.count_http_error(400)
            await respond(send, 400, post.refusal)
            return
        assert msg is not None
        if kind is PostKind.DELIVERY:
            await self._deliver(msg, post.session_id, principal, post.modern, send)
        elif kind is PostKind.MODERN_CALL:
            output, link = http_link(self.queues, principal)
            self.service.links.add(link)
            try:
                await self._calls.run(link, output, msg, receive, send, modern=True, gone=gone)
            finally:
                self.service.drop_link(link)
        elif kind is PostKind.INITIALIZE:
            await self._sessions.initialize(principal, msg, receive, send)
        else:
            session = self._sessions.find(post.session_id, principal, msg.get("id"))
            await self._calls.run(
                session.link,
                session.output,
                msg,
                receive,
                send,
                modern=False,
                session=session,
                gone=gone,
            )

    async def _deliver(
        self,
        msg: wire.Message,
        session_id: str | None,
        principal: str,
        modern: bool,
        send: Send,
    ) -> None:
        """Notifications and the client's answers to server requests: 202."""
        if session_id is not None:
            session = self._sessions.find(session_id, principal, None)
            if wire.kind_of(msg) is wire.Kind.NOTIFICATION:
                assert self.tg is not None
                await self.service.handle_client_message(session.link, msg, self.tg, checked=True)
            else:
                self.service.handle_client_reply(session.link, msg)
        elif not modern:
            raise HttpError(400, "Bad Request: Mcp-Session-Id header is required")
        await respond_empty(send, 202)

    # -- GET / DELETE (legacy sessions) ---------------------------------------------
    async def _get(
        self, headers: dict[str, str], principal: str, receive: Receive, send: Send
    ) -> None:
        _refuse(http_requests.get_refusal(headers))
        session_id = headers["mcp-session-id"]
        last_event_id = headers.get("last-event-id")
        await self._sessions.serve_get(session_id, last_event_id, principal, receive, send)

    async def _delete(self, headers: dict[str, str], principal: str, send: Send) -> None:
        session_id = headers.get("mcp-session-id")
        if session_id is None:
            raise HttpError(405, "Method not allowed: no session to end")
        session = self._sessions.find(session_id, principal, None)
        self.end_session(session, "deleted by the client")
        await respond_empty(send, 200)

    # -- what the server running the front calls ---------------------------------------
    def end_session(self, session: LegacySession, why: str) -> None:
        self._sessions.end(session, why)

    async def expire_idle_sessions(self) -> None:
        """End legacy sessions, of both transports, nobody used for
        `http_session_idle` seconds."""
        idle = self.config.http_session_idle
        while True:  # each pass sleeps a tenth of the idle limit; cancelled at shutdown
            await anyio.sleep(min(idle / 10, 60))
            cutoff = anyio.current_time() - idle
            self._sessions.expire_idle(cutoff)
            if self.sse is not None:
                self.sse.sessions.expire_idle(cutoff)

    def cut_off_calls(self) -> None:
        """The shutdown grace is over: every call still waiting is answered
        with an error now, before the server gives up on its connections."""
        self._calls.cut_off()
        self.direct.cut_off()

    def end_streams(self) -> None:
        """Shutdown begins: GET streams end now (they never would by themselves)."""
        self._sessions.end_get_streams()
        if self.sse is not None:
            self.sse.end_streams()


def _refuse(refusal: http_requests.HeadRefusal | None) -> None:
    if refusal is not None:
        raise HttpError(refusal.status, refusal.message, close=refusal.close)
