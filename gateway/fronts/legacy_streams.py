"""Resumable SSE answers for the requests of 2025-11-25 sessions.

2025-11-25 basic/transports ("Sending Messages to the Server", "Resumability
and Redelivery", SEP-1699): a request of such a session is answered on an SSE
stream primed with an event id and a `retry` hint. A client that loses the
stream, or whose stream the gateway closes after `[http] sse_poll_after`,
resumes it with GET and `Last-Event-ID`; the call goes on meanwhile, for at
most `[http] sse_resume_window` without a client attached, then it is
cancelled upstream. Older sessions keep the cancel-on-close answers of the
HTTP front (they have no way to resume).

Fast replies cost no extra write: the priming event waits until the answer
turns into a stream (something comes before the reply, or PRIME_AFTER
passes), and a reply that comes first goes out with it in one body.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import orjson
import structlog

from gateway import wire
from gateway.fronts.asgi import ClientGone, Receive, Send, chunk, sse_start, watch_disconnect
from gateway.fronts.http_output import Inbox, Out
from gateway.fronts.resumable_stream import (
    ResumableStream,
    message_event,
    parse_event_id,
    priming_event,
)
from gateway.log_limit import LogLimiter
from gateway.loop_clock import LazyClock

log = structlog.get_logger("gateway.fronts.http")
abandoned_log = LogLimiter(log)

# The first version whose clients take priming events (an id, empty data).
RESUMABLE_FROM = "2025-11-25"
PRIME_AFTER = 1.0
KEEPALIVE = 15.0
# Ended streams a session keeps for a client to collect, beyond those of calls in progress.
KEEP_ENDED = 64


def resumable(version: str | None) -> bool:
    return version is not None and version >= RESUMABLE_FROM


@dataclass(eq=False)
class SessionStreams:
    """A session's streams that a client may resume, by stream id."""

    live: dict[str, ResumableStream] = field(default_factory=dict)
    _opened: int = 0

    def new(self) -> ResumableStream:
        """A stream with the session's next id, not yet resumable: most
        answers are whole in one write and never need to be."""
        return ResumableStream(self.next_id())

    def next_id(self) -> str:
        self._opened += 1
        return str(self._opened)

    def keep(self, stream: ResumableStream) -> None:
        """Make `stream` resumable; past KEEP_ENDED uncollected ended streams,
        the oldest go (scanned only when there can be that many)."""
        self.live[stream.stream_id] = stream
        if len(self.live) > KEEP_ENDED:
            ended = [s for s in self.live.values() if s.ended and not s.attached]
            for old in ended[: max(0, len(ended) - KEEP_ENDED)]:
                self.forget(old)

    def forget(self, stream: ResumableStream) -> None:
        self.live.pop(stream.stream_id, None)

    def sweep(self, now: float, window: float) -> None:
        """Drop ended streams nobody collected within `window`."""
        for stream in list(self.live.values()):
            left = stream.detached_at
            if stream.ended and left is not None and now - left > window:
                self.forget(stream)


