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
