"""One live connection to the upstream server: ids, pending calls, routing of
what the server sends back. The process is the transport's; the protocol
decisions are the core's; this is the glue that awaits."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import structlog

from gateway import era, wire
from gateway.core.profile import UpstreamProfile
from gateway.runtime.session_lease import SessionLease

log = structlog.get_logger("gateway.upstream")


@dataclass(frozen=True, slots=True)
class SessionKey:
    """DESIGN §5.1.1: sessions are keyed by principal and declared client features."""

    principal: str
    features: frozenset[str]


class Channel(Protocol):
    async def send(self, msg: wire.Message) -> None: ...
    async def receive(self) -> wire.Message: ...


class UpstreamGone(Exception):
    """The upstream connection ended; `reason` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UpstreamTimeout(Exception):
    pass


@dataclass(slots=True)
class PendingCall:
    owner: object | None
    log_level: str | None
    done: anyio.Event = field(default_factory=anyio.Event)
    reply: wire.Message | None = None


@dataclass(slots=True)
class ProgressRoute:
    owner: object
    client_token: str | int


ServerMessageHandler = Callable[["UpstreamSession", wire.Message], Awaitable[None]]


class UpstreamSession:
    def __init__(self, channel: Channel, key: SessionKey, label: str) -> None:
        self.channel = channel
        self.key = key
        self.label = label
        self.profile: UpstreamProfile | None = None
        self.pending: dict[int, PendingCall] = {}
        self.progress: dict[str, ProgressRoute] = {}
        self.upstream_log_level: str | None = None
        self.closed_reason: str | None = None
        self.lease = SessionLease()
        self.started = time.monotonic()
        self._next_id = 0
        self._next_token = 0

    @property
    def alive(self) -> bool:
        return self.closed_reason is None

    def owners(self) -> set[object]:
        return {call.owner for call in self.pending.values() if call.owner is not None}

    def calls_of(self, owner: object) -> list[int]:
        return [i for i, call in self.pending.items() if call.owner is owner]

    async def fail_call(self, msg_id: int, reply: wire.Message, reason: str) -> None:
        """End a pending call with `reply` instead of the server's, and tell the
        server to stop working on it."""
        pending = self.pending.get(msg_id)
        if pending is None:
            return
        pending.reply = reply
        pending.done.set()
        await self._cancel_upstream(msg_id, reason)

    def next_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def progress_token(self, owner: object, client_token: str | int) -> str:
        """An upstream token unique on this connection, mapped back to the client's."""
        self._next_token += 1
        token = f"gw-{self._next_token}"
        self.progress[token] = ProgressRoute(owner, client_token)
        return token

    async def call(
        self,
        method: str,
        params: dict[str, Any] | None,
        *,
        timeout: float,
        owner: object | None = None,
        log_level: str | None = None,
    ) -> wire.Message:
        """Send a request and wait for its reply (a result or an error message).

        Raises UpstreamGone if the connection ends first and UpstreamTimeout
        after `timeout`. If the caller is cancelled, the server is told with
        `notifications/cancelled` and a late reply is dropped.
        """
        if self.closed_reason is not None:
            raise UpstreamGone(self.closed_reason)
        msg_id = self.next_id()
        pending = PendingCall(owner, log_level)
        self.pending[msg_id] = pending
        sent = False
        try:
            await self.channel.send(wire.request(msg_id, method, params))
            sent = True
            with anyio.fail_after(timeout):
                await pending.done.wait()
        except TimeoutError:
            await self._cancel_upstream(msg_id, f"no reply within {timeout:g}s")
            raise UpstreamTimeout(f"upstream did not answer {method} within {timeout:g}s") from None
        except anyio.get_cancelled_exc_class():
            if sent and pending.reply is None:
                await self._cancel_upstream(msg_id, "cancelled by the client")
            raise
        except Exception as exc:
            if pending.reply is None and self.closed_reason is None:
                raise UpstreamGone(f"cannot write to upstream: {exc}") from exc
        finally:
            self.pending.pop(msg_id, None)
        if pending.reply is None:
            raise UpstreamGone(self.closed_reason or "upstream connection ended")
        return pending.reply

    async def _cancel_upstream(self, msg_id: int, reason: str) -> None:
        self.pending.pop(msg_id, None)
        if self.closed_reason is not None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(1):
            try:
                await self.channel.send(
                    wire.notification(
                        "notifications/cancelled",
                        {"requestId": msg_id, "reason": reason},
                    )
                )
            except Exception as exc:  # the connection may be dying; the call is over anyway
                log.debug("could not send cancellation upstream", error=str(exc))

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        if self.closed_reason is None:
            await self.channel.send(wire.notification(method, params))

    async def respond(self, msg: wire.Message) -> None:
        if self.closed_reason is None:
            await self.channel.send(msg)

    async def run_reader(self, on_server_message: ServerMessageHandler) -> None:
        """Deliver replies to their calls and everything else to the handler,
        until the connection ends; then fail every pending call."""
        reason = "upstream connection ended"
        try:
            while True:  # ends when the channel raises at end of stream
                msg = await self.channel.receive()
                if "method" in msg:
                    await on_server_message(self, msg)
                    continue
                msg_id = msg.get("id")
                pending = self.pending.pop(msg_id, None) if isinstance(msg_id, int) else None
                if pending is None:
                    # A late reply to a call we gave up on (timeout, cancel, probe).
                    log.debug("reply to no pending call dropped", id=msg_id, session=self.label)
                    continue
                pending.reply = msg
                pending.done.set()
        except Exception as exc:
            reason = str(exc) or type(exc).__name__
        finally:
            self.close(reason)

    def close(self, reason: str) -> None:
        if self.closed_reason is None:
            self.closed_reason = reason
        for pending in self.pending.values():
            pending.done.set()
        self.pending.clear()
        self.progress.clear()

    def log_level_needed(self, level: str | None) -> str | None:
        """The level to set upstream before a request asking `level`, if any.

        The upstream session is shared, so its level only ever widens to what
        some request asked; the gateway filters per request on the way back.
        """
        profile = self.profile
        if level is None or profile is None or profile.era is not era.Era.LEGACY:
            return None  # a modern server takes the level from each request's _meta
        if "logging" not in profile.capabilities:
            return None
        current = self.upstream_log_level
        if current is not None and era.LOG_RANK[current] <= era.LOG_RANK[level]:
            return None
        return level
