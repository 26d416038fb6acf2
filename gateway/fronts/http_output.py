"""Where a client's messages go over HTTP: each request's own response
stream, or the legacy session's GET stream.

A modern POST is one request and one stream. A legacy session has many: a
reply goes to the stream of its request; a server request or notification
goes to the stream of the call it belongs to when that is known (the task's
CURRENT_REQUEST, a progress token), else to the session's GET stream, else to
the one open POST stream.
"""

from __future__ import annotations

import math
from typing import Any

import anyio
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gateway import wire
from gateway.client_link import CURRENT_REQUEST
from gateway.log_limit import LogLimiter

log = structlog.get_logger("gateway.fronts.http")
# A client that reads its stream slowly while the server sends notifications
# fast must not make the gateway queue without end: past this many messages
# waiting on one stream, its notifications (progress, logs, list changes) are
# dropped, counted in the log; replies and server requests always go through.
MAX_QUEUED = 1024
dropped_log = LogLimiter(log)

Stream = MemoryObjectSendStream[wire.Message]


class HttpOutput:
    def __init__(self) -> None:
        self.streams: dict[wire.RequestId, Stream] = {}
        self.tokens: dict[Any, wire.RequestId] = {}
        self.get_stream: Stream | None = None

    def open(self, msg: wire.Message) -> MemoryObjectReceiveStream[wire.Message]:
        send, receive = anyio.create_memory_object_stream[wire.Message](math.inf)
        self.streams[msg["id"]] = send
        meta = (msg.get("params") or {}).get("_meta")
        if isinstance(meta, dict) and "progressToken" in meta:
            self.tokens[meta["progressToken"]] = msg["id"]
        return receive

    def close(self, msg_id: wire.RequestId) -> None:
        stream = self.streams.pop(msg_id, None)
        if stream is not None:
            stream.close()
        for token, owner in list(self.tokens.items()):
            if owner == msg_id:
                del self.tokens[token]

    def open_get(self) -> MemoryObjectReceiveStream[wire.Message] | None:
        if self.get_stream is not None:
            return None  # 2025-11-25: one GET stream per session at a time
        send, receive = anyio.create_memory_object_stream[wire.Message](math.inf)
        self.get_stream = send
        return receive

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
        if "id" not in msg and stream.statistics().current_buffer_used >= MAX_QUEUED:
            dropped_log.warning(
                "notifications dropped for a client that reads too slowly",
                method=msg.get("method"),
                queued=MAX_QUEUED,
            )
            return
        try:
            stream.send_nowait(msg)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            log.debug("message for a closed stream dropped", method=msg.get("method"))

    async def send(self, msg: wire.Message) -> None:
        self.deliver(msg)

    def _target(self, msg: wire.Message) -> Stream | None:
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
