"""Where a client's messages go over HTTP: each request's own response
stream, or the legacy session's GET stream.

A modern POST is one request and one stream. A legacy session has many: a
reply goes to the stream of its request; a server request or notification
goes to the stream of the call it belongs to when that is known (the task's
CURRENT_REQUEST, a progress token), else to the session's GET stream, else to
the one open POST stream.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from typing import Any, Protocol

import anyio
import structlog

from gateway import wire
from gateway.client_link import CURRENT_REQUEST, ClientLink
from gateway.fronts.asgi import ClientGone
from gateway.log_limit import LogLimiter

log = structlog.get_logger("gateway.fronts.http")
# A client that reads its stream slowly while the server sends notifications
# fast must not make the gateway queue without end: past this many messages
# waiting on one stream, its notifications (progress, logs, list changes) are
# dropped, counted in the log; replies and server requests always go through.
MAX_QUEUED = 1024
# On a server that cannot tell when a client leaves: how long a response
# waits for its first message before it also watches for that (a task of its
# own, which most calls, answered sooner, need not pay for); a client gone
# meanwhile is seen this much later.
QUICK = 0.05
dropped_log = LogLimiter(log)


class DirectReader(Protocol):
    """Reads an inbox without waiting on it (fronts/direct_posts.py)."""

    def take(self, msg: wire.Message) -> bool:
        """Whether it took `msg` (else it is queued)."""

    def closed(self) -> None:
        """The inbox closed (e.g. its session ended)."""


class Inbox:
    """The messages on their way to one response, in order: a queue and a
    wake-up, the least a waiting response can cost (a call answered at once
    is most calls; an anyio memory stream costs it several times more).
    Written by the service's callbacks, read by the one response."""

    __slots__ = ("_event", "_future", "_interrupted", "_items", "closed", "direct")

    def __init__(self) -> None:
        # Takes each message first when set; those it declines are queued.
        self.direct: DirectReader | None = None
        self._items: deque[wire.Message] = deque()
        self._event: anyio.Event | None = None  # get()'s wait
        self._future: asyncio.Future[None] | None = None  # first()'s wait
        self._interrupted = False
        self.closed = False

    def __len__(self) -> int:
        return len(self._items)

    def put(self, msg: wire.Message) -> bool:
        """Queue `msg`; False once the inbox is closed (nobody reads it)."""
        if self.closed:
            return False
        direct = self.direct
        if direct is not None and direct.take(msg):
            return True
        self._items.append(msg)
        self._wake()
        return True

    def close(self) -> None:
        """No more messages: the reader gets what is queued, then EndOfStream."""
        self.closed = True
        if self.direct is not None:
            self.direct.closed()
        self._wake()

    def interrupt(self) -> None:
        """End first()'s wait with None (the shutdown grace is over)."""
        self._interrupted = True
        self._wake()

    def _wake(self) -> None:
        if self._event is not None:
            self._event.set()
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)

    def get_nowait(self) -> wire.Message | None:
        return self._items.popleft() if self._items else None

    async def get(self) -> wire.Message:
        """The next message; anyio.EndOfStream once closed and drained."""
        while not self._items:  # each pass waits for a put or the close
            if self.closed:
                raise anyio.EndOfStream
            self._event = event = anyio.Event()
            try:
                await event.wait()
            finally:
                self._event = None
        return self._items.popleft()

    async def first(self, timeout: float, gone: ClientGone | None) -> wire.Message | None:
        """The first message; None when `timeout` passes, the client leaves
        (`gone.gone`) or interrupt() is called; anyio.EndOfStream when the
        inbox closes first.

        With `gone` (the front's own server tells when the client leaves)
        this waits on the server's loop, with no task watching the client:
        the cost of most calls. Without it, at most QUICK: the caller waits
        on with a watcher."""
        if self._items:
            return self._items.popleft()
        if self.closed:
            raise anyio.EndOfStream
        if gone is None:
            with anyio.move_on_after(min(timeout, QUICK)):
                return await self.get()
            return None
        if gone.gone or self._interrupted:
            return None
        loop = gone.loop
        self._future = future = loop.create_future()
        timer = loop.call_later(timeout, self._wake) if timeout < math.inf else None
        gone.listener = self._wake
        try:
            await future
        finally:
            self._future = None
            gone.listener = None
            if timer is not None:
                timer.cancel()
        if self._items:
            return self._items.popleft()
        if self.closed:
            raise anyio.EndOfStream
        return None


class HttpOutput:
    def __init__(self) -> None:
        self.streams: dict[wire.RequestId, Inbox] = {}
        self.tokens: dict[Any, wire.RequestId] = {}
        self.get_stream: Inbox | None = None

    def open(self, msg: wire.Message) -> Inbox:
        inbox = self.streams[msg["id"]] = Inbox()
        meta = (msg.get("params") or {}).get("_meta")
        if isinstance(meta, dict) and "progressToken" in meta:
            self.tokens[meta["progressToken"]] = msg["id"]
        return inbox

    def close(self, msg_id: wire.RequestId) -> None:
        stream = self.streams.pop(msg_id, None)
        if stream is not None:
            stream.close()
        if self.tokens:
            for token, owner in list(self.tokens.items()):
                if owner == msg_id:
                    del self.tokens[token]

    def open_get(self) -> Inbox | None:
        if self.get_stream is not None:
            return None  # 2025-11-25: one GET stream per session at a time
        self.get_stream = inbox = Inbox()
        return inbox

    def close_get(self) -> None:
        if self.get_stream is not None:
            self.get_stream.close()
            self.get_stream = None

    def close_all(self) -> None:
        for msg_id in list(self.streams):
            self.close(msg_id)
        self.close_get()

    def deliver(self, msg: wire.Message) -> None:
        stream = self._target(msg)
        if stream is None:
            log.debug("message for a client with no open stream dropped", method=msg.get("method"))
            return
        if "id" not in msg and len(stream) >= MAX_QUEUED:
            dropped_log.warning(
                "notifications dropped for a client that reads too slowly",
                method=msg.get("method"),
                queued=MAX_QUEUED,
            )
            return
        if not stream.put(msg):
            log.debug("message for a closed stream dropped", method=msg.get("method"))

    async def send(self, msg: wire.Message) -> None:
        self.deliver(msg)

    def _target(self, msg: wire.Message) -> Inbox | None:
        if "method" not in msg:
            return self.streams.get(msg.get("id"))  # type: ignore[arg-type]
        owner = CURRENT_REQUEST.get()
        if owner in self.streams:
            return self.streams[owner]
        token = (msg.get("params") or {}).get("progressToken")
        if token is not None and token in self.tokens:
            return self.streams.get(self.tokens[token])
        if self.get_stream is not None:
            return self.get_stream
        if len(self.streams) == 1:
            return next(iter(self.streams.values()))
        return None


def http_link(principal: str) -> tuple[HttpOutput, ClientLink]:
    """A client link whose messages go to the HTTP responses of `output`
    (one request's for a modern client, a legacy session's for its life)."""
    output = HttpOutput()
    link = ClientLink(
        send=output.send,
        send_nowait=output.deliver,
        principal=principal,
        transport="streamable-http",
    )
    return output, link
