"""The `http` group's numbers → tables and the goal's verdicts."""

from __future__ import annotations

from bench import floor_goals
from bench.floor_goals import Figures
from bench.http_bench import HttpMeasured
from bench.http_setups import HTTP_HTTP, HttpGroup
from bench.report import CONCURRENCIES, _ok, _table

GOAL = "the gateway adds less latency and sustains more throughput than every other proxy measured"
NOT_MEASURED = [
    "mcp-proxy (PyPI, on mcp 1.30) speaks only the 2025-11-25 era to its clients: "
    "no modern client path.",
    "supergateway 4.0.0 passes modern requests through to a modern stdio server, "
    "starting a server process per request; it does not translate between eras.",
    "Neither proxy bridges HTTP to an HTTP server in one process (each fronts stdio "
    "servers only), so the HTTP ↔ HTTP paths compare the gateway with direct HTTP only.",
]


def _mib(kib: int | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.1f}"


def runs_table(measured: list[HttpMeasured]) -> str:
    headers = ["run", "path", "p50 µs", "p99 µs", "p50 µs 2 CPUs"]
    headers += [f"req/s c={c}" for c in CONCURRENCIES]
    headers += ["hop CPU µs/req c=32", "server CPU", "client CPU", "hop RSS MiB", "server MiB"]
    rows = [
        [
            m.run.key,
            m.run.label,
            f"{m.p50_us():.0f}",
            f"{m.pct_us(0.99):.0f}",
            f"{m.pct_us(0.5, pinned=False):.0f}",
            *(f"{m.rps(c):,.0f}" for c in CONCURRENCIES),
            "-" if m.hop_cpu_us is None else f"{m.hop_cpu_us:.0f}",
            f"{m.server_cpu_us:.0f}",
            f"{m.client_cpu_us:.0f}",
            _mib(m.hop_rss_kib),
            _mib(m.server_rss_kib),
        ]
        for m in measured
    ]
    return _table(headers, rows)


def ratios_table(groups: list[HttpGroup], by_key: dict[str, HttpMeasured]) -> str:
    headers = ["path", "hop", "added p50 µs"]
    headers += [f"hop/direct req/s c={c}" for c in CONCURRENCIES]
    rows: list[list[str]] = []
    for g in groups:
        d = by_key[g.direct.key]
        for run in (g.gateway, *g.proxies):
            m = by_key[run.key]
            rows.append(
                [
                    g.title,
                    run.kind,
                    f"{m.p50_us() - d.p50_us():.0f}",
                    *(f"{m.rps(c) / d.rps(c):.3f}" for c in CONCURRENCIES),
                ]
            )
    return _table(headers, rows)


def verdicts(groups: list[HttpGroup], by_key: dict[str, HttpMeasured]) -> list[str]:
    """One line per path with other proxies, and the overall goal."""
    lines: list[str] = []
    all_met = True
    measured_any = False
    for g in groups:
        if not g.proxies:
            continue
        measured_any = True
        d, w = by_key[g.direct.key], by_key[g.gateway.key]
        gw_added = w.p50_us() - d.p50_us()
        missed: list[str] = []
        parts: list[str] = []
        for run in g.proxies:
            p = by_key[run.key]
            added = p.p50_us() - d.p50_us()
            if gw_added >= added:
                missed.append(f"{run.kind} added p50")
            missed += [f"{run.kind} req/s c={c}" for c in CONCURRENCIES if w.rps(c) <= p.rps(c)]
            rates = "/".join(f"{p.rps(c):,.0f}" for c in CONCURRENCIES)
            parts.append(f"{run.kind} {added:.0f} µs, {rates} req/s")
        all_met &= not missed
        rates = "/".join(f"{w.rps(c):,.0f}" for c in CONCURRENCIES)
        lines.append(
            f"{g.title}: added p50 and req/s c=1/8/32 — gateway {gw_added:.0f} µs, {rates} "
            f"req/s; {'; '.join(parts)} {_ok(not missed)}"
            + (f" (behind on: {', '.join(missed)})" if missed else "")
        )
    if measured_any:
        lines.append(f"{GOAL} {_ok(all_met)}")
    else:
        lines.append(f"{GOAL}: no other proxy measured (bash bench/install_proxies.sh)")
    return lines


def _figures(m: HttpMeasured, direct: HttpMeasured) -> Figures:
    return Figures(m.p50_us() - direct.p50_us(), m.rps(32))


def _against_floors(
    g: HttpGroup, by_key: dict[str, HttpMeasured]
) -> tuple[Figures, list[Figures], floor_goals.Verdict]:
    """The gateway's and the floors' figures, and the verdict. On a one-hop path
    the gateway's added p50 is taken over its floor's baseline (the same
    subtrahend for both); HTTP ↔ HTTP over the path's direct HTTP."""
    floors = [_figures(by_key[f.run.key], by_key[f.direct.key]) for f in g.floors]
    if g.path == HTTP_HTTP:
        gw = _figures(by_key[g.gateway.key], by_key[g.direct.key])
        return gw, floors, floor_goals.two_hops(gw, floors[0], floors[1])
    gw = _figures(by_key[g.gateway.key], by_key[g.floors[0].direct.key])
    return gw, floors, floor_goals.one_hop(gw, floors[0])


def floors_table(groups: list[HttpGroup], by_key: dict[str, HttpMeasured]) -> str:
    """The gateway against the floor(s) of its path (issue #12)."""
    headers = ["path", "floor(s) over baseline", "gateway added p50 µs", "floor added p50 µs"]
    headers += ["gw/floor"]
    headers += ["gateway req/s c=32", "floor req/s c=32", "gw/floor c=32"]
    rows: list[list[str]] = []
    for g in groups:
        if not g.floors:
            continue
        gw, floors, verdict = _against_floors(g, by_key)
        two = g.path == HTTP_HTTP
        rows.append(
            [
                g.title,
                " + ".join(f"{f.run.key} over {f.direct.key}" for f in g.floors),
                f"{gw.added_p50_us:.0f}",
                " + ".join(f"{f.added_p50_us:.0f}" for f in floors),
                f"{verdict.latency_ratio:.2f}",
                f"{gw.rps_c32:,.0f}",
                "-" if two else f"{floors[0].rps_c32:,.0f}",
                "-" if verdict.tput_share is None else f"{verdict.tput_share:.2f}",
            ]
        )
    return _table(headers, rows) if rows else ""


def floor_verdicts(groups: list[HttpGroup], by_key: dict[str, HttpMeasured]) -> list[str]:
    """One line per path with a floor: issue #12's thresholds, from this run's figures."""
    lines: list[str] = []
    for g in groups:
        if not g.floors:
            continue
        _, _, v = _against_floors(g, by_key)
        if g.path == HTTP_HTTP:
            goal = f"added p50 ≤ {floor_goals.HTTP_HTTP_RATIO:g}x the two floors' sum"
        else:
            goal = (
                f"added p50 ≤ {floor_goals.LATENCY_RATIO:g}x the floor's, "
                f"c=32 ≥ {floor_goals.TPUT_SHARE:.0%} of the floor's"
            )
        lines.append(
            f"{g.title} against the floor ({goal}) {_ok(v.met)}"
            + (f" ({'; '.join(v.misses)})" if v.misses else "")
        )
    return lines
