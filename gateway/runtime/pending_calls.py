"""The calls an upstream session has sent and not yet seen answered, and the
progress tokens it hands out: what its reader settles each reply into."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import anyio

from gateway import wire
from gateway.client_link import ClientLink

ReplyCallback = Callable[[wire.Message], None]


class CallWatcher(Protocol):
    """Whoever must see the server's notifications about one call, besides
    its client (a legacy session's upstream listen)."""

    async def on_notification(self, msg: wire.Message) -> None: ...


def ignore_reply(reply: wire.Message) -> None:
    """For a call whose answer nobody awaits any more (see fail_call)."""
    return None


@dataclass(slots=True)
class PendingCall:
    """A request sent upstream. Awaited calls wait on `done`; fast-path calls
    get `on_reply` run by the reader, and the sweeper bounds them."""

    owner: ClientLink | None
    log_level: str | None
    done: anyio.Event | None = None
    reply: wire.Message | None = None
    on_reply: ReplyCallback | None = None
    deadline: float = 0.0
    method: str = ""
    # The client's id for the request (None for the gateway's own calls):
    # what the gateway answers in the server's stead carries it, and a modern
    # server's subscription ids are mapped back to it.
    client_id: wire.RequestId | None = None
    # Whoever must see the server's notifications about this call (a listen).
    tag: CallWatcher | None = None

    def settle(self, reply: wire.Message) -> None:
        if self.on_reply is not None:
            callback, self.on_reply = self.on_reply, None
            callback(reply)
        else:
            self.reply = reply
            if self.done is not None:
                self.done.set()


@dataclass(slots=True)
class ProgressRoute:
    owner: ClientLink
    client_token: str | int
