"""How long to wait before trying a failed upstream again: one formula for
every place that retries (restarts, the start-up probe, dropped listens)."""

from __future__ import annotations

# 2 ** 62 * any sane initial delay is past any maximum: stop doubling there,
# so a long outage cannot overflow the float.
_MAX_DOUBLINGS = 62


def delay(failures: int, initial: float, maximum: float) -> float:
    """Seconds to wait after `failures` failures in a row: none after none,
    then `initial`, doubling each time, never more than `maximum`."""
    if failures <= 0:
        return 0.0
    doublings: int = min(failures - 1, _MAX_DOUBLINGS)
    return min(initial * float(2**doublings), maximum)


class Failures:
    """Failed starts and crashes since the upstream last answered its
    handshake, and when the last one was (on the caller's clock): the
    backoff grows with them."""

    __slots__ = ("count", "last")

    def __init__(self) -> None:
        self.count = 0
        self.last = 0.0

    def failed(self, now: float) -> None:
        self.count += 1
        self.last = now

    def healthy(self) -> None:
        """The upstream started and answered: whatever failed before is over,
        and the next failure starts the backoff afresh."""
        self.count = 0

    def delay(self, initial: float, maximum: float) -> float:
        """The backoff after the failures so far (0 once the upstream answered)."""
        return delay(self.count, initial, maximum)

    def wait_left(self, now: float, initial: float, maximum: float) -> float:
        """Seconds still to wait before the next attempt (<= 0: go now)."""
        return self.last + self.delay(initial, maximum) - now
