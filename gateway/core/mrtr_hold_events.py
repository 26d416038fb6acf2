"""The hold machine's events and commands (core/mrtr_hold.py): what the
runtime tells it about a bridged call, and what it asks the runtime to do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway import wire
from gateway.core import held_call
from gateway.core.engine import Command, Event
from gateway.core.request_state import Claims

CallKey = int  # given by the runtime, one per run of an upstream call


# -- timers ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Expiry:
    """A parked call's state_ttl."""

    key: CallKey


@dataclass(frozen=True, slots=True)
class SessionDue:
    """request_timeout for taking the session: another call may hold it."""

    key: CallKey


@dataclass(frozen=True, slots=True)
class OutcomeDue:
    """request_timeout for the waiting client request: the call must have
    ended or asked for input by then."""

    key: CallKey


@dataclass(frozen=True, slots=True)
class WindDown:
    """A closed call's grace before it is cancelled upstream."""

    key: CallKey


# -- events ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallArrived(Event):
    """A client's call (or a re-run of one) that may need client input."""

    key: CallKey
    client_id: wire.RequestId
    call: held_call.HeldCall
    now: float


@dataclass(frozen=True, slots=True)
class RetryPresented(Event):
    """A client's retry as it came: its requestState not opened yet. `digest`
    is request_state.params_digest of its params."""

    client_id: wire.RequestId
    principal: str
    method: str
    digest: str
    state: object
    input_responses: object
    now: float
    now_ms: int  # wall clock, for the state's expiry


@dataclass(frozen=True, slots=True)
class RetryArrived(Event):
    """A client's retry whose verified state names a parked call."""

    client_id: wire.RequestId
    claims: Claims
    input_responses: object
    now: float


@dataclass(frozen=True, slots=True)
class SessionAcquired(Event):
    key: CallKey
    client_id: wire.RequestId
    now: float


@dataclass(frozen=True, slots=True)
class SessionBusy(Event):
    """The session was given up (GiveUpSession): another call held it for
    request_timeout."""

    key: CallKey
    client_id: wire.RequestId
    now: float


@dataclass(frozen=True, slots=True)
class ServerAsked(Event):
    """The legacy server sent a request while this call holds its session."""

    key: CallKey
    request: wire.Message
    now: float


@dataclass(frozen=True, slots=True)
class ServerCancelledAsk(Event):
    key: CallKey
    upstream_id: wire.RequestId


@dataclass(frozen=True, slots=True)
class UpstreamEnded(Event):
    """The upstream call returned: `reply` is None when it was cancelled;
    `failed` when the session died or timed out (`reply` then says so)."""

    key: CallKey
    reply: wire.Message | None
    failed: bool = False


@dataclass(frozen=True, slots=True)
class InputGathered(Event):
    """The call ended or asked for input, and its requests sent together are in:
    time to answer the waiting client."""

    key: CallKey
    client_id: wire.RequestId
    now: float
    now_ms: int  # wall clock, for the state's expiry
    nonce: str


@dataclass(frozen=True, slots=True)
class WaitTimedOut(Event):
    """The waiting client request found its OutcomeDue timer fired: neither a
    result nor an input request within request_timeout."""

    key: CallKey
    client_id: wire.RequestId
    now: float


@dataclass(frozen=True, slots=True)
class ClientGone(Event):
    """The waiting client request was cancelled (or its client went away)."""

    key: CallKey
    reason: str
    now: float


# -- commands -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplyToClient(Command):
    """The answer to the client request (carrying its id)."""

    reply: wire.Message


@dataclass(frozen=True, slots=True)
class ShapeReply(Command):
    """The upstream call's reply, to be shaped for the client (translation,
    -32042) as the answer to `client_id`."""

    key: CallKey
    client_id: wire.RequestId
    reply: wire.Message


@dataclass(frozen=True, slots=True)
class AnswerServer(Command):
    key: CallKey
    reply: wire.Message


@dataclass(frozen=True, slots=True)
class RefuseServerAsks(Command):
    """Tell the server no answer will come, quietly: its session may be gone."""

    key: CallKey
    replies: tuple[wire.Message, ...]


@dataclass(frozen=True, slots=True)
class AcquireSession(Command):
    """Take the session exclusively, then report SessionAcquired, or
    SessionBusy if told to give up first."""

    key: CallKey
    client_id: wire.RequestId


@dataclass(frozen=True, slots=True)
class GiveUpSession(Command):
    """Stop waiting for the session (its SessionDue timer fired)."""

    key: CallKey


@dataclass(frozen=True, slots=True)
class ReleaseSession(Command):
    key: CallKey


@dataclass(frozen=True, slots=True)
class StartUpstream(Command):
    """Run the upstream call; report UpstreamEnded."""

    key: CallKey


@dataclass(frozen=True, slots=True)
class CancelUpstream(Command):
    key: CallKey


@dataclass(frozen=True, slots=True)
class Wake(Command):
    """What the waiting client request waits for may have happened."""

    key: CallKey


@dataclass(frozen=True, slots=True)
class RerunCall(Command):
    """Run the retried call afresh as a new call (CallArrived): its state
    re-runs it (replay mode with the answers so far, or the -32042 re-send)."""

    client_id: wire.RequestId
    replay_answers: dict[str, Any] | None
    replay_round: int


@dataclass(frozen=True, slots=True)
class AwaitOutcome(Command):
    """Wait for the call's input requests, its end, or its OutcomeDue timer
    (the table's `ready` / `overdue`), then report InputGathered or WaitTimedOut."""

    key: CallKey
    client_id: wire.RequestId


# The commands that name a call (all but the reply, logs and timers).
CallCommand = (
    ShapeReply
    | AnswerServer
    | RefuseServerAsks
    | AcquireSession
    | GiveUpSession
    | ReleaseSession
    | StartUpstream
    | CancelUpstream
    | Wake
    | AwaitOutcome
)
