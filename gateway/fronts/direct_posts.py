"""A POST /mcp answered without a task: the common call, shaped like stdio.

The front's own server (limited_protocol.py) offers each POST whose whole
body is in before it starts an ASGI task for it. The plain case — a request
of a modern client or of a known legacy session, every check passed — goes
upstream at once, and its reply, when that comes first, is written from the
upstream reader's callback in one write: no task, no scope, no Event. Every
other request is declined and runs as an ASGI request like any other, which
also answers every refusal; so the checks here only decide, they never
answer. A call whose answer turns out to need waiting (something before its
reply, the 2025-11-25 priming time, the end of the shutdown grace) hands the
rest to a task running the same code as every ASGI call (HttpCalls.answer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

import structlog

from gateway import wire
from gateway.core import http_binding, http_posts, http_requests
from gateway.core.http_posts import PostKind
from gateway.fronts.asgi import ClientGone, Receive, Scope, Send
from gateway.fronts.http_access import HttpAccess
from gateway.fronts.http_answers import HttpError, headers_of, is_reply_to
from gateway.fronts.http_calls import HttpCall, HttpCalls
from gateway.fronts.http_output import http_link
from gateway.fronts.http_sessions import HttpSessions
from gateway.fronts.port import GatewayPort
from gateway.log_limit import LogLimiter

ENDPOINT = "/mcp"
TEXT_HEADERS = ((b"content-type", b"text/plain; charset=utf-8"),)
log = structlog.get_logger("gateway.fronts.http")
failed_log = LogLimiter(log)


class App(Protocol):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None: ...


class DirectAnswer(Protocol):
    """What the server gives a request it offers: its way to answer."""

    gone: ClientGone

    def respond(self, status: int, headers: Sequence[tuple[bytes, bytes]], body: bytes) -> None:
        """Write the whole response now (Content-Length added)."""

    def hand_over(self, app: App) -> None:
        """Answer the rest as an ASGI request, in a task, through `app`."""


class DirectPosts:
    def __init__(
        self,
        service: GatewayPort,
        access: HttpAccess,
        calls: HttpCalls,
        sessions: HttpSessions,
        tools: http_binding.ToolHeaderCache,
    ) -> None:
        self.service = service
        self.access = access
        self.calls = calls
        self.sessions = sessions
        self.queues = sessions.queues
        self.tools = tools
        self.limit = service.config.max_message_bytes
        self._prime_after = calls.streams.prime_after
        self.live: set[DirectCall] = set()
        # The 2025-11-25 calls among them, oldest first, and the one timer for their priming time.
        self._priming: dict[DirectCall, None] = {}
        self._priming_timer: asyncio.TimerHandle | None = None
        self._holding = False  # upstream writes held until the end of this loop step

    def offered(self, scope: Scope) -> bool:
        """Whether a request of this head may be offered once its body is in."""
        return bool(scope["method"] == "POST" and scope["path"] == ENDPOINT)

    def take(self, scope: Scope, body: bytes, answer: DirectAnswer) -> bool:
        """Send the request upstream and answer it here, if it is the plain
        case; False leaves it, untouched, to the ASGI front."""
        calls = self.calls
        if calls.cut_off_now or len(body) > self.limit:
            return False
        headers = headers_of(scope)
        try:
            self.access.check_host(scope, headers)
            principal = self.access.principal(headers)
        except HttpError:
            return False
        if http_requests.post_refusal(headers, self.limit) is not None:
            return False
        post = http_posts.classify(headers, body, self.tools)
        msg = post.msg
        assert calls.tg is not None
        try:
            if post.kind is PostKind.MODERN_CALL:
                assert msg is not None
                output, link = http_link(self.queues, principal)
                call = calls.open(link, output, msg, True, None, None, answer.gone)
                self.service.links.add(link)
            elif post.kind is PostKind.LEGACY_CALL and post.session_id is not None:
                assert msg is not None
                session = self.sessions.find(post.session_id, principal, msg.get("id"))
                call = calls.open(
                    session.link, session.output, msg, False, None, session, answer.gone
                )
            else:
                return False  # refused, an initialize, a delivery: the ASGI front's
        except HttpError:
            return False
        direct = DirectCall(self, call, answer)
        if call.session is not None and call.session.resumable:
            # 2025-11-25: past the priming time the answer becomes a stream.
            self._priming[direct] = None
            if self._priming_timer is None:
                self._prime_at(direct, answer.gone.loop)
        call.inbox.direct = direct
        answer.gone.listener = direct.on_gone
        if self.live and not self._holding:
            self._hold_writes(answer.gone.loop)
        self.live.add(direct)
        self.service.take_request(call.link, msg, calls.tg)
        return True

    def _hold_writes(self, loop: asyncio.AbstractEventLoop) -> None:
        """Calls in flight: hold what goes upstream until every connection
        ready in this step of the loop has been read, then write it in one
        go (one pipe write and one wake-up of the server for them all, not
        one each). A lone call (nothing in flight) goes at once: holding it
        would only add a step of the loop to its latency."""
        self._holding = True
        self.service.hold_upstream_writes()
        loop.call_soon(self._release_writes)

    def _release_writes(self) -> None:
        self._holding = False
        self.service.release_upstream_writes()

    def _prime_at(self, direct: DirectCall, loop: asyncio.AbstractEventLoop) -> None:
        due = direct.call.since + self._prime_after
        self._priming_timer = loop.call_at(due, self._prime_due, loop)

    def _prime_due(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand over the calls past their priming time, oldest first; then
        wait for the next one's (one timer for them all: most calls end long
        before, and a timer each would cost every call)."""
        self._priming_timer = None
        now = loop.time()
        for direct in list(self._priming):  # oldest first
            if direct.call.since + self._prime_after > now:
                self._prime_at(direct, loop)
                return
            direct.hand_over()

    def forget(self, direct: DirectCall) -> None:
        self.live.discard(direct)
        self._priming.pop(direct, None)

    def failed(self, exc: Exception) -> None:
        """A defect while taking a request (the server answers it 500)."""
        failed_log.warning("HTTP request failed in the gateway", error=repr(exc)[:300])

    def cut_off(self) -> None:
        """The shutdown grace is over: each call answers the way every ASGI
        call does then (a gateway error)."""
        for direct in list(self.live):
            direct.hand_over()


