"""The `sse` group's numbers → tables and comparison lines (no goal: issue
#15 asks for the measurement; bench/README.md says how to read it)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.http_bench import HttpMeasured
from bench.http_setups import HttpRun
from bench.report import CONCURRENCIES, _table
from bench.sse_setups import SseGroup

FRONTS = {"sse": "HTTP+SSE", "http": "Streamable HTTP", "stdio": "stdio"}


def hop_name(run: HttpRun) -> str:
    return f"{run.kind} ({FRONTS.get(run.front, run.front)})"


@dataclass(frozen=True, slots=True)
class Compared:
    """One hop against another on the same path, both over the same direct run."""

    added_p50_us: float
    other_added_p50_us: float
    rps: dict[int, float]
    other_rps: dict[int, float]

    @property
    def latency_share(self) -> float | None:
        """The hop's added p50 as a fraction of the other's (< 1: it adds less);
        None when either is at or below zero: below the run's noise (a slow
        server's p50 moves by more than a hop adds), no ratio means anything."""
        if self.added_p50_us <= 0 or self.other_added_p50_us <= 0:
            return None
        return self.added_p50_us / self.other_added_p50_us

    def tput_factor(self, c: int) -> float:
        """The hop's req/s as a multiple of the other's (> 1: it serves more)."""
        return self.rps[c] / self.other_rps[c]


def compare(m: HttpMeasured, other: HttpMeasured, direct: HttpMeasured) -> Compared:
    return Compared(
        m.p50_us() - direct.p50_us(),
        other.p50_us() - direct.p50_us(),
        {c: m.rps(c) for c in CONCURRENCIES},
        {c: other.rps(c) for c in CONCURRENCIES},
    )


def ratios_table(groups: list[SseGroup], by_key: dict[str, HttpMeasured]) -> str:
    """Each hop over its path's direct stdio run."""
    headers = ["path", "hop", "added p50 µs", "added p99 µs"]
    headers += [f"hop/direct req/s c={c}" for c in CONCURRENCIES]
    headers += ["hop CPU µs/req c=32"]
    rows: list[list[str]] = []
    for g in groups:
        d = by_key[g.direct.key]
        for run in g.runs()[1:]:
            m = by_key[run.key]
            rows.append(
                [
                    g.title,
                    hop_name(run),
                    f"{m.p50_us() - d.p50_us():,.0f}",
                    f"{m.pct_us(0.99) - d.pct_us(0.99):,.0f}",
                    *(f"{m.rps(c) / d.rps(c):.3f}" for c in CONCURRENCIES),
                    "-" if m.hop_cpu_us is None else f"{m.hop_cpu_us:,.0f}",
                ]
            )
    return _table(headers, rows)


def _line(what: str, v: Compared, other: str) -> str:
    rates = "; ".join(
        f"c={c} {v.rps[c]:,.0f} against {v.other_rps[c]:,.0f} req/s ({v.tput_factor(c):.2f}x)"
        for c in (1, 32)
    )
    share = v.latency_share
    of = "no ratio: within the noise" if share is None else f"{share:.2f} of {other}'s"
    return (
        f"{what}: added p50 {v.added_p50_us:,.0f} µs against {v.other_added_p50_us:,.0f} µs "
        f"({of}); {rates}"
    )


def comparison_lines(groups: list[SseGroup], by_key: dict[str, HttpMeasured]) -> list[str]:
    """Per path: the gateway's SSE front against supergateway's SSE output and
    against the gateway's own Streamable HTTP front."""
    lines: list[str] = []
    for g in groups:
        d, gw = by_key[g.direct.key], by_key[g.gateway.key]
        if g.supergateway is not None:
            v = compare(gw, by_key[g.supergateway.key], d)
            lines.append(_line(f"{g.title}, gateway against supergateway", v, "supergateway"))
        if g.http is not None:
            v = compare(gw, by_key[g.http.key], d)
            lines.append(
                _line(f"{g.title}, SSE front against Streamable HTTP front", v, "the HTTP front")
            )
    return lines
