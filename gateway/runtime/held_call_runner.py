"""Carrying out the hold machine's commands (core/mrtr_hold.py) for every
bridged call: the session, the upstream task, timers, replies; and turning
what was waited for into the machine's next events (DESIGN §5.1.6-5.1.7).

Taking the session and running the upstream call are the runner's; so is
waiting for the call's outcome (its input requests, its end, or its
OutcomeDue timer), after which the machine decides what the client hears.
runtime/mrtr_bridge.py decides which calls come here and opens their retries.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel
import structlog
from anyio.abc import TaskGroup

from gateway import wire
from gateway.client_link import MRTR_ROUND, ClientLink
from gateway.config import Config
from gateway.core import held_call
from gateway.core import mrtr_hold_events as hold
from gateway.core.engine import CancelTimer, Command, Event, Log, StartTimer, TimerFired
from gateway.core.mrtr_hold import HoldTable
from gateway.core.routing import Forward
from gateway.core.upstream_failures import failure_reply
from gateway.log_limit import LogLimiter
from gateway.runtime.deadlines import Deadlines
from gateway.runtime.upstream_session import UpstreamSession
from gateway.upstream_errors import UpstreamError

log = structlog.get_logger("gateway.mrtr")

ForwardFn = Callable[[ClientLink, Forward, UpstreamSession, float], Awaitable[wire.Message]]
ShapeFn = Callable[[Forward, wire.Message, wire.RequestId, UpstreamSession], wire.Message]
Timer = hold.Expiry | hold.WindDown | hold.OutcomeDue | hold.SessionDue


@dataclass(eq=False)
class HeldEntry:
    """What the runtime keeps for one bridged call (its state is the table's)."""

    key: hold.CallKey
    call: held_call.HeldCall
    link: ClientLink
    decision: Forward
    session: UpstreamSession
    upstream_scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    acquiring: anyio.CancelScope | None = None  # while waiting for the session
    changed: anyio.Event = field(default_factory=anyio.Event)
    finished: anyio.Event = field(default_factory=anyio.Event)


def now_ms() -> int:
    """Wall-clock milliseconds, for a sealed state's expiry."""
    return int(time.time() * 1000)


class HeldCallRunner:
    """Every bridged call's I/O: one HeldEntry each, keyed as in the table."""

    def __init__(
        self, config: Config, table: HoldTable, forward: ForwardFn, shape: ShapeFn
    ) -> None:
        self.config = config
        self.table = table
        self._forward = forward
        self._shape = shape
        self._tg: TaskGroup | None = None
        self.entries: dict[hold.CallKey, HeldEntry] = {}
        self._keys = itertools.count(1)
        self.timers = Deadlines(self._timer_due)
        # What a principal can cause without end (a full share): once a minute.
        self._limited_log = LogLimiter(log)

    def start(self, tg: TaskGroup) -> None:
        self._tg = tg
        tg.start_soon(self.timers.run)

    # -- carrying out the table's commands -------------------------------------------
    async def step(self, entry: HeldEntry | None, event: Event) -> wire.Message | None:
        """Tell the table `event`, carry out its commands in order; the client's
        answer if one of them gives it."""
        reply = await self._execute(entry, self.table.handle(event))
        if entry is not None and entry.key not in self.table.calls:
            self.entries.pop(entry.key, None)
        return reply

    async def _execute(self, entry: HeldEntry | None, cmds: list[Command]) -> wire.Message | None:
        reply: wire.Message | None = None
        for cmd in cmds:
            if isinstance(cmd, hold.ReplyToClient):
                reply = cmd.reply
            elif isinstance(cmd, Log):
                emit = self._limited_log if cmd.rate_limited else log
                getattr(emit, cmd.level)(cmd.message, **cmd.fields)
            elif isinstance(cmd, StartTimer):
                self.timers.start(cmd.timer, cmd.deadline)
            elif isinstance(cmd, CancelTimer):
                self.timers.cancel(cmd.timer)
            else:
                assert entry is not None, f"{cmd!r} names a call the runtime does not have"
                reply = await self._execute_for(entry, cmd) or reply
        return reply

    async def _execute_for(self, entry: HeldEntry, cmd: Command) -> wire.Message | None:
        if isinstance(cmd, hold.AnswerServer):
            await entry.session.respond(cmd.reply)
        elif isinstance(cmd, hold.RefuseServerAsks):
            await self._refuse(entry, cmd.replies)
        elif isinstance(cmd, hold.ReleaseSession):
            entry.session.lease.release_exclusive(entry)
        elif isinstance(cmd, hold.Wake):
            entry.changed.set()
        elif isinstance(cmd, hold.CancelUpstream):
            entry.upstream_scope.cancel()
        elif isinstance(cmd, hold.StartUpstream):
            assert self._tg is not None
            self._tg.start_soon(self._run_upstream, entry)
        elif isinstance(cmd, hold.GiveUpSession):
            if entry.acquiring is not None:
                entry.acquiring.cancel()
        elif isinstance(cmd, hold.AcquireSession):
            return await self._acquire(entry, cmd.client_id)
        elif isinstance(cmd, hold.AwaitOutcome):
            return await self._await_outcome(entry, cmd.client_id)
        elif isinstance(cmd, hold.ShapeReply):
            return self._shape(entry.decision, cmd.reply, cmd.client_id, entry.session)
        else:
            raise TypeError(f"not a command of the hold machine: {cmd!r}")
        return None

    def _timer_due(self, timer: Hashable) -> None:
        # A firing may wait on I/O, and timers due together must not wait
        # for each other: each gets a task.
        assert self._tg is not None
        self._tg.start_soon(self._timer_fired, timer)

    async def _timer_fired(self, timer: Hashable) -> None:
        assert isinstance(timer, Timer)
        await self.step(self.entries.get(timer.key), TimerFired(timer, anyio.current_time()))

    def fire_timer(self, timer: Timer) -> None:
        """Let a running timer fire now (tests fire the state_ttl this way)."""
        self.timers.fire_now(timer)

    async def _acquire(self, entry: HeldEntry, client_id: wire.RequestId) -> wire.Message | None:
        scope = entry.acquiring = anyio.CancelScope()  # cancelled by GiveUpSession
        try:
            with scope:
                await entry.session.lease.acquire_exclusive(entry)
        finally:
            entry.acquiring = None
        if scope.cancelled_caught:
            busy = hold.SessionBusy(entry.key, client_id, anyio.current_time())
            return await self.step(entry, busy)
        acquired = hold.SessionAcquired(entry.key, client_id, anyio.current_time())
        return await self.step(entry, acquired)

    async def _refuse(self, entry: HeldEntry, refusals: tuple[wire.Message, ...]) -> None:
        # respond() itself drops an answer to a server that went away.
        with anyio.CancelScope(shield=True), anyio.move_on_after(1):
            for reply in refusals:
                await entry.session.respond(reply)

    # -- a run of the upstream call -----------------------------------------------
    async def run(
        self,
        msg_id: wire.RequestId,
        call: held_call.HeldCall,
        link: ClientLink,
        decision: Forward,
        session: UpstreamSession,
    ) -> wire.Message:
        entry = HeldEntry(next(self._keys), call, link, decision, session)
        self.entries[entry.key] = entry
        try:
            arrived = hold.CallArrived(entry.key, msg_id, call, anyio.current_time())
            reply = await self.step(entry, arrived)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                gone = hold.ClientGone(entry.key, "cancelled by the client", anyio.current_time())
                await self.step(entry, gone)
            raise
        assert reply is not None, "the hold machine answers every call"
        return reply

    async def retry(self, link: ClientLink, cmds: list[Command]) -> wire.Message:
        """Carry out the table's answer to a retry (RetryPresented). A retry
        that takes its parked call over (waiting for the session or the
        outcome) is the call's client now, and closes it if cancelled."""
        keys = {c.key for c in cmds if isinstance(c, hold.CallCommand)}
        assert len(keys) <= 1, "a retry continues one call"
        entry = self.entries.get(keys.pop()) if keys else None
        taken = any(isinstance(c, hold.AcquireSession | hold.AwaitOutcome) for c in cmds)
        if entry is None or not taken:
            reply = await self._execute(entry, cmds)
        else:
            entry.link = link
            MRTR_ROUND.set(entry.call.round)  # for the retry's span (runtime/tracing.py)
            try:
                reply = await self._execute(entry, cmds)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    gone = hold.ClientGone(
                        entry.key, "the retry was cancelled", anyio.current_time()
                    )
                    await self.step(entry, gone)
                raise
        if entry is not None and entry.key not in self.table.calls:
            self.entries.pop(entry.key, None)
        assert reply is not None, "the hold machine answers every retry"
        return reply

    async def _run_upstream(self, entry: HeldEntry) -> None:
        # A parked call may wait for its client for state_ttl per round; this is
        # the hard ceiling on the whole upstream call.
        wait = entry.call.wait_limit or self.config.request_timeout
        ceiling = wait + self.config.state_ttl * self.config.max_rounds
        reply: wire.Message | None = None
        failed = False
        try:
            with entry.upstream_scope:
                try:
                    reply = await self._forward(entry.link, entry.decision, entry.session, ceiling)
                except UpstreamError as exc:
                    reply = failure_reply(exc)
                    failed = True
        finally:
            entry.finished.set()
            await self.step(entry, hold.UpstreamEnded(entry.key, reply, failed))

    async def _await_outcome(
        self, entry: HeldEntry, client_id: wire.RequestId
    ) -> wire.Message | None:
        """Wait for the call's result or its next input requests, or for its
        OutcomeDue timer."""
        key = entry.key
        while not self.table.book.ready(key) and not self.table.book.overdue(
            key
        ):  # each pass waits
            await entry.changed.wait()  # for a Wake: an ask, the end, or the timer
            entry.changed = anyio.Event()
        if not self.table.book.finished(key) and not self.table.book.overdue(key):
            await self._gather_more(key)
        if self.table.book.overdue(key):
            return await self.step(entry, hold.WaitTimedOut(key, client_id, anyio.current_time()))
        gathered = hold.InputGathered(
            key, client_id, anyio.current_time(), now_ms(), secrets.token_urlsafe(12)
        )
        return await self.step(entry, gathered)

    async def _gather_more(self, key: hold.CallKey) -> None:
        """Let requests the server sent together arrive before answering, so that
        they go out in one input_required.

        Requests that came in one read are registered by tasks the reader started
        before this one woke, so yielding a few times collects them at no cost.
        A server that writes them far apart can be given `input_batch_window`:
        each arrival within it extends the wait (off by default, because every
        round trip pays it)."""
        for _ in range(3):
            await anyio.lowlevel.checkpoint()
        window = self.config.input_batch_window
        if window <= 0:
            return
        count = -1
        while (
            count != self.table.book.pending_asks(key)
            and not self.table.book.finished(key)
            and not self.table.book.overdue(key)
        ):
            count = self.table.book.pending_asks(key)
            await anyio.sleep(window)