class DirectCall:
    """One call taken by DirectPosts, until its answer is written or handed over."""

    __slots__ = ("answer", "call", "done", "posts")

    def __init__(self, posts: DirectPosts, call: HttpCall, answer: DirectAnswer) -> None:
        self.posts = posts
        self.call = call
        self.answer = answer
        self.done = False

    def take(self, msg: wire.Message) -> bool:
        """The call's inbox offers `msg` here first: its reply, answered now;
        anything else hands over (and is queued for the task)."""
        try:
            return self._on_message(msg)
        # A defect here must not reach the upstream's reader: the client gets a 500.
        except Exception as exc:
            self.fail(exc)
            return True

    def fail(self, exc: Exception) -> None:
        """A defect in answering: 500, as uvicorn answers an app's exception,
        in one log line (limited) instead of a traceback."""
        failed_log.warning(
            "HTTP call failed in the gateway", error=repr(exc)[:300], method=self.call.msg["method"]
        )
        first = not self.done
        self._leave()
        self.answer.respond(500, TEXT_HEADERS, b"Internal Server Error")
        if first:
            self._close()

    def _on_message(self, msg: wire.Message) -> bool:
        if self.done:
            return False
        if is_reply_to(msg, self.call.msg["id"]):
            calls = self.posts.calls
            whole = calls.whole_answer(self.call, msg)
            if whole is not None:
                self._leave()
                self.answer.respond(whole.status, whole.headers, whole.body)
                calls.observe(self.call, msg)
                self._close()
                return True
        self.hand_over()
        return False

    def on_gone(self) -> None:
        """The client left before the reply: the call is cancelled upstream
        (2026-07-28 basic/patterns/cancellation; for a 2025-11-25 session,
        nothing was sent that it could resume)."""
        if self.done:
            return
        self._leave()
        call = self.call
        try:
            self.posts.service.cancel_request(call.link, call.msg["id"])
        finally:
            self._close()

    def closed(self) -> None:
        """The inbox closed under the call (its session ended): the task
        answers that as every call does."""
        self.hand_over()

    def hand_over(self) -> None:
        if self.done:
            return
        self._leave()
        call, calls = self.call, self.posts.calls

        async def rest(scope: Scope, receive: Receive, send: Send) -> None:
            try:
                await calls.answer(call, receive, send)
            finally:
                self._close()

        self.answer.hand_over(rest)

    def _leave(self) -> None:
        self.done = True
        self.call.inbox.direct = None
        self.answer.gone.listener = None
        self.posts.forget(self)

    def _close(self) -> None:
        call = self.call
        self.posts.calls.close(call)
        if call.modern:
            self.posts.service.drop_link(call.link)
