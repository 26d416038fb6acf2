"""Issue #12's goals for the `http` group besides the floors (bench/http_goals.py):
the verdicts are arithmetic on measured figures, so their thresholds are checked here."""

from __future__ import annotations

from bench.floor_goals import Figures
from bench.http_goals import against_direct, against_proxies, mrtr_added, peak_rss


def test_against_proxies_at_the_thresholds() -> None:
    """#12: "the gateway ≥ 4x the best of them in throughput at c=32 and ≤ 1/4 of
    their added p50" — both bounds inclusive, each against the best proxy."""
    proxies = {"mcp-proxy": Figures(600.0, 2_000.0), "supergateway": Figures(400.0, 2_500.0)}
    assert against_proxies(Figures(100.0, 10_000.0), proxies).met


def test_against_proxies_names_the_best_proxy_it_falls_short_of() -> None:
    proxies = {"mcp-proxy": Figures(600.0, 2_000.0), "supergateway": Figures(400.0, 2_500.0)}
    verdict = against_proxies(Figures(101.0, 9_999.0), proxies)
    assert not verdict.met
    assert len(verdict.misses) == 2
    assert "supergateway" in verdict.misses[0] and "4.0x" in verdict.misses[0]
    assert "supergateway's 400 µs" in verdict.misses[1]


def test_against_proxies_with_none_measured_is_no_claim() -> None:
    assert against_proxies(Figures(1e6, 0.0), {}).met


def test_against_direct_at_every_concurrency() -> None:
    """#12: "≥ 90 % of direct throughput at c=1, 8, 32"."""
    direct = {1: 1_000.0, 8: 2_000.0, 32: 3_000.0}
    assert against_direct({1: 900.0, 8: 1_800.0, 32: 2_700.0}, direct).met
    verdict = against_direct({1: 900.0, 8: 1_700.0, 32: 2_700.0}, direct)
    assert verdict.misses == ("c=8 85% of direct (goal ≥ 90%)",)


def test_mrtr_added_one_millisecond() -> None:
    """#12: "the MRTR round trip over HTTP adds ≤ 1 ms"."""
    assert mrtr_added(1000.0).met
    assert not mrtr_added(1000.5).met


def test_peak_rss_40_megabytes() -> None:
    """#12: "Peak RSS under load ≤ 40 MB" (10^6 bytes), for every gateway run."""
    assert peak_rss({"h-gw-ML": 39_062, "h-gw-LM": 30_000}).met
    verdict = peak_rss({"h-gw-ML": 39_063, "h-gw-LM": None})
    assert not verdict.met
    assert verdict.misses == ("h-gw-LM: no peak RSS read", "h-gw-ML: 40.0 MB")
