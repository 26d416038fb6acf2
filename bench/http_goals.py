"""Issue #12's other goals for the `http` group, as pure arithmetic on measured
figures (the floors' are in bench/floor_goals.py): the gateway against the other
proxies, against direct connections to a real server, the MRTR round trip over
HTTP, and the gateway's peak RSS under load.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bench.floor_goals import Figures

PROXY_TPUT_FACTOR = 4.0  # gateway req/s at c=32 ≥ 4 x the best other proxy's
PROXY_LATENCY_SHARE = 0.25  # gateway added p50 ≤ 1/4 of the best other proxy's
REAL_TPUT_SHARE = 0.9  # real server: gateway req/s ≥ 90 % of direct, at every concurrency
MRTR_ADDED_US = 1000.0  # an elicitation round trip over HTTP adds ≤ 1 ms
RSS_LIMIT_MB = 40  # peak RSS ≤ 40 MB (10^6 bytes)
RSS_LIMIT_KIB = RSS_LIMIT_MB * 1_000_000 // 1024


@dataclass(frozen=True, slots=True)
class Verdict:
    met: bool
    misses: tuple[str, ...]


def _verdict(misses: list[str]) -> Verdict:
    return Verdict(not misses, tuple(misses))


def against_proxies(gateway: Figures, proxies: Mapping[str, Figures]) -> Verdict:
    """Per path: the gateway's throughput at c=32 against the best other proxy's
    throughput, and its added p50 against the best (lowest) other proxy's."""
    if not proxies:
        return _verdict([])
    fastest = max(proxies, key=lambda name: proxies[name].rps_c32)
    quickest = min(proxies, key=lambda name: proxies[name].added_p50_us)
    misses = []
    best_rps = proxies[fastest].rps_c32
    if gateway.rps_c32 < PROXY_TPUT_FACTOR * best_rps:
        share = gateway.rps_c32 / best_rps if best_rps > 0 else float("inf")
        misses.append(f"c=32 {share:.1f}x {fastest}'s (goal ≥ {PROXY_TPUT_FACTOR:g}x)")
    best_added = proxies[quickest].added_p50_us
    if gateway.added_p50_us > PROXY_LATENCY_SHARE * best_added:
        misses.append(
            f"added p50 {gateway.added_p50_us:.0f} µs > 1/{1 / PROXY_LATENCY_SHARE:g} of "
            f"{quickest}'s {best_added:.0f} µs"
        )
    return _verdict(misses)


def against_direct(gateway_rps: Mapping[int, float], direct_rps: Mapping[int, float]) -> Verdict:
    """A real server: the gateway's req/s at each concurrency ≥ 90 % of direct."""
    misses = []
    for c, direct in sorted(direct_rps.items()):
        share = gateway_rps[c] / direct if direct > 0 else 0.0
        if share < REAL_TPUT_SHARE:
            misses.append(f"c={c} {share:.0%} of direct (goal ≥ {REAL_TPUT_SHARE:.0%})")
    return _verdict(misses)


def mrtr_added(added_us: float) -> Verdict:
    """What an elicitation round trip adds over HTTP, against 1 ms."""
    if added_us <= MRTR_ADDED_US:
        return _verdict([])
    return _verdict([f"adds {added_us:,.0f} µs (goal ≤ {MRTR_ADDED_US:,.0f} µs)"])


def peak_rss(by_run: Mapping[str, int | None]) -> Verdict:
    """Every gateway run's peak RSS (KiB; None: not read) ≤ 40 MB."""
    misses = [f"{run}: no peak RSS read" for run, kib in by_run.items() if kib is None]
    misses += [
        f"{run}: {kib * 1024 / 1e6:.1f} MB"
        for run, kib in by_run.items()
        if kib is not None and kib > RSS_LIMIT_KIB
    ]
    return _verdict(misses)
