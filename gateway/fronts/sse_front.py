"""The deprecated HTTP+SSE transport as a front (2024-11-05 and 2025-03-26
transports; 2025-11-25 basic/transports "Backwards Compatibility"): `GET
/sse` opens an event stream whose first `endpoint` event names where to POST
messages; everything for the client comes on that stream, and each POST is
answered 202 Accepted.

Such a client is a legacy client of the gateway like any other: its link
goes through the same GatewayPort calls as the stdio front's and the
Streamable HTTP front's, under the same Host/Origin checks, tokens and
principals, body size, concurrency and session limits (the HTTP front has
checked Host and found the principal before it routes here).
"""

from __future__ import annotations

import time
from urllib.parse import parse_qs

import anyio
from anyio.abc import TaskGroup

from gateway import inbound, wire
from gateway.core import http_requests
from gateway.fronts.asgi import ClientGone, Receive, Send, chunk, sse_start, watch_disconnect
from gateway.fronts.client_queues import ClientQueues
from gateway.fronts.http_access import HttpAccess
from gateway.fronts.http_answers import HttpError, read_body, respond_empty
from gateway.fronts.http_sessions import too_many
from gateway.fronts.metrics import Metrics
from gateway.fronts.port import GatewayPort
from gateway.fronts.sse_sessions import SESSION_ID, SseSession, SseSessions

STREAM_PATH = "/sse"
MESSAGES_PATH = "/messages"
KEEPALIVE = 15.0
KEEPALIVE_COMMENT = b": keep-alive\n\n"


def endpoint_event(session_id: str) -> bytes:
    return b"event: endpoint\ndata: %s?session_id=%s\n\n" % (
        MESSAGES_PATH.encode(),
        session_id.encode(),
    )


class SseFront:
    def __init__(
        self, service: GatewayPort, access: HttpAccess, metrics: Metrics, queues: ClientQueues
    ) -> None:
        self.service = service
        self.config = service.config
        self.access = access
        self.sessions = SseSessions(service, access, metrics, queues)
        self.keepalive = KEEPALIVE
        self.tg: TaskGroup | None = None  # the server's, where the service runs each call

    # -- GET /sse: the session's stream --------------------------------------------------
    async def open_stream(
        self,
        principal: str,
        refusal: str | None,
        receive: Receive,
        send: Send,
        gone: ClientGone | None = None,
    ) -> None:
        """`refusal`: why the front's legacy sessions of both transports
        (HttpSessions.refusal) leave no room for one more, if they do;
        `gone`: the server's word on the client, when it gives one (and its
        way to drop the connection)."""
        if refusal is not None:
            raise HttpError(503, too_many(refusal))
        session = self.sessions.open(principal)
        try:
            # The id in a header too: a load balancer cannot read it in the
            # body, and sticks the session's POSTs (?session_id=) on it
            # (deploy/haproxy/haproxy.cfg); clients of this transport ignore it.
            await send(sse_start((b"mcp-session-id", session.id.encode())))
            await send(chunk(endpoint_event(session.id), more=True))
            with anyio.CancelScope() as scope:
                session.scope = scope
                if session.cut:
                    scope.cancel()
                await self._write(session, receive, send)
            if not scope.cancelled_caught:
                # The client left, or the gateway ended the stream (shutdown):
                # the response ends whole.
                await send(chunk(b"", more=False))
            elif gone is not None and gone.abort is not None:
                # Cut for not being read: its end would wait on the same full
                # buffer, so the connection goes instead.
                gone.abort()
        finally:
            self.sessions.end(session)

    async def _write(self, session: SseSession, receive: Receive, send: Send) -> None:
        """The session's messages as events (those queued together in one
        write), a comment every `keepalive` seconds of silence, until the
        client goes or the session is stopped."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_disconnect, receive, tg.cancel_scope)
            while True:  # ends when the client goes or the outbox closes
                data = KEEPALIVE_COMMENT
                # Only the wait is timed: a write cut short by the timer
                # would lose its event.
                with anyio.move_on_after(self.keepalive):
                    try:
                        data = await session.outbox.get()
                    except anyio.EndOfStream:
                        break
                await send(chunk(data, more=True))
            tg.cancel_scope.cancel()

    # -- POST /messages?session_id=...: one message of the session -----------------------
    async def post(
        self, query: bytes, headers: dict[str, str], principal: str, receive: Receive, send: Send
    ) -> None:
        session = self._session_of(query, principal)
        limit = self.config.max_message_bytes
        refusal = http_requests.body_refusal(headers, limit, assumed_type="application/json")
        if refusal is not None:
            raise HttpError(refusal.status, refusal.message, close=refusal.close)
        body = await read_body(receive, limit)
        try:
            msg = wire.decode(body)
        except wire.InvalidMessage as exc:
            raise HttpError(400, exc.reason) from None
        kind = wire.kind_of(msg)
        if kind is wire.Kind.REQUEST or kind is wire.Kind.NOTIFICATION:
            wrong = inbound.problem(msg)
            if wrong is not None:
                raise HttpError(
                    400,
                    f"Invalid params: {wrong[0]} {wrong[1]}",
                    wire.INVALID_PARAMS,
                    msg.get("id") if kind is wire.Kind.REQUEST else None,
                    field=wrong[0],
                )
        if session.ended_why is not None:  # ended while the body came
            raise HttpError(404, "Session not found")
        session.last_seen = anyio.current_time()
        link = session.link
        assert self.tg is not None
        if kind is wire.Kind.REQUEST:
            if msg["id"] in session.pending:
                # Its reply could not be told from the other's on the one
                # stream (2025-11-25 basic: an id "MUST NOT have been
                # previously used by the requestor within the same session").
                raise HttpError(
                    400,
                    "Invalid Request: a request with this id is in progress in this session",
                    wire.INVALID_REQUEST,
                    msg["id"],
                    reason="duplicate-request-id",
                )
            self.access.begin(principal, msg["id"])  # 429 past the principal's limit
            session.pending[msg["id"]] = (msg["method"], time.perf_counter())
            # Handed over before the 202 is written (no wait between the
            # check above and here): a session that ends meanwhile would
            # otherwise be given a call after its link was dropped. The
            # reply goes on the stream, before or after the 202.
            await self.service.handle_client_message(link, msg, self.tg, checked=True)
            await respond_empty(send, 202)
            return
        if kind is wire.Kind.NOTIFICATION:
            if msg["method"] == "notifications/cancelled":
                # A cancelled request gets no reply: it no longer counts.
                cancelled = (msg.get("params") or {}).get("requestId")
                if cancelled in session.pending:
                    del session.pending[cancelled]
                    self.access.end(principal)
            await self.service.handle_client_message(link, msg, self.tg, checked=True)
        else:
            self.service.handle_client_reply(link, msg)
        await respond_empty(send, 202)

    def _session_of(self, query: bytes, principal: str) -> SseSession:
        """The session the query names: 400 without a well-formed id, 404
        when none such is open (ended, unknown, or another principal's)."""
        try:
            values = parse_qs(query.decode("latin-1"), strict_parsing=False).get("session_id")
        except ValueError:
            values = None
        if not values:
            raise HttpError(400, "Bad Request: session_id is required")
        if len(values) > 1 or not SESSION_ID.fullmatch(values[0]):
            raise HttpError(400, "Bad Request: session_id is not a session id")
        session = self.sessions.find(values[0], principal)
        if session is None or session.ended_why is not None:
            raise HttpError(404, "Session not found")
        return session

    def end_streams(self) -> None:
        """Shutdown begins: the streams end now (they never would by themselves)."""
        self.sessions.stop_all("gateway shutting down")
