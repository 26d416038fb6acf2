"""2025-11-25 tasks for legacy clients of a modern server that offers the
tasks extension (issue #16; core/legacy_tasks.py has the shapes and rules).

A task-augmented `tools/call` is answered at once with the task; the call
runs in the gateway's task group as any legacy client's call to a modern
server does (input rounds and a server task answered through
runtime/legacy_input.py, the input asked of the client on its session), and
its reply settles the task. `tasks/result` waits for that, within the
task's time to live; `tasks/cancel` stops the call, which cancels a
server task upstream. Each task is its client's: found only by the principal
that created it, listed only to the link (session) that did.
"""

from __future__ import annotations

import secrets

import anyio
import structlog
from anyio.abc import TaskGroup

from gateway import wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.core import legacy_tasks, task_shapes
from gateway.core.routing import Forward
from gateway.core.task_book import TaskBook, TaskRecord
from gateway.core.task_shapes import CANCELLED
from gateway.core.upstream_failures import failure_reply
from gateway.runtime.held_call_runner import now_ms
from gateway.runtime.legacy_input import LegacyInputLoop
from gateway.runtime.session_calls import SessionCalls
from gateway.runtime.upstream_session import UpstreamSession
from gateway.share_log import log_refusal
from gateway.upstream_errors import UpstreamError

log = structlog.get_logger("gateway.tasks")


def tell(link: ClientLink, record: TaskRecord) -> None:
    """notifications/tasks/status to the task's client ("Task Notifications":
    optional, so one the client cannot take now is dropped, never waited for)."""
    try:
        link.send_nowait(legacy_tasks.status_notification(record))
    except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
        log.debug("task status notification dropped", task=record.task_id[:8])


class _Asking:
    """The task's status while its client is asked for input, and the
    related-task key on what it is asked."""

    def __init__(self, book: TaskBook, record: TaskRecord, link: ClientLink) -> None:
        self.book = book
        self.record = record
        self.link = link

    def asking(self, now: bool) -> None:
        self.book.asking(self.record, now, now_ms())
        tell(self.link, self.record)

    def related(self, request: wire.Message) -> wire.Message:
        return legacy_tasks.related(request, self.record.task_id)


