"""A modern client's call on a legacy session that may need client input
(DESIGN §5.1.6-5.1.8): the server requests it has collected, the rounds it
has had, and the retry that answers them. Pure; core/mrtr_hold.py runs it,
core/mrtr_bridge.py has the translations it uses."""

from __future__ import annotations

from typing import Any

from gateway import wire
from gateway.core import mrtr_shapes
from gateway.core.mrtr_bridge import (
    Ask,
    MissingCapability,
    Prefilled,
    RetryOutcome,
    ask_from_server_request,
    check_capability,
    replay_key,
    response_problem,
)
from gateway.core.request_state import Claims, Sealer, StateRejected


class HeldCall:
    """A modern client's call on a legacy session that may need client input.

    Hold mode parks the upstream call between rounds (`handle` names it).
    Replay mode (`replay_answers` given) keeps nothing: the answers so far
    travel in the sealed state and the call is re-run on each retry.
    """

    def __init__(
        self,
        *,
        handle: str | None,
        principal: str,
        method: str,
        digest: str,
        client_caps: dict[str, Any],
        max_rounds: int,
        replay_answers: dict[str, Any] | None = None,
        replay_round: int = 0,
        wait_limit: float | None = None,
    ) -> None:
        self.handle = handle
        # How long a round may wait for the server's outcome; None: the
        # gateway's request_timeout (a task's call waits its time to live).
        self.wait_limit = wait_limit
        self.principal = principal
        self.method = method
        self.digest = digest
        self.client_caps = client_caps
        self.max_rounds = max_rounds
        self.replay_answers = replay_answers
        self.asks: dict[str, Ask] = {}
        self.round = replay_round
        self.consumed = replay_round
        self._seq = 0

    @property
    def replay(self) -> bool:
        return self.replay_answers is not None

    def add_ask(self, msg: wire.Message) -> Ask | Prefilled | MissingCapability | str:
        """Take a server request for the client.

        Returns the Ask to put to the client, the answer already given (replay
        mode), the capability the client lacks, or why a replayed answer is bad.
        """
        method = msg["method"]
        params = msg.get("params")
        missing = check_capability(self.client_caps, method, params)
        if missing is not None:
            return missing
        if self.replay_answers is not None:
            key = replay_key(method, params)
            if key in self.replay_answers:
                answer = self.replay_answers[key]
                problem = response_problem(method, answer)
                if problem is not None:
                    return f"inputResponses[{key!r}] {problem}"
                return Prefilled(answer)
        else:
            self._seq += 1
            key = f"input-{self._seq}"
        ask = ask_from_server_request(key, msg)
        self.asks[ask.key] = ask
        return ask

    def drop_ask(self, upstream_id: wire.RequestId) -> Ask | None:
        """The server cancelled one of its requests."""
        for key, ask in list(self.asks.items()):
            if ask.upstream_id == upstream_id:
                return self.asks.pop(key)
        return None

    def input_required(
        self, sealer: Sealer, *, now_ms: int, ttl_ms: int, nonce: str | None = None
    ) -> dict[str, Any]:
        """The interim result asking the client for every pending input;
        `nonce` names the state (required for replay: see ConsumedStates)."""
        if self.round >= self.max_rounds:
            raise TooManyRounds(self.max_rounds)
        self.round += 1
        token = sealer.seal(
            Claims(
                instance=sealer.instance,
                principal=self.principal,
                method=self.method,
                digest=self.digest,
                round=self.round,
                expires_ms=now_ms + ttl_ms,
                handle=self.handle,
                answers=self.replay_answers or {},
                nonce=nonce,
            )
        )
        return mrtr_shapes.input_required(
            {k: a.as_input_request() for k, a in self.asks.items()}, token
        )

    def check_retry(self, claims: Claims, input_responses: object) -> None:
        """StateRejected if `accept_retry` would reject this retry; changes nothing."""
        if claims.round <= self.consumed:
            raise StateRejected(
                "requestState was already used; send the latest one", reason="state-used"
            )
        if claims.round != self.round:
            raise StateRejected(
                "requestState is not the latest for this request", reason="state-stale"
            )
        if input_responses is None:
            return
        if not isinstance(input_responses, dict):
            raise StateRejected("inputResponses must be an object", reason="input-responses")
        for key, ask in self.asks.items():
            if key in input_responses:
                problem = response_problem(ask.method, input_responses[key])
                if problem is not None:
                    raise StateRejected(
                        f"inputResponses[{key!r}] {problem}", reason="input-responses"
                    )

    def accept_retry(self, claims: Claims, input_responses: object) -> RetryOutcome:
        """Match a verified retry to the pending asks.

        StateRejected (nothing changes, so a correct retry still works) when the
        state is stale or a response is malformed; otherwise the answers to send
        upstream and the keys still missing (2026-07-28 MRTR "Error Handling":
        ask again for what is missing, ignore what was not asked).
        """
        if claims.round <= self.consumed:
            raise StateRejected(
                "requestState was already used; send the latest one", reason="state-used"
            )
        if claims.round != self.round:
            raise StateRejected(
                "requestState is not the latest for this request", reason="state-stale"
            )
        if input_responses is None:
            input_responses = {}
        if not isinstance(input_responses, dict):
            raise StateRejected("inputResponses must be an object", reason="input-responses")
        outcome = RetryOutcome()
        for key, ask in self.asks.items():
            if key not in input_responses:
                outcome.missing.append(key)
                continue
            problem = response_problem(ask.method, input_responses[key])
            if problem is not None:
                raise StateRejected(f"inputResponses[{key!r}] {problem}", reason="input-responses")
            outcome.answers.append((ask, input_responses[key]))
        self.consumed = claims.round
        for ask, _ in outcome.answers:
            del self.asks[ask.key]
        return outcome


class TooManyRounds(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"the request needed more than {limit} input rounds")
