"""The `http` group's numbers → tables and the goal's verdicts."""

from __future__ import annotations

from bench import floor_goals, http_goals
from bench.floor_goals import Figures
from bench.http_bench import HttpMeasured
from bench.http_setups import HTTP_HTTP, HttpGroup, MrtrHttp
from bench.report import CONCURRENCIES, _ok, _table

GOAL = (
    f"the gateway ≥ {http_goals.PROXY_TPUT_FACTOR:g}x the best other proxy's req/s at c=32 and "
    f"≤ 1/{1 / http_goals.PROXY_LATENCY_SHARE:g} of its added p50, on every path measured"
)
NOT_MEASURED = [
    "mcp-proxy 0.13.0 (PyPI, on mcp 1.30): legacy→legacy only, HTTP → stdio (server "
    "mode) and stdio → HTTP (client mode, `URL --transport streamablehttp`). Its HTTP "
    "front speaks only 2025-11-25 (a modern POST has no session: 400); its client "
    "initializes with the server itself (a modern server refuses it) and its stdio side "
    "is an mcp 1.30 server (a modern client's server/discover: -32602). It does not "
    "front an HTTP server over HTTP.",
    "supergateway 4.0.0: HTTP → stdio legacy→legacy and modern→modern (a modern request "
    "starts a server process of its own, hence ~50 ms a call), stdio → HTTP "
    "(`--streamableHttp URL`) legacy→legacy only (it initializes with the server itself; "
    "a modern client's server/discover is passed to a legacy server: -32601). No era "
    'translation; HTTP ↔ HTTP it refuses ("streamableHttp→streamableHttp not supported").',
    "mcp-remote 0.15.1: stdio → HTTP legacy→legacy only. It is a stdio front to an HTTP "
    "server only, initializes with the server itself before serving its client (a modern "
    "server refuses it: -32022) and passes a modern client's requests on without the "
    "modern HTTP headers (400).",
    "FastMCP 4.2.3 (`create_proxy`, run with mode auto so its backend probes the server's "
    "era; its default mirrors the client's era and fails across eras) serves every path "
    "the bench has, at a fresh backend session per client request. The bench measures "
    "HTTP ↔ HTTP in the two cross-era directions only (the gateway's too).",
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
            *("-" if m.rps_or_none(c) is None else f"{m.rps(c):,.0f}" for c in CONCURRENCIES),
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
    """One line per path with other proxies (issue #12's factors), and the overall goal."""
    lines: list[str] = []
    all_met = True
    measured_any = False
    for g in groups:
        if not g.proxies:
            continue
        measured_any = True
        d = by_key[g.direct.key]
        gw = _figures(by_key[g.gateway.key], d)
        others = {run.kind: _figures(by_key[run.key], d) for run in g.proxies}
        v = http_goals.against_proxies(gw, others)
        all_met &= v.met
        parts = [f"{k} {f.added_p50_us:,.0f} µs, {f.rps_c32:,.0f} req/s" for k, f in others.items()]
        lines.append(
            f"{g.title} against the other proxies (added p50, req/s c=32): gateway "
            f"{gw.added_p50_us:,.0f} µs, {gw.rps_c32:,.0f} req/s; {'; '.join(parts)} {_ok(v.met)}"
            + (f" ({'; '.join(v.misses)})" if v.misses else "")
        )
    if measured_any:
        lines.append(f"{GOAL} {_ok(all_met)}")
    else:
        lines.append(f"{GOAL}: no other proxy measured (bash bench/install_proxies.sh)")
    return lines


def real_server_verdicts(groups: list[HttpGroup], by_key: dict[str, HttpMeasured]) -> list[str]:
    """The real server's paths: gateway req/s ≥ 90 % of direct at c=1, 8, 32."""
    lines: list[str] = []
    for g in groups:
        if not g.real_server:
            continue
        d, w = by_key[g.direct.key], by_key[g.gateway.key]
        v = http_goals.against_direct(
            {c: w.rps(c) for c in CONCURRENCIES}, {c: d.rps(c) for c in CONCURRENCIES}
        )
        shares = "/".join(f"{w.rps(c) / d.rps(c):.0%}" for c in CONCURRENCIES)
        goal = f"≥ {http_goals.REAL_TPUT_SHARE:.0%} of direct req/s at c=1/8/32"
        lines.append(
            f"{g.title} ({goal}): {shares} {_ok(v.met)}"
            + (f" ({'; '.join(v.misses)})" if v.misses else "")
        )
    return lines


def mrtr_added_us(mrtr: MrtrHttp, by_key: dict[str, HttpMeasured]) -> float:
    """What the round trip adds: the interaction's p50 over a plain call's on its path."""
    return by_key[mrtr.run.key].p50_us() - by_key[mrtr.plain.key].p50_us()


def mrtr_line(mrtr: MrtrHttp, by_key: dict[str, HttpMeasured]) -> str:
    m, plain = by_key[mrtr.run.key], by_key[mrtr.plain.key]
    added = mrtr_added_us(mrtr, by_key)
    rates = "/".join(f"{m.rps(c):,.0f}" for c in sorted(m.loads))
    return (
        f"MRTR round trip over HTTP ({mrtr.run.key}: {mrtr.run.label}): p50 "
        f"{m.p50_us():,.0f} µs a whole interaction, {plain.p50_us():,.0f} µs a plain call on "
        f"the same path ({plain.run.key}): adds {added:,.0f} µs; "
        f"{rates} interactions/s at c={'/'.join(str(c) for c in sorted(m.loads))}"
    )


def mrtr_verdicts(mrtr: MrtrHttp, by_key: dict[str, HttpMeasured]) -> list[str]:
    v = http_goals.mrtr_added(mrtr_added_us(mrtr, by_key))
    goal = f"adds ≤ {http_goals.MRTR_ADDED_US:,.0f} µs over a plain call"
    return [
        f"MRTR round trip over HTTP ({goal}) {_ok(v.met)}"
        + (f" ({'; '.join(v.misses)})" if v.misses else "")
    ]


def rss_verdicts(measured: list[HttpMeasured]) -> list[str]:
    """The gateway's peak RSS in every HTTP run it took part in, against 40 MB."""
    gateway = {m.run.key: m.hop_rss_kib for m in measured if m.run.kind == "gateway"}
    if not gateway:
        return []
    v = http_goals.peak_rss(gateway)
    top = max((k for k in gateway.values() if k is not None), default=0)
    return [
        f"gateway peak RSS under load ≤ {http_goals.RSS_LIMIT_MB} MB in every "
        f"HTTP run (highest {top * 1024 / 1e6:.1f} MB) {_ok(v.met)}"
        + (f" ({'; '.join(v.misses)})" if v.misses else "")
    ]


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
