"""The gateway's own tasks for modern clients of a legacy server (issue #16;
SEP-2663, the 2026-07-28 tasks extension).

A modern client that declares `io.modelcontextprotocol/tasks` and calls a
tool of a legacy server waits `[tasks] after` seconds as for any call; if
the call has not ended by then it gets a task handle (`resultType: "task"`)
and the call goes on here, in a task group of the gateway's own rather than
the client's request. Each round of the call runs through the MRTR bridge
(runtime/mrtr_bridge.py), so a legacy server's sampling, elicitation or
roots request during the task parks the call exactly as for a waiting
client: the task shows `input_required` with the bridge's input requests,
and `tasks/update` brings the answers, which continue it with the sealed
`requestState` the task keeps to itself. `tasks/get` reads the record
(core/task_book.py); `tasks/cancel` stops the round in progress, which
cancels the call upstream. Records expire with their time to live.
"""

from __future__ import annotations

import secrets
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup

from gateway import wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.core import call_plan, mrtr_shapes, task_shapes
from gateway.core.routing import Forward
from gateway.core.task_book import TaskBook, TaskRecord
from gateway.core.upstream_failures import failure_reply
from gateway.runtime.held_call_runner import now_ms
from gateway.runtime.mrtr_bridge import MrtrBridge
from gateway.runtime.session_calls import SessionCalls
from gateway.runtime.upstream_session import UpstreamSession
from gateway.share_log import log_refusal
from gateway.upstream_errors import UpstreamError

log = structlog.get_logger("gateway.tasks")


def _discard(msg: wire.Message) -> None:
    """A task's call has no client to send to: progress and the like are
    not carried on tasks (SEP-2663 "Task Status Notifications")."""


async def _discard_async(msg: wire.Message) -> None:
    pass


