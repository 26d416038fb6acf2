"""A modern server's `input_required` or task, answered for a legacy
client (DESIGN §5.2.5; 2026-07-28 basic/patterns/mrtr "Client Behavior";
the tasks extension, SEP-2663).

The input requests become server requests to the legacy client; their
answers go back upstream as `inputResponses` on a retry carrying the
server's exact `requestState`, until the server completes, in bounded
rounds. A task (`resultType: "task"`, which the server may answer a
`tools/call` with since the gateway declares the extension for legacy
clients) is polled with `tasks/get` at the server's `pollIntervalMs`
until it ends, its result or error becoming the call's; a task waiting
for input has its `inputRequests` asked of the client the same way, the
answers going back with `tasks/update`. `LegacyInputCall` is one call's
loop as a machine: the runtime (runtime/legacy_input.py) asks the client,
sends the retries and polls, and tells it what came back; what the gateway
answers itself carries the client's id.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway import wire
from gateway.core import mrtr_shapes, task_shapes, upstream_checks
from gateway.core.engine import Command, Event
from gateway.core.mrtr_bridge import requests_for_legacy_client
from gateway.core.routing import Forward


@dataclass(frozen=True, slots=True)
class UpstreamReplied(Event):
    """`now`: the runtime's clock when it came (seconds), for a task's bounds."""

    reply: wire.Message
    now: float = 0.0


@dataclass(frozen=True, slots=True)
class ClientAnswered(Event):
    """Every request of the round answered: the results by input key."""

    answers: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ClientRefused(Event):
    """The client refused a request of the round, or went away."""

    why: str


@dataclass(frozen=True, slots=True)
class ClientTimedOut(Event):
    after: float


@dataclass(frozen=True, slots=True)
class AskClient(Command):
    """Send these to the client at once, each under a gateway id; answer
    with ClientAnswered, ClientRefused or ClientTimedOut."""

    requests: dict[str, wire.Message]


@dataclass(frozen=True, slots=True)
class RetryUpstream(Command):
    """Send the retry; answer with UpstreamReplied."""

    forward: Forward


@dataclass(frozen=True, slots=True)
class PollUpstream(Command):
    """Send `forward` (a tasks/get) after `delay` seconds; answer with
    UpstreamReplied."""

    forward: Forward
    delay: float


@dataclass(frozen=True, slots=True)
class TaskPolling:
    """How the gateway polls a task for a legacy client: the interval when
    the server suggests none, the bounds on the one it suggests, and the
    longest it waits for a task to end ([tasks] in the config)."""

    default_interval: float = 1.0
    min_interval: float = 0.05
    max_interval: float = 30.0
    max_wait: float = 3600.0


@dataclass(frozen=True, slots=True)
class Finish(Command):
    """The reply the client gets (still in the server's shape when it came
    from the server; the runtime shapes it)."""

    reply: wire.Message


class LegacyInputCall:
    def __init__(
        self,
        decision: Forward,
        client_id: wire.RequestId,
        client_capabilities: dict[str, Any],
        client_version: str,
        max_rounds: int,
        new_elicitation_id: Callable[[], str],
        polling: TaskPolling | None = None,
    ) -> None:
        self.decision = decision
        self.client_id = client_id
        self.capabilities = client_capabilities
        self.version = client_version
        self.max_rounds = max_rounds
        self.new_elicitation_id = new_elicitation_id
        self.polling = polling or TaskPolling()
        self.rounds = 0  # rounds the client was asked
        self.polls = 0  # tasks/get sent
        self._state: object = None  # the requestState of the round in progress
        # The server's task while it has not ended: the runtime cancels it
        # upstream (tasks/cancel) if the loop ends first.
        self.open_task: str | None = None
        self._task_input = False  # the round in progress answers a task's inputRequests
        self._updating = False  # the reply awaited is a tasks/update's
        self._deadline = 0.0

    def handle(self, event: Event) -> list[Command]:
        if isinstance(event, UpstreamReplied):
            if self.open_task is not None:
                return [self._task_replied(event.reply, event.now)]
            return [self._replied(event.reply, event.now)]
        if isinstance(event, ClientAnswered):
            if self._task_input:
                assert self.open_task is not None
                self._task_input = False
                self._updating = True
                update = self._task_request(
                    "tasks/update", {mrtr_shapes.INPUT_RESPONSES: event.answers}
                )
                return [RetryUpstream(update)]
            params = mrtr_shapes.retry_params(self.decision.params, event.answers, self._state)
            return [RetryUpstream(dataclasses.replace(self.decision, params=params))]
        if isinstance(event, ClientRefused):
            return [self._error(event.why, "client-refused")]
        if isinstance(event, ClientTimedOut):
            return [
                self._error(
                    "The client did not answer the server's input requests within "
                    f"{event.after:g}s",
                    "client-timeout",
                )
            ]
        raise AssertionError(event)

    def _replied(self, reply: wire.Message, now: float) -> Command:
        result = reply.get("result")
        if task_shapes.is_task(result):
            return self._task_created(result, now)
        if not mrtr_shapes.is_input_required(result):
            return Finish(reply)
        if self.rounds >= self.max_rounds:
            return self._error(
                f"The server asked for input more than {self.max_rounds} times", "mrtr-rounds"
            )
        problem = upstream_checks.input_required_problem(result)
        if problem is not None:
            return self._error(
                f"Upstream sent a malformed reply: {problem}", upstream_checks.MALFORMED
            )
        command = self._ask(result.get(mrtr_shapes.INPUT_REQUESTS) or {})
        if isinstance(command, AskClient):
            self._state = result.get(mrtr_shapes.REQUEST_STATE)
        return command

    def _ask(self, input_requests: dict[str, Any]) -> Command:
        """A round of server requests for the client, within max_rounds."""
        if self.rounds >= self.max_rounds:
            return self._error(
                f"The server asked for input more than {self.max_rounds} times", "mrtr-rounds"
            )
        requests = requests_for_legacy_client(
            input_requests,
            self.capabilities,
            self.version,
            new_elicitation_id=self.new_elicitation_id,
        )
        if isinstance(requests, str):
            return self._error(
                f"The server needs client input the gateway cannot get: {requests}",
                "input-unavailable",
            )
        self.rounds += 1
        return AskClient(requests)

    # -- a task (SEP-2663) -------------------------------------------------------
    def _task_created(self, task: dict[str, Any], now: float) -> Command:
        problem = task_shapes.task_problem(task)
        if problem is not None:
            return self._error(
                f"Upstream sent a malformed reply: {problem}", upstream_checks.MALFORMED
            )
        self.open_task = task["taskId"]
        # The task's own time to live bounds the wait, and so does the gateway's.
        ttl = task_shapes.ttl_seconds(task)
        wait = self.polling.max_wait if ttl is None else min(ttl, self.polling.max_wait)
        self._deadline = now + wait
        return self._task_status(task, now)

    def _task_replied(self, reply: wire.Message, now: float) -> Command:
        task_id = self.open_task
        if "error" in reply:
            error = reply["error"]
            why = error.get("message") if isinstance(error, dict) else None
            self.open_task = None  # the server no longer knows it: nothing to cancel
            return self._error(f"The server's task {task_id} was lost: {why}", "task-lost")
        if self._updating:
            # The server took the answers (an empty acknowledgement, "eventually
            # consistent"): ask at once what the task does now.
            self._updating = False
            return self._poll(0.0)
        result = reply.get("result")
        problem = task_shapes.task_problem(result)
        if problem is None and isinstance(result, dict) and result.get("taskId") != task_id:
            problem = "tasks/get answered with another task"
        if problem is not None:
            return self._error(
                f"Upstream sent a malformed reply: {problem}", upstream_checks.MALFORMED
            )
        assert isinstance(result, dict)
        return self._task_status(result, now)

    def _task_status(self, task: dict[str, Any], now: float) -> Command:
        status = task["status"]
        if status == task_shapes.COMPLETED:
            self.open_task = None
            return Finish(wire.result_response(self.client_id, task["result"]))
        if status == task_shapes.FAILED:
            # The JSON-RPC error the call itself would have failed with.
            self.open_task = None
            return Finish(task_shapes.failed_reply(self.client_id, task["error"]))
        if status == task_shapes.CANCELLED:
            self.open_task = None
            return self._error(f"The server cancelled its task {task['taskId']}", "task-cancelled")
        if now >= self._deadline:
            return self._error(
                f"The server's task {task['taskId']} did not end within the time the "
                "gateway waits for it",
                "task-timeout",
            )
        if status == task_shapes.INPUT_REQUIRED:
            return self._ask_for_task(task["inputRequests"])
        return self._poll(
            task_shapes.poll_delay(
                task,
                self.polling.default_interval,
                self.polling.min_interval,
                self.polling.max_interval,
            )
        )

    def _ask_for_task(self, input_requests: dict[str, Any]) -> Command:
        command = self._ask(input_requests)
        self._task_input = isinstance(command, AskClient)
        return command

    def _poll(self, delay: float) -> Command:
        self.polls += 1
        return PollUpstream(self._task_request("tasks/get"), delay)

    def _task_request(self, method: str, fields: dict[str, Any] | None = None) -> Forward:
        """A tasks/* request for the open task, with the call's `_meta` (its
        protocol version and the capabilities declaring the extension)."""
        assert self.open_task is not None
        params = task_shapes.request_params(self.open_task, **(fields or {}))
        meta = (self.decision.params or {}).get("_meta")
        if isinstance(meta, dict):
            params["_meta"] = meta
        return dataclasses.replace(self.decision, method=method, params=params)

    def cancel_request(self) -> Forward | None:
        """The tasks/cancel for a task the loop leaves open (the client went
        away, or the gateway gave up), or None."""
        return None if self.open_task is None else self._task_request("tasks/cancel")

    def _error(self, message: str, reason: str) -> Finish:
        return Finish(
            wire.gateway_error(self.client_id, wire.INTERNAL_ERROR, message, reason=reason)
        )


def refusal(method: str, answer: wire.Message) -> str | None:
    """Why a client's answer to a request of the round is a refusal, or None."""
    if "error" not in answer:
        return None
    err = answer["error"]
    if not isinstance(err, dict):
        return f"The client refused the server's {method} request"
    return (
        f"The client refused the server's {method} request: {err.get('code')} {err.get('message')}"
    )
