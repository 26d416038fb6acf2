"""How much of a shared pool one principal may hold (issue #29, class 4).

Every pool that principals share (parked MRTR calls, tasks of each kind,
the HTTP front's sessions, upstream processes) has a total and a share:
no principal holds more than its share, so however many slots one takes,
the others still find room. The default share is three quarters of the
total: one principal alone may use most of an idle pool, never all of it.
Pure counting; each pool decides what counts (a completed task does not).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# The operator's line when a pool refuses (once a minute, rate-limited by
# whoever writes it; the principal is in the fields, never in the event).
SHARE_FULL = "a principal has taken its whole share of a shared pool"
POOL_FULL = "a shared pool is full"


def default_share(total: int) -> int:
    """Three quarters of `total`, at least 1 (a pool of one is one's)."""
    return max(1, total * 3 // 4)


@dataclass(frozen=True, slots=True)
class Share:
    total: int
    per_principal: int

    @classmethod
    def of(cls, total: int, per_principal: int = 0) -> Share:
        """`per_principal` 0: the default share of `total`."""
        return cls(total, min(total, per_principal or default_share(total)))


class ShareCount:
    """What each principal holds of one pool. An entry goes when it falls to
    zero, so the table is as big as the principals that hold something."""

    __slots__ = ("by_principal", "share", "total")

    def __init__(self, share: Share) -> None:
        self.share = share
        self.total = 0
        self.by_principal: dict[str, int] = {}

    def held(self, principal: str) -> int:
        return self.by_principal.get(principal, 0)

    def refusal(self, principal: str) -> str | None:
        """Why `principal` may not take one more: "total" when the pool is
        full, "share" when its own share is; None when it may."""
        if self.total >= self.share.total:
            return "total"
        if self.held(principal) >= self.share.per_principal:
            return "share"
        return None

    def take(self, principal: str) -> None:
        self.total += 1
        self.by_principal[principal] = self.held(principal) + 1

    def release(self, principal: str) -> None:
        held = self.held(principal)
        if held <= 0:
            return  # released already: a second release must not free another's slot
        self.total -= 1
        if held == 1:
            del self.by_principal[principal]
        else:
            self.by_principal[principal] = held - 1


def refusal_among(holders: Iterable[str], principal: str, share: Share) -> str | None:
    """ShareCount.refusal for a pool that is counted where it lives: one
    holder's principal per slot taken."""
    total = own = 0
    for holder in holders:
        total += 1
        own += holder == principal
    if total >= share.total:
        return "total"
    if own >= share.per_principal:
        return "share"
    return None
