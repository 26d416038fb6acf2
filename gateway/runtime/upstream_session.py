"""One live connection to the upstream server: ids, pending calls, routing of
what the server sends back. The process is the transport's; the protocol
decisions are the core's; this is the glue that awaits."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

import anyio
import structlog

from gateway import wire
from gateway.client_link import ClientLink
from gateway.core import upstream_log_level
from gateway.core.profile import UpstreamProfile
from gateway.core.session_choice import SessionKey
from gateway.loop_clock import LazyClock
from gateway.runtime.deadlines import Deadlines
from gateway.runtime.pending_calls import (
    CallWatcher,
    FailureCallback,
    PendingCall,
    ProgressRoute,
    ReplyCallback,
    ReplyWaiter,
    ignore_reply,
)
from gateway.runtime.session_lease import SessionLease
from gateway.runtime.upstream_channel import CallStreams, Channel, Corker
from gateway.upstream_errors import (
    ConnectionLost,
    UpstreamGone,
    UpstreamNotReading,
    UpstreamTimeout,
)

log = structlog.get_logger("gateway.upstream")

# Seconds a server has to end a call by itself, once told that no client answer
# will come, before the gateway cancels it. Real SDKs break when a cancellation
# meets the call writing its result, or a reply meets a request being torn down
# (mcp 1.30 exits when a hundred parked calls expire together), so the gateway
# never sends both at once: refusal first, cancellation only for a call that is
# still running after this.
WIND_DOWN = 1.0


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
        # Server requests being served (each may wait for a client).
        self.serving = 0
        self.closed_reason: str | None = None
        self.lease = SessionLease()
        self.started = time.monotonic()
        # When a client last used it (the pool's order, for idle eviction).
        self.last_used = 0
        self._next_id = 0
        self._next_token = 0
        self.clock = LazyClock()  # anyio.current_time(), cheaper on the path of every call
        # Every pending call's bound, watched by run_deadlines.
        self.deadlines = Deadlines(self._overdue)

    @property
    def alive(self) -> bool:
        return self.closed_reason is None

    def owners(self) -> set[ClientLink]:
        return {call.owner for call in self.pending.values() if call.owner is not None}

    def outside_calls(self, request_id: wire.RequestId) -> bool:
        """Whether the server sent this request outside any call (only the HTTP
        back can tell; over stdio every request may belong to a call)."""
        channel = self.channel
        return isinstance(channel, CallStreams) and channel.outside_calls(request_id)

    def calls_a_notification_may_belong_to(self, msg: wire.Message) -> list[PendingCall]:
        """The client calls in progress that a server notification naming no
        call (a log message) may be about.

        Over a transport with a stream per call (Streamable HTTP) that is the
        call whose stream carried it, or none for the GET stream (2025-11-25:
        its messages "SHOULD be unrelated to any concurrently-running
        JSON-RPC request"). Over stdio, any client call in progress.
        """
        channel = self.channel
        if isinstance(channel, CallStreams) and channel.streams_name_calls:
            origin = channel.stream_of(msg)
            call = self.pending.get(origin) if isinstance(origin, int) else None
            return [call] if call is not None and call.owner is not None else []
        return [call for call in self.pending.values() if call.owner is not None]

    def calls_of(self, owner: ClientLink) -> list[int]:
        return [i for i, call in self.pending.items() if call.owner is owner]

    def fail_call(self, msg_id: int, reply: wire.Message, wind_down: float | None = None) -> None:
        """End a pending call with `reply` instead of the server's. The server
        is told to stop working on it only if it has not ended the call itself
        within `wind_down` (WIND_DOWN by default): its deadline sends that
        cancellation, and the server's own late answer is dropped if it comes."""
        pending = self.pending.get(msg_id)
        if pending is None:
            return
        pending.settle(reply)
        grace = WIND_DOWN if wind_down is None else wind_down
        self.pending[msg_id] = PendingCall(
            None, None, on_reply=ignore_reply, method=pending.method, timeout=grace
        )
        self.deadlines.start(msg_id, self.clock() + grace)

    def next_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def progress_token(self, owner: ClientLink, client_token: str | int) -> str:
        """An upstream token unique on this connection, mapped back to the client's."""
        self._next_token += 1
        token = f"gw-{self._next_token}"
        self.progress[token] = ProgressRoute(owner, client_token)
        return token

    def start_call(
        self,
        method: str,
        params: dict[str, Any] | None,
        on_reply: ReplyCallback,
        *,
        timeout: float,
        client_id: wire.RequestId | None = None,
        owner: ClientLink | None = None,
        log_level: str | None = None,
        tag: CallWatcher | None = None,
        on_failure: FailureCallback | None = None,
    ) -> int:
        """Send a request; the one way a request goes upstream. The reader
        runs `on_reply` with the answer; the session runs it with a gateway
        error under `client_id` (or `on_failure`, given one) if the server
        exits or `timeout` passes first. Raises UpstreamGone if the session
        is over, UpstreamNotReading if the server is too far behind: nothing
        was sent then."""
        if self.closed_reason is not None:
            raise UpstreamGone(self.closed_reason)
        self._next_id = msg_id = self._next_id + 1  # (next_id, inlined: every call)
        self.pending[msg_id] = PendingCall(
            owner, log_level, on_reply, method, timeout, client_id, tag, on_failure
        )
        try:
            self.channel.send_nowait(wire.request(msg_id, method, params))
        except ConnectionLost as exc:
            self.pending.pop(msg_id, None)
            raise UpstreamGone(f"cannot write to upstream: {exc}") from exc
        except UpstreamNotReading:
            self.pending.pop(msg_id, None)
            raise
        self.deadlines.start(msg_id, self.clock() + timeout)
        return msg_id

    async def call(
        self,
        method: str,
        params: dict[str, Any] | None,
        *,
        timeout: float,
        owner: ClientLink | None = None,
        log_level: str | None = None,
        client_id: wire.RequestId | None = None,
        tag: CallWatcher | None = None,
    ) -> wire.Message:
        """`start_call`, awaited: its reply, or the failure raised
        (UpstreamGone, UpstreamTimeout, UpstreamNotReading). A caller that is
        cancelled tells the server with `notifications/cancelled`, and a late
        reply is dropped."""
        waiter = ReplyWaiter()
        msg_id = self.start_call(
            method,
            params,
            waiter.settle,
            timeout=timeout,
            client_id=client_id,
            owner=owner,
            log_level=log_level,
            tag=tag,
            on_failure=waiter.fail,
        )
        try:
            return await waiter.reply()
        except anyio.get_cancelled_exc_class():
            if not waiter.settled:
                self.abandon_call(msg_id, "cancelled by the client")
            raise

    def abandon_call(self, msg_id: int, reason: str) -> None:
        """Nobody waits for the call any more: drop it and tell the server."""
        self.deadlines.cancel(msg_id)
        if self.pending.pop(msg_id, None) is not None and self.closed_reason is None:
            try:
                self.channel.send_nowait(
                    wire.notification(
                        "notifications/cancelled", {"requestId": msg_id, "reason": reason}
                    )
                )
            except (ConnectionLost, UpstreamNotReading) as exc:  # the call is over anyway
                log.debug("could not send cancellation upstream", error=str(exc))

    def _overdue(self, msg_id: Hashable) -> None:
        assert isinstance(msg_id, int)
        pending = self.pending.get(msg_id)
        if pending is None:
            return
        bound = f"{pending.timeout:g}s"
        self.abandon_call(msg_id, f"no reply within {bound}")
        pending.fail(UpstreamTimeout(f"upstream did not answer {pending.method} within {bound}"))

    async def run_deadlines(self) -> None:
        """Bound every pending call (runs as long as the session does)."""
        await self.deadlines.run()

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification; UpstreamGone if the connection is over."""
        if self.closed_reason is not None:
            return
        try:
            await self.channel.send(wire.notification(method, params))
        except ConnectionLost as exc:
            raise UpstreamGone(f"cannot write to upstream: {exc}") from exc

    async def respond(self, msg: wire.Message) -> None:
        """Answer a server request. A server that went away meanwhile has
        nobody left to answer: its exit reaches the reader on its own, so
        the answer is dropped here rather than fail whoever was answering."""
        if self.closed_reason is not None:
            return
        try:
            await self.channel.send(msg)
        except ConnectionLost as exc:
            log.debug("answer to a departed server dropped", session=self.label, error=str(exc))

    async def run_reader(
        self, on_server_message: ServerMessageHandler, corker: Corker | None = None
    ) -> None:
        """Deliver replies to their calls and everything else to the handler,
        until the connection ends; then fail every pending call."""
        reason = "upstream connection ended"
        end_deadline = self.deadlines.cancel_at_once
        try:
            while True:  # ends when the channel raises at end of stream
                batch = await self.channel.receive_batch()
                if corker is not None:
                    corker.cork()
                try:
                    for msg in batch:
                        if "method" in msg:
                            await on_server_message(self, msg)
                            continue
                        msg_id = msg.get("id")
                        pending = (
                            self.pending.pop(msg_id, None) if isinstance(msg_id, int) else None
                        )
                        if pending is not None:
                            end_deadline(msg_id, None)
                        else:
                            # A late reply to a call we gave up on (timeout, cancel, probe).
                            log.debug(
                                "reply to no pending call dropped", id=msg_id, session=self.label
                            )
                            continue
                        pending.settle(msg)
                finally:
                    if corker is not None:
                        corker.uncork()
        except Exception as exc:
            reason = str(exc) or type(exc).__name__
        finally:
            self.close(reason)

    def close(self, reason: str) -> None:
        if self.closed_reason is None:
            self.closed_reason = reason
        pending = list(self.pending.values())
        self.pending.clear()
        self.progress.clear()
        self.deadlines.close()
        gone = UpstreamGone(reason)
        for call in pending:
            call.fail(gone)

    def log_level_needed(self, level: str | None) -> str | None:
        """The level to set upstream before a request asking `level`, if any
        (the core's rule: a shared session's level only ever widens)."""
        return upstream_log_level.level_to_set(self.profile, self.upstream_log_level, level)
