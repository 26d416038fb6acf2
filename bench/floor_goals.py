"""Issue #12's goals against the floors, as pure arithmetic on measured figures.

A floor is one bare Python hop doing the same transport work with no MCP
logic (bench/http_stdio_floor.py, bench/stdio_http_floor.py). A path through
the gateway is judged by its added p50 (its p50 - its direct run's p50) and
its throughput at c=32, against its floor's; an HTTP ↔ HTTP path by its added
p50 against the sum of the two floors' (front and back).
"""

from __future__ import annotations

from dataclasses import dataclass

LATENCY_RATIO = 1.5  # one-hop paths: gateway added p50 ≤ 1.5 x the floor's
TPUT_SHARE = 0.6  # one-hop paths: gateway req/s at c=32 ≥ 60 % of the floor's
HTTP_HTTP_RATIO = 2.0  # HTTP ↔ HTTP: added p50 ≤ 2 x the sum of both floors' added p50


@dataclass(frozen=True, slots=True)
class Figures:
    added_p50_us: float
    rps_c32: float


@dataclass(frozen=True, slots=True)
class Verdict:
    met: bool
    latency_ratio: float  # gateway added p50 / floor (or floors') added p50
    tput_share: float | None  # gateway c=32 / floor c=32 (None for HTTP ↔ HTTP)
    misses: tuple[str, ...]


def _ratio(a: float, b: float) -> float:
    # A floor that adds nothing measurable makes any added latency infinitely worse.
    if b > 0:
        return a / b
    return float("inf") if a > 0 else 1.0


def one_hop(gateway: Figures, floor: Figures) -> Verdict:
    """HTTP front → stdio back, or stdio front → HTTP back, against its floor."""
    latency = _ratio(gateway.added_p50_us, floor.added_p50_us)
    share = gateway.rps_c32 / floor.rps_c32 if floor.rps_c32 > 0 else 0.0
    misses = []
    if latency > LATENCY_RATIO:
        misses.append(f"added p50 {latency:.2f}x the floor's (goal ≤ {LATENCY_RATIO:g}x)")
    if share < TPUT_SHARE:
        misses.append(f"c=32 {share:.0%} of the floor's (goal ≥ {TPUT_SHARE:.0%})")
    return Verdict(not misses, latency, share, tuple(misses))


def two_hops(gateway: Figures, front: Figures, back: Figures) -> Verdict:
    """HTTP ↔ HTTP against the sum of the HTTP→stdio and stdio→HTTP floors."""
    latency = _ratio(gateway.added_p50_us, front.added_p50_us + back.added_p50_us)
    misses = []
    if latency > HTTP_HTTP_RATIO:
        misses.append(f"added p50 {latency:.2f}x the floors' sum (goal ≤ {HTTP_HTTP_RATIO:g}x)")
    return Verdict(not misses, latency, None, tuple(misses))
