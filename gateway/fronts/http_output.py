"""Where a client's messages go over HTTP: each request's own response
stream, or the legacy session's GET stream.

A modern POST is one request and one stream. A legacy session has many: a
reply goes to the stream of its request; a server request or notification
goes to the stream of the call it belongs to when that is known (the task's
CURRENT_REQUEST, a progress token), else to the session's GET stream, else to
the one open POST stream.

What a stream has not written yet is bounded in bytes, on the stream and
over its principal's streams (fronts/client_queues.py): each message is
encoded once as it is queued, judged on those bytes, and written as they are.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from typing import Any, NamedTuple, Protocol

import anyio
import orjson
import structlog

from gateway import flow_control, wire
from gateway.client_link import CURRENT_REQUEST, ClientLink
from gateway.flow_control import Verdict
from gateway.fronts.asgi import ClientGone
from gateway.fronts.client_queues import ClientQueues
from gateway.peer_queue import ClientNotReading

log = structlog.get_logger("gateway.fronts.http")
# On a server that cannot tell when a client leaves: how long a response
# waits for its first message before it also watches for that (a task of its
# own, which most calls, answered sooner, need not pay for); a client gone
# meanwhile is seen this much later.
QUICK = 0.05


class Out(NamedTuple):
    """A message on its way to a response, and its JSON as written."""

    msg: wire.Message
    data: bytes


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
    Written by the service's callbacks, read by the one response; what it
    holds is bounded in bytes by the flow-control rule, on its own and with
    the other streams of its principal (`queues`). A message's bytes count
    until it is written: until the response comes back for the next one
    (its write is done then) or ends (discard)."""

    __slots__ = (
        "_event",
        "_future",
        "_interrupted",
        "_items",
        "_principal",
        "_queues",
        "_writing",
        "closed",
        "direct",
        "queued",
    )

    def __init__(self, queues: ClientQueues, principal: str) -> None:
        # Takes each message first when set; those it declines are queued.
        self.direct: DirectReader | None = None
        self._queues = queues
        self._principal = principal
        self._items: deque[Out] = deque()
        # The bytes of the messages in _items and of the one being written.
        self.queued = 0
        self._writing = 0  # the bytes of the one taken last, until written
        self._event: anyio.Event | None = None  # get()'s wait
        self._future: asyncio.Future[None] | None = None  # first()'s wait
        self._interrupted = False
        self.closed = False

    def __len__(self) -> int:
        return len(self._items)

    def put(self, msg: wire.Message) -> bool:
        """Queue `msg`, or drop it or its stand-in by the rule; False once the
        inbox is closed (nobody reads it). ClientNotReading for a request
        that does not fit (its sender fails it)."""
        if self.closed:
            return False
        direct = self.direct
        if direct is not None and direct.take(msg):
            return True
        data = orjson.dumps(msg)
        queues, principal = self._queues, self._principal
        # Every kind of message fits below the lowest bound (the principal's
        # bytes include the stream's): the usual case.
        if queues.queued(principal) + len(data) > queues.each.notification_bytes:
            verdict, bounds = queues.verdict(msg, len(data), self.queued, principal)
            if verdict is not Verdict.SEND:
                queues.dropped(msg, principal, self.queued, bounds)
                if verdict is Verdict.REFUSE:
                    raise ClientNotReading(
                        f"the client has not read the {self.queued} bytes queued for it"
                    )
                if verdict is Verdict.REPLACE:
                    stand_in = flow_control.not_read_reply(msg, len(data), bounds.queue_bytes)
                    data = orjson.dumps(stand_in)
                    if queues.stand_in_fits(len(data), self.queued, principal):
                        self._append(Out(stand_in, data))
                return True
        self._append(Out(msg, data))
        return True

    def _append(self, out: Out) -> None:
        self._items.append(out)
        size = len(out.data)
        self.queued += size
        self._queues.add(self._principal, size)
        self._wake()

    def _take(self) -> Out:
        """The next message, for its response to write now."""
        out = self._items.popleft()
        self._writing = len(out.data)
        return out

    def _written(self) -> None:
        """The response is back for more: what it took last is written."""
        size = self._writing
        if size:
            self._writing = 0
            self.queued -= size
            self._queues.release(self._principal, size)

    def close(self) -> None:
        """No more messages: the reader gets what is queued, then EndOfStream."""
        self.closed = True
        if self.direct is not None:
            self.direct.closed()
        self._wake()

    def discard(self) -> None:
        """The response is over: what it did not write goes, and its bytes
        are released (whoever ends the response calls this, every way out)."""
        if not self.closed:
            self.close()
        self._written()
        while self._items:  # each pass releases one message
            self._take()
            self._written()

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

    def get_nowait(self) -> Out | None:
        self._written()
        return self._take() if self._items else None

    async def get(self) -> Out:
        """The next message; anyio.EndOfStream once closed and drained."""
        self._written()
        while not self._items:  # each pass waits for a put or the close
            if self.closed:
                raise anyio.EndOfStream
            self._event = event = anyio.Event()
            try:
                await event.wait()
            finally:
                self._event = None
        return self._take()

    async def first(self, timeout: float, gone: ClientGone | None) -> Out | None:
        """The first message; None when `timeout` passes, the client leaves
        (`gone.gone`) or interrupt() is called; anyio.EndOfStream when the
        inbox closes first.

        With `gone` (the front's own server tells when the client leaves)
        this waits on the server's loop, with no task watching the client:
        the cost of most calls. Without it, at most QUICK: the caller waits
        on with a watcher."""
        self._written()
        if self._items:
            return self._take()
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
            return self._take()
        if self.closed:
            raise anyio.EndOfStream
        return None


class HttpOutput:
    def __init__(self, queues: ClientQueues, principal: str) -> None:
        self.streams: dict[wire.RequestId, Inbox] = {}
        self.tokens: dict[Any, wire.RequestId] = {}
        self.get_stream: Inbox | None = None
        self._queues = queues
        self._principal = principal

    def open(self, msg: wire.Message) -> Inbox:
        inbox = self.streams[msg["id"]] = Inbox(self._queues, self._principal)
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
        self.get_stream = inbox = Inbox(self._queues, self._principal)
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
        """Queue `msg` on its stream (ClientNotReading: a request that does
        not fit there)."""
        stream = self._target(msg)
        if stream is None:
            log.debug("message for a client with no open stream dropped", method=msg.get("method"))
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


def http_link(queues: ClientQueues, principal: str) -> tuple[HttpOutput, ClientLink]:
    """A client link whose messages go to the HTTP responses of `output`
    (one request's for a modern client, a legacy session's for its life),
    within the front's `queues`."""
    output = HttpOutput(queues, principal)
    link = ClientLink(
        send=output.send,
        send_nowait=output.deliver,
        principal=principal,
        transport="streamable-http",
    )
    return output, link
