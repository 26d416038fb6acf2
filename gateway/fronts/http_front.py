"""The downstream Streamable HTTP transport: an ASGI app at /mcp serving both
eras on one endpoint (2026-07-28 and 2025-11-25 basic/transports), plus
/healthz, /readyz and /metrics.

It frames, authenticates and routes; the gateway service decides. A modern
POST is one request on an ephemeral client link; a legacy `initialize` mints a
session (Mcp-Session-Id) whose link lives until DELETE or idle expiry.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import orjson
import structlog
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream

from gateway import era, inbound, wire
from gateway.client_link import ClientLink
from gateway.core import authority, http_binding
from gateway.core.routing import LegacyClientSession
from gateway.fronts.asgi import Receive, Scope, Send, watch_disconnect
from gateway.fronts.http_output import HttpOutput
from gateway.fronts.legacy_streams import LegacyStreams, SessionStreams, resumable
from gateway.fronts.metrics import Metrics
from gateway.fronts.port import GatewayPort

log = structlog.get_logger("gateway.fronts.http")

KEEPALIVE = 15.0
ENDPOINT = "/mcp"
REALM = "mcp-era-gateway"
# Host/Origin verdicts remembered: how many, and the longest pair remembered.
_VERDICTS_MAX = 256
_VERDICT_KEY_MAX = 512


@dataclass(eq=False)
class LegacySession:
    id: str
    link: ClientLink
    output: HttpOutput
    last_seen: float = field(default_factory=time.monotonic)
    streams: SessionStreams = field(default_factory=SessionStreams)

    @property
    def resumable(self) -> bool:
        """2025-11-25 clients take primed, resumable SSE answers."""
        state = self.link.session
        return state is not None and resumable(state.version)


class HttpError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        code: int = wire.INVALID_REQUEST,
        msg_id: wire.RequestId | None = None,
        *,
        headers: list[tuple[bytes, bytes]] | None = None,
        close: bool = False,
        **data: Any,
    ) -> None:
        """`data`: the gateway error's `data` fields (e.g. `reason`); without
        them the body is a plain JSON-RPC error."""
        super().__init__(message)
        self.status = status
        self.headers = headers or []
        if data:
            self.body = wire.gateway_error(msg_id, code, message, **data)
        else:
            self.body = wire.error_response(msg_id, code, message)
        # The request's body was not read: close rather than read the rest.
        if close:
            self.headers.append((b"connection", b"close"))


class HttpFront:
    def __init__(self, service: GatewayPort, metrics: Metrics) -> None:
        self.service = service
        self.config = service.config
        self.metrics = metrics
        self.sessions: dict[str, LegacySession] = {}
        self._busy: dict[str, int] = {}
        self._tools: dict[str, tuple[http_binding.HeaderParam, ...]] = {}
        self.tg: TaskGroup | None = None
        # Config.check has parsed them, so they are well-formed here.
        self._allowed_hosts = frozenset(
            authority.parse_host_name(host) for host in self.config.http_allowed_hosts
        )
        self._allowed_origins = frozenset(
            authority.parse_origin(origin).serialize()
            for origin in self.config.http_allowed_origins
        )
        self._host_verdicts: dict[tuple[str | None, str | None], authority.Refusal | None] = {}
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
            headers = _headers(scope)
            if path == "/healthz":
                # Probes (a kubelet's among them) come with any Host and no token.
                await _respond(send, 200, {"status": "alive"})
                return
            if path == "/readyz":
                await self._readyz(send, details=self._may_read_details(scope, headers))
                return
            self._check_host(scope, headers)
            if path == "/metrics":
                self._check_admin(headers)
                await _respond_text(
                    send,
                    200,
                    self.metrics.render(self.service.snapshot(), len(self.sessions)),
                    "text/plain; version=0.0.4",
                )
            elif path != ENDPOINT:
                await _respond(
                    send, 404, wire.error_response(None, wire.METHOD_NOT_FOUND, "Not found")
                )
            else:
                principal = self._principal(headers)
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
            await _respond(send, exc.status, exc.body, exc.headers)

    async def _readyz(self, send: Send, *, details: bool) -> None:
        """The status for anyone; the era, the server's identity and the
        failure only for those who may read /metrics (README "As an HTTP
        sidecar")."""
        ready = self.service.readiness()
        body: dict[str, Any]
        if ready.settled:
            status = 200
            body = {
                "status": "ready",
                "era": ready.era,
                "server": ready.server_info,
            }
            if ready.legacy_version is not None:
                # A dual-era server: the version each era of client meets.
                body["versions"] = {
                    "modern": ready.modern_version,
                    "legacy": ready.legacy_version,
                }
        elif ready.awaiting_credentials:
            # Reachable, and it wants the clients' own credentials: the era is
            # learnt with the first one, so traffic must be let in.
            status = 200
            body = {
                "status": "ready",
                "era": None,
                "reason": "the upstream requires authorization; its era is probed "
                "with the first client's forwarded credential",
            }
        else:
            status = 503
            body = {
                "status": "not ready",
                "reason": ready.failure or "upstream era not settled yet",
            }
        await _respond(send, status, body if details else {"status": body["status"]})

    # -- security (2026-07-28 streamable-http "Security Warning") ---------------
    def _check_host(self, scope: Scope, headers: dict[str, str]) -> None:
        """Host and Origin, parsed strictly: 400 when malformed, 403 when not allowed."""
        if len(headers) < len(scope["headers"]):
            # Some field came twice (`headers` kept the last): judge them all.
            refusal = self._judge_host(_all_values(scope, b"host"), _all_values(scope, b"origin"))
        else:
            refusal = self._judge_host_once(headers.get("host"), headers.get("origin"))
        if refusal is not None:
            raise HttpError(refusal.status, refusal.message, reason=refusal.reason)

    def _judge_host_once(self, host: str | None, origin: str | None) -> authority.Refusal | None:
        """The verdict on one Host and Origin pair, remembered for the few
        pairs real clients send (bounded: short pairs, a few hundred)."""
        key = (host, origin)
        try:
            return self._host_verdicts[key]
        except KeyError:
            pass
        verdict = self._judge_host(
            [] if host is None else [host], [] if origin is None else [origin]
        )
        if len(host or "") + len(origin or "") <= _VERDICT_KEY_MAX:
            if len(self._host_verdicts) >= _VERDICTS_MAX:
                self._host_verdicts.clear()
            self._host_verdicts[key] = verdict
        return verdict

    def _judge_host(self, hosts: list[str], origins: list[str]) -> authority.Refusal | None:
        return authority.check(hosts, origins, self._allowed_hosts, self._allowed_origins)

    def _check_admin(self, headers: dict[str, str]) -> None:
        """/metrics and /readyz details: with tokens configured, a bearer token
        of `[http] admin_tokens`, or of `[http] tokens` when there are none."""
        tokens = self.config.http_admin_tokens or self.config.http_tokens
        if tokens:
            _bearer(headers, tokens)

    def _may_read_details(self, scope: Scope, headers: dict[str, str]) -> bool:
        try:
            self._check_host(scope, headers)
            self._check_admin(headers)
        except HttpError:
            return False
        return True

    def _principal(self, headers: dict[str, str]) -> str:
        principal = self._token_principal(headers)
        credential = headers.get("authorization")
        if self.config.http_forward_authorization and credential:
            if principal is None:
                # The upstream judges the credential: each one is a principal
                # of its own, so no two share a session or a requestState.
                digest = hashlib.sha256(credential.encode()).hexdigest()[:32]
                principal = f"credential:{digest}"
            self.service.remember_credential(principal, credential)
        # "local": the principal of the session the gateway opens at start-up,
        # so the first HTTP client does not need a process of its own.
        return principal or "local"

    def _token_principal(self, headers: dict[str, str]) -> str | None:
        tokens = self.config.http_tokens
        if not tokens:
            return None
        return _bearer(headers, tokens)

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
        body = await _read_body(receive, limit)
        try:
            msg = wire.decode(body)
        except wire.InvalidMessage as exc:
            if exc.reply is not None:
                self.metrics.count_http_error(400)
                await _respond(send, 400, exc.reply)
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
        await _respond_empty(send, 202)

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
            await _respond(
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
                headers, msg, self._tools.get(name) if isinstance(name, str) else None
            )
        if problem is not None:
            self.metrics.count_http_error(400)
            await _respond(send, 400, problem)
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
        with self._in_progress(link.principal, msg_id):
            await self._run_streamed(
                link, output, msg, receive, send, modern, extra_headers, session
            )

    @contextmanager
    def _in_progress(self, principal: str, msg_id: wire.RequestId) -> Iterator[None]:
        """Count a request against its principal's `http_max_concurrent`
        (429 beyond it), and release the count on every way out."""
        busy = self._busy.get(principal, 0)
        if busy >= self.config.http_max_concurrent:
            raise HttpError(429, "Too many requests in progress", wire.INTERNAL_ERROR, msg_id)
        self._busy[principal] = busy + 1
        try:
            yield
        finally:
            left = self._busy[principal] - 1
            if left:
                self._busy[principal] = left
            else:
                del self._busy[principal]

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
        answer = _Answer()
        try:
            stream = output.open(msg)
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
                    reply = await self._answer(stream, send, msg_id, modern, extra_headers, answer)
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
            await _respond(
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
        self._observe(reply)
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

    async def _answer(
        self,
        stream: MemoryObjectReceiveStream[wire.Message],
        send: Send,
        msg_id: wire.RequestId,
        modern: bool,
        extra_headers: Callable[[wire.Message], list[tuple[bytes, bytes]]] | None,
        answer: _Answer,
    ) -> wire.Message | None:
        try:
            first = await stream.receive()
        except anyio.EndOfStream:  # the session ended before anything came
            answer.state = "json"
            await _respond(
                send, 404, wire.error_response(msg_id, wire.INVALID_REQUEST, "Session ended")
            )
            answer.state = "done"
            return None
        if _is_reply_to(first, msg_id):
            extra = extra_headers(first) if extra_headers else []
            status = http_binding.status_for(first) if modern else 200
            refusal = http_binding.auth_refusal(first)
            if refusal is not None and self.config.http_forward_authorization:
                # The client's own credential was refused: its status and
                # challenge are the client's to see (2025-11-25 authorization).
                status, challenge = refusal
                if challenge is not None:
                    extra.append((b"www-authenticate", challenge.encode("latin-1", "replace")))
            answer.state = "json"
            await _respond(send, status, first, extra)
            answer.state = "done"
            return first
        extra = extra_headers(first) if extra_headers else []
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                    *extra,
                ],
            }
        )
        answer.state = "sse"
        msg = first
        while True:  # ends with the reply (or when the client goes)
            await send({"type": "http.response.body", "body": _sse(msg), "more_body": True})
            if _is_reply_to(msg, msg_id):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                answer.state = "done"
                return msg
            try:
                msg = await _next_or_keepalive(stream, send)
            except anyio.EndOfStream:  # the session ended under the request
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                answer.state = "done"
                return None

    def _observe(self, reply: wire.Message) -> None:
        """Remember x-mcp-header annotations from tools/list results, to
        validate Mcp-Param-* headers of later calls."""
        result = reply.get("result")
        tools = result.get("tools") if isinstance(result, dict) else None
        if isinstance(tools, list):
            for tool in tools:
                if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                    try:
                        self._tools[tool["name"]] = http_binding.tool_header_params(tool)
                    except http_binding.InvalidAnnotation:
                        # A client excludes the tool ("Schema Extension"), so
                        # no header of a call to it is one the front knows.
                        self._tools.pop(tool["name"], None)

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
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch_disconnect, receive, tg.cancel_scope)
                while True:  # ends when the client goes or the session ends
                    with anyio.move_on_after(KEEPALIVE):
                        try:
                            msg = await stream.receive()
                        except anyio.EndOfStream:
                            break
                        await send(
                            {"type": "http.response.body", "body": _sse(msg), "more_body": True}
                        )
                        continue
                    await send(
                        {
                            "type": "http.response.body",
                            "body": b": keep-alive\n\n",
                            "more_body": True,
                        }
                    )
                tg.cancel_scope.cancel()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            session.output.close_get()

    async def _delete(self, headers: dict[str, str], principal: str, send: Send) -> None:
        session_id = headers.get("mcp-session-id")
        if session_id is None:
            raise HttpError(405, "Method not allowed: no session to end")
        session = self._session(session_id, principal, None)
        self.end_session(session, "deleted by the client")
        await _respond_empty(send, 200)

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


