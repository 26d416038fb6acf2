"""The calls an upstream session has sent and not yet seen answered, and the
progress tokens it hands out: what its reader settles each reply into."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import anyio

from gateway import wire
from gateway.client_link import ClientLink
from gateway.core.upstream_failures import failure_reply
from gateway.upstream_errors import UpstreamError

ReplyCallback = Callable[[wire.Message], None]
FailureCallback = Callable[[UpstreamError], None]


class CallWatcher(Protocol):
    """Whoever must see the server's notifications about one call, besides
    its client (a legacy session's upstream listen)."""

    async def on_notification(self, msg: wire.Message) -> None: ...


def ignore_reply(reply: wire.Message) -> None:
    """For a call whose answer nobody awaits any more (see fail_call)."""
    return None


@dataclass(slots=True)
class PendingCall:
    """A request sent upstream, settled by the session's reader with the
    server's reply, or failed by the session (its deadline, its end)."""

    owner: ClientLink | None
    log_level: str | None
    on_reply: ReplyCallback | None
    method: str = ""
    # Its bound, for the words of its timeout.
    timeout: float = 0.0
    # The client's id for the request (None for the gateway's own calls):
    # what the gateway answers in the server's stead carries it, and a modern
    # server's subscription ids are mapped back to it.
    client_id: wire.RequestId | None = None
    # Whoever must see the server's notifications about this call (a listen).
    tag: CallWatcher | None = None
    # Told of a failure instead of `on_reply` with its error reply (a caller
    # that awaits the call raises it).
    on_failure: FailureCallback | None = None

    def settle(self, reply: wire.Message) -> None:
        callback, self.on_reply = self.on_reply, None
        if callback is not None:
            callback(reply)

    def fail(self, exc: UpstreamError) -> None:
        failed = self.on_failure
        if failed is None:
            self.settle(failure_reply(exc, self.client_id))
        elif self.on_reply is not None:
            self.on_reply = self.on_failure = None
            failed(exc)


class ReplyWaiter:
    """The awaiting form of a call: `settle`/`fail` as its callbacks."""

    __slots__ = ("_done", "_error", "_reply")

    def __init__(self) -> None:
        self._done = anyio.Event()
        self._reply: wire.Message | None = None
        self._error: UpstreamError | None = None

    @property
    def settled(self) -> bool:
        return self._done.is_set()

    def settle(self, reply: wire.Message) -> None:
        self._reply = reply
        self._done.set()

    def fail(self, exc: UpstreamError) -> None:
        self._error = exc
        self._done.set()

    async def reply(self) -> wire.Message:
        await self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._reply is not None
        return self._reply


@dataclass(slots=True)
class ProgressRoute:
    owner: ClientLink
    client_token: str | int
