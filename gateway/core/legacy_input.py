"""A modern server's `input_required`, answered by a legacy client
(DESIGN §5.2.5; 2026-07-28 basic/patterns/mrtr "Client Behavior").

The input requests become server requests to the legacy client; their
answers go back upstream as `inputResponses` on a retry carrying the
server's exact `requestState`, until the server completes, in bounded
rounds. `LegacyInputCall` is one call's loop as a machine: the runtime
(runtime/legacy_input.py) asks the client, sends the retry, and tells it
what came back; what the gateway answers itself carries the client's id.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway import wire
from gateway.core import mrtr_shapes, upstream_checks
from gateway.core.engine import Command, Event
from gateway.core.mrtr_bridge import requests_for_legacy_client
from gateway.core.routing import Forward


@dataclass(frozen=True, slots=True)
class UpstreamReplied(Event):
    reply: wire.Message


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
    ) -> None:
        self.decision = decision
        self.client_id = client_id
        self.capabilities = client_capabilities
        self.version = client_version
        self.max_rounds = max_rounds
        self.new_elicitation_id = new_elicitation_id
        self.rounds = 0  # rounds the client was asked
        self._state: object = None  # the requestState of the round in progress

    def handle(self, event: Event) -> list[Command]:
        if isinstance(event, UpstreamReplied):
            return [self._replied(event.reply)]
        if isinstance(event, ClientAnswered):
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

    def _replied(self, reply: wire.Message) -> Command:
        result = reply.get("result")
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
        requests = requests_for_legacy_client(
            result.get(mrtr_shapes.INPUT_REQUESTS) or {},
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
        self._state = result.get(mrtr_shapes.REQUEST_STATE)
        return AskClient(requests)

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