class _Answer:
    """How far the answer to one request got: "none" sent yet, a "json"
    response being written, an "sse" stream open, or "done"."""

    state = "none"

    async def finish(self, send: Send, reply: wire.Message) -> None:
        """End the answer with `reply`: a JSON response, or the open SSE
        stream's last event."""
        if self.state == "sse":
            await send({"type": "http.response.body", "body": _sse(reply), "more_body": False})
        else:
            await _respond(send, http_binding.status_for(reply), reply)
        self.state = "done"


def _is_reply_to(msg: wire.Message, msg_id: wire.RequestId) -> bool:
    return "method" not in msg and msg.get("id") == msg_id


async def _next_or_keepalive(
    stream: MemoryObjectReceiveStream[wire.Message], send: Send
) -> wire.Message:
    """The stream's next message, with an SSE comment every KEEPALIVE seconds
    of silence so that proxies keep the response open."""
    while True:  # each pass waits KEEPALIVE at most
        with anyio.move_on_after(KEEPALIVE):
            return await stream.receive()
        await send({"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True})


def _sse(msg: wire.Message) -> bytes:
    return b"event: message\ndata: " + orjson.dumps(msg) + b"\n\n"


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _all_values(scope: Scope, name: bytes) -> list[str]:
    return [v.decode("latin-1") for k, v in scope["headers"] if k.lower() == name]


def _bearer(headers: dict[str, str], tokens: dict[str, str]) -> str:
    """The name of the bearer token the request carries, or a 401 with the
    RFC 6750 §3 challenge (`invalid_token` when a token was given)."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    challenge = f'Bearer realm="{REALM}"'
    if scheme.lower() == "bearer":
        given = token.strip().encode()
        for name, expected in tokens.items():
            if hmac.compare_digest(given, expected.encode()):
                return name
        challenge += ', error="invalid_token", error_description="The token is not valid"'
    raise HttpError(
        401,
        "Unauthorized: a valid bearer token is required",
        reason="unauthorized",
        headers=[(b"www-authenticate", challenge.encode())],
    )


async def _read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:  # ends with the last body chunk
        message = await receive()
        if message["type"] == "http.disconnect":
            raise HttpError(400, "Bad Request: the client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise HttpError(413, f"Payload Too Large: the limit is {limit} bytes", close=True)
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _respond(
    send: Send, status: int, body: Any, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    data = orjson.dumps(body)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *(extra or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def _respond_text(send: Send, status: int, text: str, ctype: str) -> None:
    data = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", ctype.encode()),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def _respond_empty(send: Send, status: int) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-length", b"0")]}
    )
    await send({"type": "http.response.body", "body": b""})
