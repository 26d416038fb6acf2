"""Numbers → tables: per-run figures, per-group ratios against the baselines, goals."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.client import LoadResult
from bench.setups import ROOT, Group, MrtrGroup, Run

CONCURRENCIES = (1, 8, 32)
MRTR_CONCURRENCIES = (1, 8)  # interactions in flight in the MRTR runs
LATENCY_GOAL = 1.5  # gateway added p50 ≤ 1.5 x relay added p50
RELAY_TPUT_GOAL = 0.6  # gateway/relay requests/s at c=32
REAL_TPUT_GOAL = 0.9  # gateway/direct requests/s at c=32, real SDK server
MRTR_ADDED_GOAL_US = 2000.0  # MRTR round trip: gateway p50 - direct p50
PARKED_GOAL_KIB = 20.0  # memory per parked call (traced)


def concurrencies(run: Run) -> tuple[int, ...]:
    return MRTR_CONCURRENCIES if run.work == "ask" else CONCURRENCIES


@dataclass(slots=True)
class Measured:
    run: Run
    latency: LoadResult  # c=1, every process pinned to one CPU
    loads: dict[int, LoadResult]  # by concurrency, both CPUs
    rss_kib: int | None
    children_rss_kib: int | None
    cpu_us: float  # CPU µs per request (interaction) of the process at the top concurrency
    children_cpu_us: float  # ... and of its descendants together

    def pct_us(self, q: float, pinned: bool = True) -> float:
        lat = sorted((self.latency if pinned else self.loads[1]).latencies_ns)
        return lat[min(len(lat) - 1, int(q * len(lat)))] / 1000

    def p50_us(self) -> float:
        """The pinned p50, robust to bursts of other work: the lowest p50 of
        SLICES consecutive slices of the phase (a hop's cost does not change
        within a phase; interference only adds)."""
        return _sliced_p50_ns(self.latency) / 1000

    def rps(self, c: int) -> float:
        return self.loads[c].rps


SLICES = 5


def _sliced_p50_ns(result: LoadResult) -> int:
    lat = result.latencies_ns
    size = max(1, len(lat) // SLICES)
    slices = [sorted(lat[i : i + size]) for i in range(0, len(lat) - size + 1, size)]
    return min(s[len(s) // 2] for s in slices)


def best_of(rounds: list[Measured]) -> Measured:
    """One run's rounds combined: other load on the machine only ever makes a
    figure worse, so keep the best of each (lowest latency, highest req/s, lowest
    CPU per request, highest peak RSS)."""
    first = rounds[0]
    return Measured(
        first.run,
        min((m.latency for m in rounds), key=_sliced_p50_ns),
        {c: max((m.loads[c] for m in rounds), key=lambda r: r.rps) for c in first.loads},
        max((m.rss_kib for m in rounds if m.rss_kib is not None), default=None),
        max((m.children_rss_kib for m in rounds if m.children_rss_kib is not None), default=None),
        min(m.cpu_us for m in rounds),
        min(m.children_cpu_us for m in rounds),
    )


def _mib(kib: int | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.1f}"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def runs_table(measured: list[Measured]) -> str:
    headers = ["run", "path", "p50 µs", "p99 µs", "p50 µs 2 CPUs"]
    headers += [f"req/s c={c}" for c in CONCURRENCIES]
    headers += ["CPU µs/req c=32", "children CPU", "peak RSS MiB", "children MiB"]
    rows = [
        [
            m.run.key,
            m.run.label,
            f"{m.p50_us():.0f}",
            f"{m.pct_us(0.99):.0f}",
            f"{m.pct_us(0.5, pinned=False):.0f}",
            *(f"{m.rps(c):,.0f}" for c in CONCURRENCIES),
            f"{m.cpu_us:.0f}",
            f"{m.children_cpu_us:.0f}" if m.children_rss_kib is not None else "-",
            _mib(m.rss_kib),
            _mib(m.children_rss_kib),
        ]
        for m in measured
    ]
    return _table(headers, rows)


def mrtr_table(measured: list[Measured]) -> str:
    top = MRTR_CONCURRENCIES[-1]
    headers = ["run", "path", "p50 µs", "p99 µs", "p50 µs 2 CPUs"]
    headers += [f"interactions/s c={c}" for c in MRTR_CONCURRENCIES]
    headers += [f"CPU µs/interaction c={top}", "children CPU", "peak RSS MiB", "children MiB"]
    rows = [
        [
            m.run.key,
            m.run.label,
            f"{m.p50_us():.0f}",
            f"{m.pct_us(0.99):.0f}",
            f"{m.pct_us(0.5, pinned=False):.0f}",
            *(f"{m.rps(c):,.0f}" for c in MRTR_CONCURRENCIES),
            f"{m.cpu_us:.0f}",
            f"{m.children_cpu_us:.0f}" if m.children_rss_kib is not None else "-",
            _mib(m.rss_kib),
            _mib(m.children_rss_kib),
        ]
        for m in measured
    ]
    return _table(headers, rows)


def mrtr_ratios(group: MrtrGroup, by_key: dict[str, Measured]) -> tuple[str, list[str]]:
    """The MRTR round trip against the direct one, and its goal's verdict."""
    d = by_key[group.direct.key]
    headers = ["path", "added p50 µs", "added p99 µs"]
    headers += [f"gw/direct interactions/s c={c}" for c in MRTR_CONCURRENCIES]
    rows = []
    runs = ((group.gateway, group.title), (group.no_window, "… input_batch_window 1 ms"))
    for run, title in runs:
        w = by_key[run.key]
        rows.append(
            [
                title,
                f"{w.p50_us() - d.p50_us():.0f}",
                f"{w.pct_us(0.99) - d.pct_us(0.99):.0f}",
                *(f"{w.rps(c) / d.rps(c):.3f}" for c in MRTR_CONCURRENCIES),
            ]
        )
    added = by_key[group.gateway.key].p50_us() - d.p50_us()
    verdict = (
        f"{group.title}: added p50 {added:.0f} µs over the direct round trip "
        f"(goal ≤ {MRTR_ADDED_GOAL_US:.0f} µs) {_ok(added <= MRTR_ADDED_GOAL_US)}"
    )
    return _table(headers, rows), [verdict]