class TaskRunner:
    def __init__(self, config: Config, bridge: MrtrBridge, on_session: SessionCalls) -> None:
        self.config = config
        self.bridge = bridge
        self.on_session = on_session
        self.book = TaskBook(
            config.task_share,
            ttl_ms=int(config.tasks_ttl * 1000),
            poll_ms=int(config.tasks_poll_interval * 1000),
        )
        self._tg: TaskGroup | None = None
        # The round of each task that runs now: its scope stops it.
        self._rounds: dict[str, anyio.CancelScope] = {}
        # Each task's call as it came, and where it runs: its next round
        # is that call's retry.
        self._calls: dict[str, tuple[wire.Message, Forward, UpstreamSession]] = {}

    def start(self, tg: TaskGroup) -> None:
        self._tg = tg
        tg.start_soon(self._expire)

    def has_room(self, principal: str) -> bool:
        """Whether `principal` may start one more of the gateway's tasks (a
        refusal is logged, rate-limited)."""
        refusal = self.book.refusal(principal)
        if refusal is not None:
            log_refusal(refusal, "the gateway's tasks", principal, self.book.share)
        return refusal is None

    # -- tools/call ----------------------------------------------------------------------
    async def call(
        self, link: ClientLink, msg: wire.Message, decision: Forward, session: UpstreamSession
    ) -> wire.Message:
        """The call's answer if it ends within `[tasks] after`, else a task."""
        assert self._tg is not None
        task_link = ClientLink(
            send=_discard_async, send_nowait=_discard, principal=link.principal, transport="task"
        )
        done = anyio.Event()
        outcome: list[wire.Message] = []
        task: list[TaskRecord] = []
        scope = anyio.CancelScope()
        task_id = secrets.token_urlsafe(24)

        async def first_round() -> None:
            with scope:
                reply = await self._first_round(task_link, msg, decision, session)
                outcome.append(reply)
                if task:
                    self._settle(task[0], reply)
            self._rounds.pop(task_id, None)
            done.set()

        self._rounds[task_id] = scope
        self._tg.start_soon(first_round)
        try:
            with anyio.move_on_after(self.config.tasks_after):
                await done.wait()
        except anyio.get_cancelled_exc_class():
            scope.cancel()  # the client gave up before a task existed
            raise
        if not outcome and not self.book.has_room(link.principal):
            # The book filled while this call waited: the server decides per
            # request, and this one is answered when it ends (within the
            # task time to live its round is bounded by).
            try:
                await done.wait()
            except anyio.get_cancelled_exc_class():
                scope.cancel()
                raise
        if outcome:
            return {**outcome[0], "id": msg["id"]}
        # Still running: from here on it is a task (created before the next
        # await, so the round's end, whenever it comes, finds it).
        record = self.book.create(task_id, link.principal, anyio.current_time(), now_ms())
        task.append(record)
        self._calls[task_id] = (msg, decision, session)
        log.info("call became a task", task=task_id[:8], tool=(msg.get("params") or {}).get("name"))
        return task_shapes.created(msg["id"], record.view())

    async def _first_round(
        self, link: ClientLink, msg: wire.Message, decision: Forward, session: UpstreamSession
    ) -> wire.Message:
        """The call, bounded by the task's time to live: through the MRTR
        bridge for a client that can be asked for input, else forwarded
        (holding no more of the session than any call does)."""
        ttl = self.config.tasks_ttl
        if call_plan.bridged(decision, msg.get("params")):
            return await self.bridge.call(link, msg, decision, session, wait_limit=ttl)
        try:
            reply = await self.on_session.leased_forward(link, decision, session, msg["id"], ttl)
        except (UpstreamError, TimeoutError) as exc:
            return failure_reply(exc, msg["id"])
        return self.on_session.shape(decision, reply, msg["id"], session)

    def _settle(self, record: TaskRecord, reply: wire.Message) -> None:
        self.book.settle(record, reply, now_ms())
        if record.terminal:
            self._calls.pop(record.task_id, None)
            log.info("task ended", task=record.task_id[:8], status=record.status)

    # -- tasks/get, tasks/update, tasks/cancel ---------------------------------------------
    async def serve(self, link: ClientLink, msg: wire.Message) -> wire.Message:
        msg_id = msg["id"]
        params = msg.get("params") or {}
        record = self.book.find(params.get("taskId"), link.principal, anyio.current_time())
        if record is None:
            # Unknown, expired and another principal's tasks look the same.
            return task_shapes.not_found(msg_id, params.get("taskId"))
        if msg["method"] == "tasks/get":
            if record.terminal:  # its outcome is in the view: read
                self.book.result_read(record)
            return task_shapes.current(msg_id, record.view())
        if msg["method"] == "tasks/cancel":
            if self.book.cancel(record, now_ms()):
                self._calls.pop(record.task_id, None)
                round_scope = self._rounds.pop(record.task_id, None)
                if round_scope is not None:
                    round_scope.cancel()  # the bridge cancels the call upstream
                log.info("task cancelled by its client", task=record.task_id[:8])
            return task_shapes.acknowledged(msg_id)
        responses = task_shapes.input_responses(params)
        if responses is None:
            return task_shapes.bad_update(msg_id)
        call = self._calls.get(record.task_id)
        answers = self.book.answer(record, responses) if call is not None else None
        if answers is not None:
            assert call is not None
            self._resume(record, call, answers, link.principal)
        return task_shapes.acknowledged(msg_id)

    def _resume(
        self,
        record: TaskRecord,
        call: tuple[wire.Message, Forward, UpstreamSession],
        answers: dict[str, Any],
        principal: str,
    ) -> None:
        """The call's next round: the original call's retry with the answers
        and the state the task kept."""
        assert self._tg is not None
        call_msg, call_decision, session = call
        params = mrtr_shapes.retry_params(call_msg.get("params"), answers, record.request_state)
        retry = {**call_msg, "params": params}
        task_link = ClientLink(
            send=_discard_async, send_nowait=_discard, principal=principal, transport="task"
        )
        scope = anyio.CancelScope()
        self._rounds[record.task_id] = scope

        async def next_round() -> None:
            with scope:
                reply = await self.bridge.call(task_link, retry, call_decision, session)
                self._settle(record, reply)
            if self._rounds.get(record.task_id) is scope:
                del self._rounds[record.task_id]

        self._tg.start_soon(next_round)

    # -- expiry ------------------------------------------------------------------------------
    async def _expire(self) -> None:
        """Forget tasks past their time to live, stopping the ones that
        still run. Ends when the service's task group is cancelled."""
        interval = min(self.config.tasks_ttl / 10, 60)
        while True:  # each pass sleeps `interval`; cancelled at shutdown
            await anyio.sleep(interval)
            for record in self.book.sweep(anyio.current_time()):
                self._calls.pop(record.task_id, None)
                round_scope = self._rounds.pop(record.task_id, None)
                if round_scope is not None:
                    round_scope.cancel()
                log.info("task expired", task=record.task_id[:8])
