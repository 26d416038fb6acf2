"""The one backoff (gateway.core.backoff), issue #11: "one backoff function"
for restarts, the start-up probe and dropped listens; and the failure count
it grows with, on a clock the caller owns."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.core import backoff


def test_one_backoff_formula_doubles_up_to_its_maximum() -> None:
    assert [backoff.delay(n, 0.25, 10) for n in range(8)] == [0, 0.25, 0.5, 1, 2, 4, 8, 10]
    assert backoff.delay(10_000, 0.25, 10) == 10  # a long outage does not overflow


@given(st.integers(0, 10_000), st.floats(0.001, 60), st.floats(0.001, 3600))
def test_the_delay_never_shrinks_as_failures_grow_and_never_passes_the_maximum(
    failures: int, initial: float, maximum: float
) -> None:
    now = backoff.delay(failures, initial, maximum)
    then = backoff.delay(failures + 1, initial, maximum)
    assert 0 <= now <= then <= maximum


def test_failures_wait_from_the_last_one_and_start_afresh_once_healthy() -> None:
    """Issue: "the restart backoff grows to ~10 s and only resets after 30 s of
    health". Each failure doubles the wait, counted from that failure; an
    upstream that answered again starts the next backoff at the initial delay."""
    failures = backoff.Failures()
    assert failures.wait_left(now=50.0, initial=0.25, maximum=10) <= 0  # none yet: go
    failures.failed(now=100.0)
    assert failures.wait_left(now=100.0, initial=0.25, maximum=10) == 0.25
    failures.failed(now=101.0)
    assert failures.delay(0.25, 10) == 0.5
    assert failures.wait_left(now=101.25, initial=0.25, maximum=10) == 0.25
    assert failures.wait_left(now=101.5, initial=0.25, maximum=10) == 0
    failures.healthy()
    assert failures.delay(0.25, 10) == 0
    failures.failed(now=200.0)
    assert failures.delay(0.25, 10) == 0.25
