"""Reading what an upstream HTTP server sends: the answer to a POSTed
request (one JSON body, or an SSE stream), resumption of a legacy call's
stream the server closed before the reply (2025-11-25 "Resumability and
Redelivery"), and the legacy GET stream (2025-11-25 "Listening for Messages
from the Server"). Every message is screened (core/upstream_checks) before
it is delivered; what a status or a body means is http_wire's to say."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import structlog

from gateway import wire
from gateway.backs import http_wire
from gateway.backs.http_client import Response
from gateway.backs.http_failures import HttpClientError, describe
from gateway.backs.http_session import Deliver, HttpSession
from gateway.backs.http_wire import SseParser
from gateway.core import backoff, upstream_checks
from gateway.log_limit import LogLimiter

log = structlog.get_logger("gateway.backs.http")

# A legacy GET stream that ended or broke is reopened after this, or after the
# server's `retry` hint, doubling while it keeps failing (core/backoff).
_GET_RETRY_FIRST = 1.0
_GET_RETRY_MAX = 30.0
# A legacy call's stream that the server closed before the reply is resumed
# with GET + Last-Event-ID after the server's `retry` hint, this long without
# one, and never longer than the cap: a call must not sit out minutes because
# a server asked it to.
_RESUME_DELAY = 1.0
_RESUME_DELAY_MAX = 3.0
# Resumptions in a row that bring no new event before the call fails: a
# server that keeps closing an empty stream is not making progress.
_MAX_IDLE_RESUMES = 3


@dataclass(slots=True)
class HttpRefusal:
    """A request the server did not answer with a JSON-RPC reply of its own
    making: `reply` is what the caller will see; `status` is None when the
    exchange failed below HTTP."""

    reply: wire.Message
    status: int | None


@dataclass(slots=True)
class StreamCursor:
    """Where a call's SSE stream got to: the last event id (what a resumption
    asks to continue after), the server's latest `retry` hint in ms, and how
    many events came (to tell a resumption that brought something from one
    that did not)."""

    last_id: str | None = None
    retry_ms: int | None = None
    events: int = 0

    def saw(self, event: http_wire.SseEvent) -> None:
        self.events += 1
        if event.id is not None:
            self.last_id = event.id or None  # an empty id resets it (WHATWG)
        if event.retry is not None:
            self.retry_ms = event.retry


class StreamReader:
    """Reads the bodies and event streams of one upstream session.

    `answer_server` sends our answer to a malformed server request;
    `session_gone` ends the session (404 on its id); `sleep` waits out a
    retry delay (the connection's, which tests replace)."""

    def __init__(
        self,
        session: HttpSession,
        max_bytes: int,
        *,
        answer_server: Callable[[wire.Message], None],
        session_gone: Callable[[str], None],
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self._session = session
        self._max_bytes = max_bytes
        self._answer_server = answer_server
        self._session_gone = session_gone
        self._sleep = sleep
        # A server that sends junk in a loop gets one log line a minute.
        self._junk_log = LogLimiter(log)
        # A server whose streams cannot be resumed gets one warning a minute.
        self._resume_log = LogLimiter(log)

    # -- the answer to a POSTed request ------------------------------------------------
    def json_reply(
        self, msg_id: wire.RequestId, status: int, ctype: str, body: bytes, deliver: Deliver
    ) -> HttpRefusal | None:
        """Deliver the messages of a 2xx answer's whole body (not an event
        stream); the refusal its caller gets if they hold no reply to it."""
        answer = http_wire.json_answer(msg_id, status, ctype, body)
        if not isinstance(answer, list):
            return HttpRefusal(answer, None)
        got_reply = False
        for outcome in answer:
            message = self.decode(outcome, body)
            if message is not None:
                got_reply |= "method" not in message and message.get("id") == msg_id
                deliver(message)
        if got_reply:
            return None
        return HttpRefusal(http_wire.failure_reply(msg_id, "body holds no reply"), None)

    def answer_events(
        self,
        msg_id: wire.RequestId,
        deliver: Deliver,
        settled: Callable[[HttpRefusal | None], None],
        resume: Callable[[Callable[[], Awaitable[HttpRefusal | None]]], None],
    ) -> AnswerEvents:
        """A 2xx event stream answering request `msg_id`, read in the
        connection's callbacks (http_connection): what it came to goes to
        `settled`, or a resumption to `resume` (to run in a task)."""
        return AnswerEvents(self, msg_id, deliver, settled, resume)

    async def read_events(
        self,
        resp: Response,
        deliver: Deliver,
        until: wire.RequestId | None = None,
        cursor: StreamCursor | None = None,
    ) -> bool:
        """Deliver each message of an SSE stream; True once the reply to
        `until` came. `cursor` follows the event ids and retry hints."""
        parser = SseParser(self._max_bytes)
        track = cursor.saw if cursor is not None else _ignore
        chunks = resp.aiter_bytes()
        got = False
        async for chunk in chunks:
            for event in parser.feed(chunk):
                track(event)
                got = self.handle_event(event, deliver, until) or got
            if got:
                break
        if not got:
            last = parser.close()
            for event in last:
                track(event)
            return any([self.handle_event(event, deliver, until) for event in last])
        # The server ends the stream after the reply: read that end, so the
        # connection goes back to the pool, but do not wait on one that lingers.
        with anyio.move_on_after(0.2):
            async for _ in chunks:
                pass
        return True

    # -- resumption (2025-11-25 "Resumability and Redelivery") -------------------------
    async def _resume(
        self, msg_id: wire.RequestId, cursor: StreamCursor, deliver: Deliver
    ) -> HttpRefusal | None:
        """The server closed a legacy call's stream before the reply (a
        disconnect is not a cancellation), so GET it again from the last
        event id, as often as it closes, and deliver what comes as the
        original stream's messages. Bounded by the call's own scope (timeout,
        cancel) and by `_MAX_IDLE_RESUMES` resumptions in a row that bring no
        new event."""
        idle = 0
        while True:  # each pass reopens the stream once; ends as the docstring says
            if cursor.last_id is None:
                why = "stream ended without a reply"
                return HttpRefusal(http_wire.failure_reply(msg_id, why), None)
            if idle >= _MAX_IDLE_RESUMES:
                why = f"it ended {idle} times in a row with nothing new"
                return self._resume_failed(msg_id, why)
            hint = cursor.retry_ms / 1000 if cursor.retry_ms is not None else _RESUME_DELAY
            delay = min(hint, _RESUME_DELAY_MAX)
            log.debug("upstream stream resumed", id=msg_id, after=cursor.last_id, delay=delay)
            await self._sleep(delay)
            headers = self._session.stream_headers(last_event_id=cursor.last_id)
            before = cursor.events
            try:
                async with self._session.client.stream(
                    "GET", self._session.url, headers=headers, timeout=self._session.stream_timeout
                ) as resp:
                    status = resp.status_code
                    outcome = http_wire.get_outcome(
                        status, resp.headers.get("content-type", ""), "Mcp-Session-Id" in headers
                    )
                    if outcome == http_wire.STREAM:
                        if await self.read_events(resp, deliver, until=msg_id, cursor=cursor):
                            return None
                    else:
                        await self.read_body(resp)  # read, so the connection is reused
                    if outcome == http_wire.SESSION_GONE:
                        # Fails this call too, as every pending one.
                        self._session_gone("session ended by the server (HTTP 404 on GET)")
                        return None
                    if outcome in (http_wire.GET_REFUSED, http_wire.NO_GET_STREAM):
                        return self._resume_failed(msg_id, f"GET answered HTTP {status}", status)
                    # A 5xx is an outage, not a refusal: tried again, as an idle pass.
            except HttpClientError as exc:
                log.debug("upstream stream resumption broke", id=msg_id, error=describe(exc))
            idle = 0 if cursor.events > before else idle + 1

    def _resume_failed(
        self, msg_id: wire.RequestId, why: str, status: int | None = None
    ) -> HttpRefusal:
        self._resume_log.warning("upstream stream not resumed", url=self._session.url, reason=why)
        # No status for the caller to judge: a refused GET is no verdict on the POST.
        return HttpRefusal(http_wire.resume_failed_reply(msg_id, why, status), None)

    # -- the legacy GET stream ---------------------------------------------------------
    async def listen(self, deliver: Deliver, ended: Callable[[], bool]) -> None:
        """Read the session's GET stream, reopened as often as it ends or
        breaks, until the session is over or the server offers none."""
        failures = 0  # ends of the stream since it last opened
        hint: float | None = None  # the server's `retry`, in seconds
        while not ended():  # each pass opens the stream once
            headers = self._session.stream_headers()
            try:
                async with self._session.client.stream(
                    "GET", self._session.url, headers=headers, timeout=self._session.stream_timeout
                ) as resp:
                    status = resp.status_code
                    ctype = resp.headers.get("content-type", "")
                    outcome = http_wire.get_outcome(status, ctype, "Mcp-Session-Id" in headers)
                    if outcome == http_wire.NO_GET_STREAM:
                        log.debug("upstream offers no GET stream", url=self._session.url)
                        return
                    if outcome == http_wire.SESSION_GONE:
                        self._session_gone("session ended by the server (HTTP 404 on GET)")
                        return
                    if outcome == http_wire.GET_REFUSED:
                        log.warning("upstream GET stream refused", status=status, ctype=ctype)
                        return
                    if outcome == http_wire.STREAM:
                        failures, hint = 0, None
                        parser = SseParser(self._max_bytes)
                        async for chunk in resp.aiter_bytes():
                            for event in parser.feed(chunk):
                                if event.retry is not None:
                                    hint = event.retry / 1000
                                self.handle_event(event, deliver, None)
            except HttpClientError as exc:
                log.debug("upstream GET stream broke", error=describe(exc))
            failures += 1
            first = _GET_RETRY_FIRST if hint is None else hint
            # Never sooner than the server asked, even past our own cap.
            await self._sleep(backoff.delay(failures, first, max(first, _GET_RETRY_MAX)))

    # -- one message ---------------------------------------------------------------------
    def handle_event(
        self, event: http_wire.SseEvent, deliver: Deliver, until: wire.RequestId | None
    ) -> bool:
        """Deliver the message an SSE event carries; True if it is the reply to `until`."""
        if event.event != "message" or not event.data.strip():
            return False  # priming events (an id, empty data), retry hints
        message = self.decode(upstream_checks.screen_line(event.data), event.data)
        if message is None:
            return False
        deliver(message)
        return until is not None and "method" not in message and message.get("id") == until

    def decode(
        self, outcome: wire.Message | upstream_checks.Refused, raw: bytes | str
    ) -> wire.Message | None:
        """A screened message, or what stands in for a refused one: the error
        for the call it names (None if it names none). A malformed request of
        the server's is answered here."""
        if not isinstance(outcome, upstream_checks.Refused):
            return outcome
        self._junk_log.warning(
            "upstream sent a malformed message",
            reason=outcome.reason,
            data=raw[:200] if isinstance(raw, str) else raw[:200].decode("utf-8", "replace"),
            url=self._session.url,
        )
        if outcome.to_server is not None:
            self._answer_server(outcome.to_server)
        return outcome.to_call

    # -- bodies --------------------------------------------------------------------------
    def reply_over_limit(self, msg_id: wire.RequestId, size: int) -> HttpRefusal:
        """The refusal a caller gets when the reply's body is over the size limit."""
        self._junk_log.warning(
            "upstream HTTP body over the size limit dropped", size=size, url=self._session.url
        )
        why = f"the reply is over the {self._max_bytes}-byte message limit"
        return HttpRefusal(upstream_checks.malformed_reply(msg_id, why), None)

    def body_over_limit(self, size: int) -> None:
        log.warning("upstream HTTP body over the size limit dropped", size=size)

    async def read_body(self, resp: Response) -> bytes | None:
        """The body, or None if it is over the message size limit (or breaks)."""
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > self._max_bytes:
                    self.body_over_limit(size)
                    return None
                chunks.append(chunk)
        except HttpClientError:
            return None
        return b"".join(chunks)


def _ignore(event: http_wire.SseEvent) -> None:
    return None


class AnswerEvents:
    """A 2xx event stream answering a request, fed chunk by chunk from the
    callbacks of the connection that reads it, with no task unless the
    stream must be resumed (2025-11-25 "Resumability and Redelivery"; a
    modern exchange is never resumed, 2026-07-28 changelog 9, SEP-2575).
    After the reply the rest of the stream is not looked at."""

    __slots__ = (
        "_cursor",
        "_deliver",
        "_msg_id",
        "_parser",
        "_reader",
        "_resume",
        "_settled",
        "got",
    )

    def __init__(
        self,
        reader: StreamReader,
        msg_id: wire.RequestId,
        deliver: Deliver,
        settled: Callable[[HttpRefusal | None], None],
        resume: Callable[[Callable[[], Awaitable[HttpRefusal | None]]], None],
    ) -> None:
        self._reader = reader
        self._msg_id = msg_id
        self._deliver = deliver
        self._settled = settled
        self._resume = resume
        self._parser = SseParser(reader._max_bytes)
        self._cursor = StreamCursor()
        self.got = False

    def feed(self, chunk: bytes) -> bool:
        """Deliver the events `chunk` completes; True once the reply came."""
        if not self.got:
            self._take(self._parser.feed(chunk))
        return self.got

    def end(self, error: str | None) -> None:
        """The stream ended (`error`: it broke, and why)."""
        if self.got:
            return
        if error is None:
            self._take(self._parser.close())
            if self.got:
                return
        reader, cursor, msg_id = self._reader, self._cursor, self._msg_id
        if cursor.last_id is None or reader._session.session_id is None:
            why = error if error is not None else "stream ended without a reply"
            self._settled(HttpRefusal(http_wire.failure_reply(msg_id, why), None))
            return
        if error is not None:
            log.debug("upstream stream broke", id=msg_id, error=error)
        deliver = self._deliver

        async def resumed() -> HttpRefusal | None:
            return await reader._resume(msg_id, cursor, deliver)

        self._resume(resumed)

    def _take(self, events: list[http_wire.SseEvent]) -> None:
        # Every event of the chunk, as read_events delivers them, then the outcome.
        got = False
        for event in events:
            self._cursor.saw(event)
            got = self._reader.handle_event(event, self._deliver, self._msg_id) or got
        if got:
            self.got = True
            self._settled(None)