class LegacyTaskRunner:
    def __init__(
        self, config: Config, on_session: SessionCalls, legacy_input: LegacyInputLoop
    ) -> None:
        self.config = config
        self.on_session = on_session
        self.legacy_input = legacy_input
        self.book = TaskBook(
            config.task_share,
            ttl_ms=int(config.tasks_max_wait * 1000),
            poll_ms=int(config.tasks_poll_interval * 1000),
        )
        self._tg: TaskGroup | None = None
        self._runs: dict[str, anyio.CancelScope] = {}
        self._ended: dict[str, anyio.Event] = {}
        self._owner: dict[str, int] = {}  # task id -> the link (session) that created it

    def start(self, tg: TaskGroup) -> None:
        self._tg = tg
        tg.start_soon(self._expire)

    # -- a task-augmented tools/call -------------------------------------------------------
    def call(
        self, link: ClientLink, msg: wire.Message, decision: Forward, session: UpstreamSession
    ) -> wire.Message:
        """Start the call as a task; the CreateTaskResult."""
        msg_id = msg["id"]
        refusal = self.book.refusal(link.principal)
        if refusal is not None:
            share = self.book.share
            log_refusal(refusal, "legacy clients' tasks", link.principal, share)
            limit = (
                f"[tasks] max_live = {share.total}"
                if refusal == "total"
                else f"{share.per_principal} per principal, [tasks] max_live_per_principal"
            )
            return wire.gateway_error(
                msg_id,
                wire.INTERNAL_ERROR,
                f"Too many tasks in progress ({limit})",
                reason="too-many-tasks",
            )
        assert self._tg is not None
        task_id = secrets.token_urlsafe(24)
        ceiling = int(self.config.tasks_max_wait * 1000)
        ttl = legacy_tasks.requested_ttl_ms(msg.get("params"), ceiling)
        record = self.book.create(task_id, link.principal, anyio.current_time(), now_ms(), ttl)
        scope, ended = anyio.CancelScope(), anyio.Event()
        self._runs[task_id], self._ended[task_id], self._owner[task_id] = scope, ended, link.id
        self._tg.start_soon(self._run, record, link, msg, decision, session, scope, ended)
        log.info("legacy client's task started", task=task_id[:8])
        return legacy_tasks.created(msg_id, record)

    async def _run(
        self,
        record: TaskRecord,
        link: ClientLink,
        msg: wire.Message,
        decision: Forward,
        session: UpstreamSession,
        scope: anyio.CancelScope,
        ended: anyio.Event,
    ) -> None:
        msg_id = msg["id"]
        try:
            with scope, anyio.fail_after(record.ttl_ms / 1000):
                try:
                    # Shielded (it is bounded by request_timeout): a cancel that
                    # came first must not lose the server's answer, which may
                    # name a task of its own to cancel upstream.
                    with anyio.CancelScope(shield=True):
                        reply = await self.on_session.leased_forward(
                            link, decision, session, msg_id
                        )
                    reply = await self.legacy_input.complete(
                        link, decision, session, reply, msg_id, _Asking(self.book, record, link)
                    )
                except UpstreamError as exc:
                    reply = failure_reply(exc, msg_id)
                self.book.settle(
                    record, self.on_session.shape(decision, reply, msg_id, session), now_ms()
                )
        except TimeoutError:
            self.book.settle(
                record,
                wire.gateway_error(
                    msg_id,
                    wire.INTERNAL_ERROR,
                    "The task did not end within its time to live",
                    reason="task-timeout",
                ),
                now_ms(),
            )
        finally:
            self._runs.pop(record.task_id, None)
            ended.set()
        if record.status != CANCELLED:  # the cancel's answer said so already
            tell(link, record)
        log.info("legacy client's task ended", task=record.task_id[:8], status=record.status)

    # -- tasks/get, tasks/result, tasks/list, tasks/cancel ---------------------------------
    async def serve(self, link: ClientLink, msg: wire.Message) -> wire.Message:
        msg_id, method = msg["id"], msg["method"]
        params = msg.get("params") or {}
        now = anyio.current_time()
        if method == "tasks/list":
            mine = [
                r
                for r in list(self.book.tasks.values())
                if self._owner.get(r.task_id) == link.id
                and self.book.find(r.task_id, link.principal, now) is not None
            ]
            return legacy_tasks.listing(msg_id, mine)
        record = self.book.find(params.get("taskId"), link.principal, now)
        if record is None:
            return task_shapes.not_found(msg_id, params.get("taskId"))
        if method == "tasks/get":
            return legacy_tasks.current(msg_id, record)
        if method == "tasks/cancel":
            if not self.book.cancel(record, now_ms()):
                return legacy_tasks.terminal(msg_id, record)
            run = self._runs.pop(record.task_id, None)
            if run is not None:
                run.cancel()  # a server task is cancelled upstream as the call ends
            log.info("legacy client's task cancelled", task=record.task_id[:8])
            return legacy_tasks.current(msg_id, record)
        # tasks/result: blocks until the task ends ("Result Retrieval").
        ended = self._ended.get(record.task_id)
        if ended is not None and not record.terminal:
            # The run ends by the task's ttl (it is bounded by it); the margin
            # lets its own timeout settle the task first.
            margin = self.config.request_timeout
            with anyio.move_on_after(max(0.0, record.expires_at - now) + margin):
                await ended.wait()
        if not record.terminal:
            return task_shapes.not_found(msg_id, record.task_id)  # expired meanwhile
        self.book.result_read(record)
        return legacy_tasks.outcome(msg_id, record)

    # -- expiry ------------------------------------------------------------------------------
    async def _expire(self) -> None:
        """Forget tasks past their time to live. Ends when the service's
        task group is cancelled."""
        interval = min(self.config.tasks_max_wait / 10, 60)
        while True:  # each pass sleeps `interval`; cancelled at shutdown
            await anyio.sleep(interval)
            now = anyio.current_time()
            for record in self.book.sweep(now):
                run = self._runs.pop(record.task_id, None)
                if run is not None:
                    run.cancel()
            for task_id in [t for t in self._ended if t not in self.book.tasks]:
                self._ended.pop(task_id, None)
                self._owner.pop(task_id, None)
