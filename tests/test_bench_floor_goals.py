"""Issue #12's goals against the floors (bench/floor_goals.py): the verdicts
are arithmetic on measured figures, so their thresholds are checked here."""

from __future__ import annotations

from bench.floor_goals import Figures, one_hop, two_hops


def test_one_hop_met_at_the_thresholds() -> None:
    """#12: "added p50 ≤ 1.5x the floor's added p50, and throughput at c=32 ≥ 60 % of
    the floor's" — both bounds are inclusive."""
    verdict = one_hop(Figures(90.0, 6_000.0), Figures(60.0, 10_000.0))
    assert verdict.met
    assert verdict.latency_ratio == 1.5
    assert verdict.tput_share == 0.6
    assert verdict.misses == ()


def test_one_hop_names_each_miss() -> None:
    """The issue's own figures (147 µs vs 60, 6,358 vs 20,575 req/s) miss both goals."""
    verdict = one_hop(Figures(147.0, 6_358.0), Figures(60.0, 20_575.0))
    assert not verdict.met
    assert len(verdict.misses) == 2
    assert "2.45x" in verdict.misses[0]
    assert "31%" in verdict.misses[1]


def test_two_hops_against_the_sum_of_both_floors() -> None:
    """#12: "HTTP ↔ HTTP: added p50 ≤ 2x the sum of the two floors' added p50"."""
    front, back = Figures(60.0, 20_000.0), Figures(100.0, 9_000.0)
    assert two_hops(Figures(320.0, 1.0), front, back).met
    missed = two_hops(Figures(321.0, 1.0), front, back)
    assert not missed.met
    assert missed.tput_share is None


def test_a_floor_that_adds_nothing() -> None:
    """A floor measured at or below direct (noise) cannot make a slower path pass."""
    assert not one_hop(Figures(10.0, 5.0), Figures(0.0, 5.0)).met
    assert one_hop(Figures(0.0, 5.0), Figures(-3.0, 5.0)).latency_ratio == 1.0