def parked_section(parked: dict[str, Any]) -> tuple[str, list[str]]:
    """bench/parked_memory.py's figures, and the memory goal's verdict."""
    kib = parked["traced_bytes_per_call"] / 1024
    state_b = parked["state_bytes_per_call"]
    rss_kib = parked["rss_bytes_per_call"] / 1024
    session_kib = parked["traced_bytes_per_session"] / 1024
    rows = [
        ["traced per parked call (the goal's figure)", f"{kib:.2f} KiB"],
        ["its requestState, sent to the client, not kept", f"{state_b:.0f} B"],
        ["RSS growth per parked call, warm process", f"{rss_kib:.2f} KiB"],
        ["traced per legacy session (not per call)", f"{session_kib:.1f} KiB"],
    ]
    rows += [
        [f"site: `{_short(site)}`", f"{size:.0f} B in {count:.1f} blocks"]
        for site, size, count in parked["top_sites"][:5]
    ]
    table = _table([f"{parked['calls']} parked calls, one per session", "per call"], rows)
    verdict = (
        f"memory per parked call {kib:.1f} KiB traced (goal < {PARKED_GOAL_KIB:g} KiB) "
        f"{_ok(kib < PARKED_GOAL_KIB)}"
    )
    return table, [verdict]


def _short(site: str) -> str:
    """A file:line without the install prefix."""
    for marker in (f"{ROOT}/", "site-packages/", "/lib/"):
        if marker in site:
            return site.split(marker, 1)[1]
    return site


def _ok(met: bool) -> str:
    return "✅ met" if met else "❌ missed"


def ratios_table(groups: list[Group], by_key: dict[str, Measured]) -> tuple[str, list[str]]:
    """The ratio table and one line per goal verdict."""
    headers = ["path", "added p50 µs gateway", "added p50 µs relay", "gw/relay added"]
    headers += ["gw/relay req/s c=32", "gw/direct req/s c=1", "c=8", "c=32"]
    rows: list[list[str]] = []
    verdicts: list[str] = []
    for g in groups:
        d, r, w = by_key[g.direct.key], by_key[g.relay.key], by_key[g.gateway.key]
        gw_added = w.p50_us() - d.p50_us()
        relay_added = r.p50_us() - d.p50_us()
        lat_ratio = gw_added / relay_added if relay_added > 0 else float("nan")
        vs_relay = w.rps(32) / r.rps(32)
        vs_direct = {c: w.rps(c) / d.rps(c) for c in CONCURRENCIES}
        rows.append(
            [
                g.title,
                f"{gw_added:.0f}",
                f"{relay_added:.0f}",
                f"{lat_ratio:.2f}x",
                f"{vs_relay:.2f}",
                *(f"{vs_direct[c]:.2f}" for c in CONCURRENCIES),
            ]
        )
        if relay_added > 0:
            verdicts.append(
                f"{g.title}: added p50 {lat_ratio:.3f}x relay's (goal ≤ {LATENCY_GOAL}) "
                f"{_ok(lat_ratio <= LATENCY_GOAL)}"
            )
        else:
            verdicts.append(f"{g.title}: relay added no measurable latency; ratio not defined")
        if g.real_server:
            verdicts.append(
                f"{g.title}: throughput c=32 gateway/direct {vs_direct[32]:.3f} "
                f"(goal ≥ {REAL_TPUT_GOAL}) {_ok(vs_direct[32] >= REAL_TPUT_GOAL)}"
            )
        else:
            verdicts.append(
                f"{g.title}: throughput c=32 gateway/relay {vs_relay:.3f} "
                f"(goal ≥ {RELAY_TPUT_GOAL}) {_ok(vs_relay >= RELAY_TPUT_GOAL)}"
            )
    return _table(headers, rows), verdicts


def machine_info(other_cpus: float) -> dict[str, str]:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass

    def git(*args: str) -> str:
        try:
            out = subprocess.run(
                ["git", *args], check=False, cwd=ROOT, capture_output=True, text=True, timeout=10
            )
            return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return "?"

    dirty = " (gateway/ has uncommitted changes)" if git("status", "--porcelain", "gateway") else ""
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": f"{os.cpu_count()} (usable: {len(os.sched_getaffinity(0))})",
        "cpu": model,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "os": platform.platform(),
        "commit": git("rev-parse", "--short", "HEAD") + dirty,
        # Other work on the machine skews every figure (req/s most of all).
        "other load": f"{other_cpus:.2f} CPUs busy on average with work not ours during the run",
    }


def markdown(
    info: dict[str, str], settings: str, sections: list[tuple[str, str]], verdicts: list[str]
) -> str:
    head = "\n".join(f"- **{k}**: {v}" for k, v in info.items())
    body = "".join(f"## {title}\n\n{text}\n\n" for title, text in sections if text)
    goals = "\n".join(f"- {v}" for v in verdicts)
    # The sse group alone sets no goal: no empty section then.
    tail = f"## Goals\n\n{goals}\n" if verdicts else ""
    return (
        "# mcp-era-gateway benchmark results\n\n"
        f"{head}\n- **settings**: {settings}\n\n"
        "Generated by `python -m bench.run`; see bench/README.md for what each number means.\n\n"
        f"{body}{tail}"
    ).rstrip("\n") + "\n"