@dataclass(frozen=True, slots=True)
class WholeAnswer:
    """A response written in one piece: status, headers (less the length), body."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


SSE_HEADERS = ((b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"))


@dataclass(frozen=True, slots=True)
class Outcome:
    reply: wire.Message | None  # what the client got last, if anything
    cancel_upstream: bool  # the call did not end upstream: cancel it there


class LegacyStreams:
    def __init__(
        self,
        *,
        retry: float,
        poll_after: float,
        window: float,
        waits: set[anyio.CancelScope],
        cut_off: Callable[[], bool],
        firsts: set[Inbox] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._retry_ms = max(0, round(retry * 1000))
        self._poll_after = poll_after if poll_after > 0 else math.inf
        self._prime_after = min(PRIME_AFTER, self._poll_after)
        # When a POST's answer without any message yet becomes a primed stream.
        self.prime_after = self._prime_after
        self.window = window
        # The waits cut at the end of the shutdown grace (the front's): with
        # a scope, or on an inbox's first message.
        self._waits = waits
        self._firsts: set[Inbox] = set() if firsts is None else firsts
        self._cut_off = cut_off
        self._clock = LazyClock() if clock is None else clock

    # -- POST: a request of the session --------------------------------------------------
    async def answer(
        self,
        streams: SessionStreams,
        inbox: Inbox,
        msg_id: wire.RequestId,
        receive: Receive,
        send: Send,
        gone: ClientGone | None = None,
        since: float | None = None,
    ) -> Outcome | None:
        """Answer one request; None when the session ended before anything
        came (the caller answers 404). `gone`: the server's word when the
        client leaves, if it gives one (else a watcher waits for it);
        `since`: when the request came (the clock's), if not now."""
        first: Out | None = None
        waited = ended = False
        now = self._clock()
        since = now if since is None else since
        # The poll time runs from the request: the POST's response is held no longer.
        poll_at = since + self._poll_after
        prime_at = since + self._prime_after
        if not self._cut_off():
            self._firsts.add(inbox)
            try:
                first = await inbox.first(max(0.0, prime_at - now), gone)
            except anyio.EndOfStream:
                return None
            finally:
                self._firsts.discard(inbox)
            if first is None and gone is not None and gone.gone:
                return Outcome(None, cancel_upstream=True)  # nothing sent: nothing to resume
        if first is None:
            async with anyio.create_task_group() as tg:
                self._waits.add(tg.cancel_scope)
                try:
                    if self._cut_off():
                        tg.cancel_scope.cancel()
                    tg.start_soon(watch_disconnect, receive, tg.cancel_scope)
                    with anyio.move_on_after(prime_at - self._clock()) as timer:
                        try:
                            first = await inbox.get()
                        except anyio.EndOfStream:
                            ended = True
                    waited = timer.cancelled_caught
                    tg.cancel_scope.cancel()
                finally:
                    self._waits.discard(tg.cancel_scope)
        if ended:
            return None
        stream = streams.new()
        if self._cut_off():
            stream.cut_off = True
            stream.end(_shutdown_error(msg_id))
        elif first is not None:
            stream.record(*first)
        elif not waited:  # the client left before anything was sent: nothing to resume
            return Outcome(None, cancel_upstream=True)
        attachment = stream.attach()
        data = stream.priming(self._retry_ms) + b"".join(e for _, e in stream.after(0))
        if stream.ended:  # the usual case: the reply came first, all in one write
            await send(sse_start((b"content-length", b"%d" % len(data))))
            await send(chunk(data, more=False))
            return Outcome(stream.reply, cancel_upstream=stream.reply is None or stream.cut_off)
        streams.keep(stream)
        await send(sse_start())
        await send(chunk(data, more=True))
        async with anyio.create_task_group() as call:
            call.start_soon(self._pump, inbox, stream, msg_id)
            if await self._write(stream, attachment, stream.last_seq, receive, send, poll_at):
                streams.forget(stream)
            await self._await_end(stream)
            call.cancel_scope.cancel()
        if not stream.ended:
            abandoned_log.info(
                "a call's stream was not resumed in time: cancelled upstream",
                window=self.window,
                stream=stream.stream_id,
            )
            streams.forget(stream)
            stream.end()
            return Outcome(None, cancel_upstream=True)
        return Outcome(stream.reply, cancel_upstream=stream.reply is None or stream.cut_off)

    def whole_answer(self, streams: SessionStreams, reply: wire.Message) -> WholeAnswer:
        """A request's answer when its reply came first: the SSE stream
        answer() writes then, primed and whole (the front's own server
        writes it at once)."""
        stream_id = streams.next_id()
        data = priming_event(stream_id, 0, self._retry_ms) + message_event(
            stream_id, 1, orjson.dumps(reply)
        )
        return WholeAnswer(200, SSE_HEADERS, data)

    async def _pump(
        self,
        inbox: Inbox,
        stream: ResumableStream,
        msg_id: wire.RequestId,
    ) -> None:
        """Record the call's messages until its reply (or the session's end);
        at the end of the shutdown grace, record the gateway's error instead."""
        with anyio.CancelScope() as scope:
            self._waits.add(scope)
            try:
                if self._cut_off():
                    scope.cancel()
                while not stream.ended:  # ends with the reply
                    stream.record(*await inbox.get())
            except anyio.EndOfStream:  # the session ended under the call
                stream.end()
            finally:
                self._waits.discard(scope)
        if scope.cancelled_caught:
            stream.cut_off = True
            stream.end(_shutdown_error(msg_id))

    async def _await_end(self, stream: ResumableStream) -> None:
        """Until the stream ends, or stays without a client for the window."""
        while not stream.ended:  # each pass waits for news or the rest of the window
            if stream.attached or stream.detached_at is None:
                await stream.news()
                continue
            left = self.window - (self._clock() - stream.detached_at)
            if left <= 0:
                return
            with anyio.move_on_after(left):
                await stream.news()

    # -- GET with Last-Event-ID: a client resumes -----------------------------------------
    async def resume(
        self, streams: SessionStreams, last_event_id: str, receive: Receive, send: Send
    ) -> bool:
        """Go on with the stream the id names; False if this session has none
        to resume there (it ended and was collected, expired, or never was)."""
        parsed = parse_event_id(last_event_id)
        stream = streams.live.get(parsed[0]) if parsed is not None else None
        if parsed is None or stream is None:
            return False
        await send(sse_start())
        after = min(parsed[1], stream.last_seq)
        await send(chunk(stream.priming(self._retry_ms, after), more=True))
        attachment = stream.attach()
        log.debug("stream resumed", stream=stream.stream_id, after=parsed[1])
        if await self._write(stream, attachment, after, receive, send):
            streams.forget(stream)
        return True

    # -- writing -------------------------------------------------------------------------
    async def _write(
        self,
        stream: ResumableStream,
        attachment: int,
        sent: int,
        receive: Receive,
        send: Send,
        poll_at: float | None = None,
    ) -> bool:
        """Write the stream's events after `sent` to this response until the
        stream ends (True), the client leaves, the poll time passes, or
        another response takes over; then end this response."""
        deadline = self._clock() + self._poll_after if poll_at is None else poll_at
        finished = closed = False
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch_disconnect, receive, tg.cancel_scope)
                while stream.writes(attachment):  # ends with the stream, the poll time, a takeover
                    events = stream.after(sent)
                    if events:
                        sent = events[-1][0]
                        finished = closed = stream.ended and sent >= stream.last_seq
                        await send(chunk(b"".join(e for _, e in events), more=not finished))
                        if finished:
                            break
                        continue
                    if stream.ended:
                        finished = True
                        break
                    wait = min(KEEPALIVE, deadline - self._clock())
                    if wait <= 0:
                        log.debug("stream closed for polling", stream=stream.stream_id)
                        break
                    with anyio.move_on_after(wait) as timer:
                        await stream.news()
                    if timer.cancelled_caught and self._clock() < deadline:
                        await send(chunk(b": keep-alive\n\n", more=True))
                if not closed:
                    await send(chunk(b"", more=False))
                tg.cancel_scope.cancel()
        finally:
            if not finished:
                stream.detach(attachment, self._clock())
        return finished


def _shutdown_error(msg_id: wire.RequestId) -> wire.Message:
    return wire.gateway_error(
        msg_id, wire.INTERNAL_ERROR, "The gateway is shutting down", reason="shutdown"
    )
