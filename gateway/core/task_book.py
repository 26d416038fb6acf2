"""The tasks the gateway itself runs for modern clients of a legacy server
(issue #16; the 2026-07-28 tasks extension, SEP-2663): a modern client that
declares `io.modelcontextprotocol/tasks` and whose `tools/call` outlasts
`[tasks] after` gets a task handle instead of waiting; the legacy call goes
on, and `tasks/get` shows where it is.

`TaskBook` keeps each task's record: whose it is (a task is found only by
the principal that created it, so an id leaked to another client opens
nothing), its status and what that status carries (the result, the error,
or the input requests and the sealed `requestState` that continues the
call, which never leaves the gateway), and when it expires. Pure: the ids,
the clocks and the replies come from the runtime (runtime/task_runner.py).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gateway import wire
from gateway.core import mrtr_shapes
from gateway.core.fair_share import Share, ShareCount
from gateway.core.task_shapes import (
    CANCELLED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    TERMINAL,
    WORKING,
)


def iso(ms: int) -> str:
    """An ISO 8601 UTC timestamp ("createdAt", "lastUpdatedAt")."""
    stamp = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


@dataclass(eq=False, slots=True)
class TaskRecord:
    task_id: str
    principal: str
    created_ms: int
    expires_at: float  # on the runtime's clock
    ttl_ms: int
    poll_ms: int
    status: str = WORKING
    updated_ms: int = 0
    status_message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None
    # The call's sealed state for the next round; the gateway's own.
    request_state: str | None = None
    # Answers a tasks/update gave to some of the input requests so far.
    answers: dict[str, Any] = field(default_factory=dict)
    # A tasks/update's round in progress: answers go upstream once.
    resuming: bool = False

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def view(self) -> dict[str, Any]:
        """The DetailedTask for tasks/get: the task's fields and what its
        status carries (SEP-2663 "Task Status")."""
        task: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": iso(self.created_ms),
            "lastUpdatedAt": iso(self.updated_ms or self.created_ms),
            "ttlMs": self.ttl_ms,
            "pollIntervalMs": self.poll_ms,
        }
        if self.status_message is not None:
            task["statusMessage"] = self.status_message
        if self.status == COMPLETED and self.result is not None:
            task["result"] = self.result
        elif self.status == FAILED and self.error is not None:
            task["error"] = self.error
        elif self.status == INPUT_REQUIRED and self.input_requests is not None:
            outstanding = {k: v for k, v in self.input_requests.items() if k not in self.answers}
            task["inputRequests"] = outstanding
        return task


class TaskBook:
    """The tasks of one kind. Tasks still running count against `share`
    (SEP-2663 and 2025-11-25 "Resource Management": "limits on concurrent
    tasks per requestor"); an ended task keeps its record for its time to
    live, for tasks/get and tasks/result, but no slot. Ended records are
    bounded by `share` as well: past it the oldest ended record of the
    principal that keeps the most goes, a record whose result was read
    before one whose result was not."""

    def __init__(self, share: Share | int, ttl_ms: int, poll_ms: int) -> None:
        self.share = share if isinstance(share, Share) else Share.of(share)
        self.ttl_ms = ttl_ms
        self.poll_ms = poll_ms
        self.tasks: dict[str, TaskRecord] = {}
        self.created = 0  # tasks created, ever
        self.live = ShareCount(self.share)  # running tasks, by principal
        self.kept = ShareCount(self.share)  # ended records, by principal
        # Ended records, the next to go first.
        self._ended: OrderedDict[str, None] = OrderedDict()

    @property
    def max_live(self) -> int:
        return self.share.total

    def has_room(self, principal: str) -> bool:
        return self.refusal(principal) is None

    def refusal(self, principal: str) -> str | None:
        """Why `principal` may not start one more task ("total": every slot
        is taken; "share": its own share is), or None."""
        return self.live.refusal(principal)

    def create(
        self, task_id: str, principal: str, now: float, now_ms: int, ttl_ms: int | None = None
    ) -> TaskRecord:
        """`ttl_ms`: this task's time to live, when not the book's."""
        assert self.has_room(principal) and task_id not in self.tasks
        ttl = self.ttl_ms if ttl_ms is None else ttl_ms
        record = TaskRecord(
            task_id,
            principal,
            created_ms=now_ms,
            expires_at=now + ttl / 1000,
            ttl_ms=ttl,
            poll_ms=self.poll_ms,
        )
        self.tasks[task_id] = record
        self.live.take(principal)
        self.created += 1
        return record

    def find(self, task_id: object, principal: str, now: float) -> TaskRecord | None:
        """The principal's live task of this id; None for an unknown, an
        expired or another principal's task (they look the same)."""
        if not isinstance(task_id, str):
            return None
        record = self.tasks.get(task_id)
        if record is None or record.principal != principal:
            return None
        if now >= record.expires_at:
            self._forget(record)
            return None
        return record

    def sweep(self, now: float) -> list[TaskRecord]:
        """Forget the tasks past their time to live (SEP-2663: "servers MAY
        ... delete it at any time" after the TTL); the ones that still ran,
        for the runtime to stop."""
        gone = [r for r in self.tasks.values() if now >= r.expires_at]
        for record in gone:
            self._forget(record)
        return [r for r in gone if not r.terminal]

    def result_read(self, record: TaskRecord) -> None:
        """Its client has the ended task's result: the record goes first."""
        if record.task_id in self._ended:
            self._ended.move_to_end(record.task_id, last=False)

    def _forget(self, record: TaskRecord) -> None:
        del self.tasks[record.task_id]
        if record.task_id in self._ended:
            del self._ended[record.task_id]
            self.kept.release(record.principal)
        else:
            self.live.release(record.principal)

    def _ended_now(self, record: TaskRecord) -> None:
        """The task just reached a terminal status: its slot is free, and its
        record joins the ended ones, within their bound."""
        self.live.release(record.principal)
        while self.kept.refusal(record.principal) is not None:
            self._drop_an_ended(record.principal)
        self.kept.take(record.principal)
        self._ended[record.task_id] = None

    def _drop_an_ended(self, principal: str) -> None:
        if self.kept.refusal(principal) == "share":
            victim = principal
        else:  # the book is full: the principal that keeps the most gives one up
            victim = max(self.kept.by_principal, key=self.kept.by_principal.__getitem__)
        task_id = next(t for t in self._ended if self.tasks[t].principal == victim)
        self._forget(self.tasks[task_id])

    # -- what the call's rounds bring -------------------------------------------
    def settle(self, record: TaskRecord, reply: wire.Message, now_ms: int) -> None:
        """The outcome of a round of the task's call (already in the modern
        client's shape): its result, its error, or input it needs."""
        if record.terminal:
            return  # cancelled meanwhile: it stays cancelled
        record.updated_ms = now_ms
        record.resuming = False
        result = reply.get("result")
        if mrtr_shapes.is_input_required(result):
            record.status = INPUT_REQUIRED
            record.input_requests = result.get(mrtr_shapes.INPUT_REQUESTS) or {}
            state = result.get(mrtr_shapes.REQUEST_STATE)
            record.request_state = state if isinstance(state, str) else None
            record.answers = {}
            return
        record.input_requests = None
        record.request_state = None
        if isinstance(result, dict):
            record.status = COMPLETED
            record.result = {k: v for k, v in result.items() if k != "resultType"}
        else:
            error = reply.get("error")
            record.status = FAILED
            record.error = (
                error if isinstance(error, dict) else {"code": -32603, "message": "failed"}
            )
        self._ended_now(record)

    def answer(self, record: TaskRecord, responses: dict[str, Any]) -> dict[str, Any] | None:
        """Take a tasks/update's answers: those for outstanding keys count,
        the rest are ignored ("Task Update Requests"). Every key answered:
        the answers, for the call's next round (once); else None."""
        if record.status != INPUT_REQUIRED or record.resuming:
            return None
        for key, value in responses.items():
            if key in (record.input_requests or {}):
                record.answers[key] = value
        if set(record.answers) != set(record.input_requests or {}):
            return None
        record.resuming = True
        record.status = WORKING
        answers, record.answers = record.answers, {}
        return answers

    def asking(self, record: TaskRecord, now: bool, now_ms: int) -> None:
        """A 2025-11-25 task of the client's own waits for the client's input
        (`input_required`: "the requestor SHOULD call tasks/result") or goes
        on (`working`)."""
        if record.terminal:
            return
        record.status = INPUT_REQUIRED if now else WORKING
        record.updated_ms = now_ms

    def cancel(self, record: TaskRecord, now_ms: int) -> bool:
        """Mark the task cancelled; whether it was still running (a terminal
        task stays as it is: "Cancellation is cooperative")."""
        if record.terminal:
            return False
        record.status = CANCELLED
        record.updated_ms = now_ms
        record.input_requests = None
        record.request_state = None
        record.answers = {}
        self._ended_now(record)
        return True
