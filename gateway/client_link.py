"""One downstream client connection, whatever its transport."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from gateway import wire
from gateway.core.routing import LegacyClientSession

_link_ids = itertools.count(1)

# The client request a task is working for. Transports with a stream per
# request (HTTP) use it to put a server request or notification on the stream
# of the call it belongs to.
CURRENT_REQUEST: ContextVar[wire.RequestId | None] = ContextVar("current_request", default=None)
# The MRTR round the task's request is on (0: none), set by the bridges for
# the spans of runtime/tracing.py: a contextvar, so nothing is passed along
# for it and nothing is paid with tracing off.
MRTR_ROUND: ContextVar[int] = ContextVar("mrtr_round", default=0)


class InflightCall(Protocol):
    """A client request the gateway is working on (runtime/client_calls.py)."""

    def cancel(self) -> None:
        """The client gave up: stop whatever the call waits for, answer nothing."""


@dataclass(slots=True)
class ForwardedServerRequest:
    """A server-to-client request the gateway passed to this client."""

    session: object
    upstream_id: wire.RequestId
    done: anyio.Event = field(default_factory=anyio.Event)
    reply: wire.Message | None = None
    cancelled: bool = False


def _nothing() -> None:
    return None


@dataclass(eq=False, slots=True)
class ClientLink:
    """`send` waits for room (backpressure); `send_nowait` queues at once and is
    what replies from a callback use; `cork`/`uncork` batch writes."""

    send: Callable[[wire.Message], Awaitable[None]]
    send_nowait: Callable[[wire.Message], None]
    cork: Callable[[], None] = _nothing
    uncork: Callable[[], None] = _nothing
    principal: str = "local"
    transport: str = "stdio"
    session: LegacyClientSession | None = None
    inflight: dict[wire.RequestId, InflightCall] = field(default_factory=dict)
    server_requests: dict[str, ForwardedServerRequest] = field(default_factory=dict)
    id: int = field(default_factory=lambda: next(_link_ids))
    # The upstream listen that serves a legacy session of a modern server.
    session_listen: Any = None
    # Set when the last in-flight call ends while someone waits to drain.
    drained: anyio.Event | None = None
    _next_server_request: int = 0

    @classmethod
    def over_stream(
        cls, stream: MemoryObjectSendStream[wire.Message], **fields: object
    ) -> ClientLink:
        """A link whose output goes into a memory stream (tests, the demo)."""
        return cls(send=stream.send, send_nowait=stream.send_nowait, **fields)  # type: ignore[arg-type]

    def next_server_request_id(self) -> str:
        self._next_server_request += 1
        return f"gw-{self._next_server_request}"

    def call_ended(self, msg_id: wire.RequestId) -> None:
        self.inflight.pop(msg_id, None)
        if not self.inflight and self.drained is not None:
            self.drained.set()

    def declared(self, feature: str) -> bool:
        """Whether this client's legacy session declared a client feature."""
        return self.session is not None and feature in self.session.capabilities
