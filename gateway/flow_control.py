"""What happens to a message headed to a peer that is behind reading.

The rule (docs/design.md, "Flow control"): no task ever waits for a peer to
read. A writer toward a peer takes every message at once, or refuses it by
this rule, judged on the bytes already queued toward that peer and nothing
else, so a slow reader costs only the traffic headed to it:

- progress and log notifications are dropped first, once
  `notification_bytes` are queued (they are advice; a reply is not);
- any other message goes while the queue stays within `queue_bytes`;
- a reply that does not fit is replaced by a short error reply under its id,
  so the call still ends; the error goes while the queue stays within
  `queue_bytes + ERROR_ALLOWANCE`, past which everything is dropped;
- a request that does not fit is refused to its sender (it fails at once).

A queue therefore never holds more than `queue_bytes + ERROR_ALLOWANCE` plus
one message. Queues that share a bound (an HTTP principal's streams) are
judged twice, each on its own bytes and all of them on theirs together
(`shared_bounds`): a message goes only if both would take it. Pure: the
transports measure, this decides, `Drops` counts.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass

from gateway import wire

# Notifications that only report on work in progress: the first to go.
LOSSY = frozenset({"notifications/progress", "notifications/message"})
# Room past the queue's bound for the errors that stand in for replies: a
# call always ends, and what a peer that never reads can cost stays bounded.
ERROR_ALLOWANCE = 1 << 20


class Verdict(enum.Enum):
    SEND = "send"
    DROP = "drop"  # dropped and counted
    REPLACE = "replace"  # a reply: send `not_read_reply` in its place
    REFUSE = "refuse"  # a request: its sender gets an error now


@dataclass(frozen=True, slots=True)
class QueueBounds:
    queue_bytes: int
    notification_bytes: int


# `[gateway] max_queued_bytes` and `max_queued_notification_bytes` by default.
DEFAULT_BOUNDS = QueueBounds(16 * 1024 * 1024, 1024 * 1024)


# Every kind of message, for the counts (`kind`).
KINDS = ("reply", "request", "lossy", "notification")


def shared_bounds(each: QueueBounds, total: int) -> QueueBounds:
    """The bounds of several queues together, each bounded by `each`: `total`
    bytes (at least one queue's), and progress and log notifications go
    first once less than one queue's room for other messages is left
    (`queue_bytes - notification_bytes`), so that a reply on any of them
    still finds that much."""
    total = max(total, each.queue_bytes)
    return QueueBounds(total, total - (each.queue_bytes - each.notification_bytes))


def kind(msg: wire.Message) -> str:
    """What a message is, for the rule and for the drop counts."""
    method = msg.get("method")
    if method is None:
        return "reply"
    if "id" in msg:
        return "request"
    return "lossy" if method in LOSSY else "notification"


def verdict(msg: wire.Message, size: int, queued: int, bounds: QueueBounds) -> Verdict:
    """What to do with `msg` (`size` bytes encoded) given `queued` bytes
    already waiting for the peer."""
    after = queued + size
    what = kind(msg)
    if what == "lossy":
        return Verdict.SEND if after <= bounds.notification_bytes else Verdict.DROP
    if after <= bounds.queue_bytes:
        return Verdict.SEND
    if what == "reply":
        return Verdict.REPLACE
    if what == "request":
        return Verdict.REFUSE
    return Verdict.DROP


def not_read_reply(msg: wire.Message, size: int, queue_bytes: int) -> wire.Message:
    """The error that goes in place of a reply the peer's queue cannot take."""
    return wire.gateway_error(
        msg.get("id"),
        wire.INTERNAL_ERROR,
        f"The reply ({size} bytes) was dropped: the peer has not read the "
        f"{queue_bytes} bytes already queued for it",
        reason="peer-not-reading",
    )


def allowance_left(queued: int, size: int, bounds: QueueBounds) -> bool:
    """Whether an error standing in for a reply still fits."""
    return queued + size <= bounds.queue_bytes + ERROR_ALLOWANCE


class Drops:
    """What was not delivered toward one kind of peer, by kind of message."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def count(self, msg: wire.Message) -> None:
        self.counts[kind(msg)] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())
