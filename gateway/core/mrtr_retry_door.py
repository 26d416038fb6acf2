"""Which retries of a bridged call get through (2026-07-28 basic/patterns/mrtr
"Error Handling"; DESIGN §5.1.6-5.1.8).

A retry's requestState is opened first: one that does not verify, comes from
another gateway instance or principal, or is presented with other params is
-32602 before anything else happens. A state that re-runs the call (replay
mode, the -32042 re-send) is honoured once; one that continues a parked call
goes on to the hold table as RetryArrived.
"""

from __future__ import annotations

from typing import Any

from gateway import wire
from gateway.core import mrtr_bridge as core
from gateway.core import mrtr_hold_replies as replies
from gateway.core.engine import Command, Log
from gateway.core.mrtr_hold_events import ReplyToClient, RerunCall, RetryArrived, RetryPresented
from gateway.core.request_state import Claims, ConsumedStates, Sealer, StateRejected


def admit(
    retry: RetryPresented, sealer: Sealer, spent: ConsumedStates
) -> RetryArrived | list[Command]:
    """The retry for the hold table, or the commands that answer it here."""
    try:
        claims = sealer.open(
            retry.state,
            principal=retry.principal,
            method=retry.method,
            digest=retry.digest,
            now_ms=retry.now_ms,
        )
    except StateRejected as exc:
        return _rejected(retry.client_id, exc)
    if claims.resend:
        refusal = core.url_refusal(retry.input_responses)
        if refusal is not None:
            # The user would not open the link the server requires: re-sending
            # would only meet the same -32042, so the call ends here.
            return [ReplyToClient(replies.url_declined(retry.client_id, refusal))]
        return _rerun(retry, claims, spent, None)
    if claims.handle is None:
        try:
            answers = core.merge_replay_answers(claims, retry.input_responses)
        except StateRejected as exc:
            return [ReplyToClient(replies.invalid(retry.client_id, exc))]
        return _rerun(retry, claims, spent, answers)
    return RetryArrived(retry.client_id, claims, retry.input_responses, retry.now)


def _rerun(
    retry: RetryPresented,
    claims: Claims,
    spent: ConsumedStates,
    answers: dict[str, Any] | None,
) -> list[Command]:
    """Spend a state whose retry re-runs the call. Checked last, so that a
    retry refused for another reason leaves the state usable."""
    try:
        spent.consume(claims, retry.now_ms)
    except StateRejected as exc:
        return _rejected(retry.client_id, exc)
    except ConsumedStates.Full as exc:
        return [
            Log("retry refused", fields={"why": str(exc)}),
            ReplyToClient(replies.rerun_limit(retry.client_id, str(exc))),
        ]
    round_ = claims.round if answers is not None else 0
    return [RerunCall(retry.client_id, answers, round_)]


def _rejected(client_id: wire.RequestId, exc: StateRejected) -> list[Command]:
    return [
        Log("retry rejected", fields={"why": str(exc)}),
        ReplyToClient(replies.invalid(client_id, exc)),
    ]
