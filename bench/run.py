"""Benchmark the gateway against direct connections, a bare relay and other proxies, in one run.

    python -m bench.run [--quick] [--out bench/RESULTS.md] [--requests N]

Not a test: pytest never collects it. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import (
    http_bench,
    http_report,
    http_setups,
    procs,
    report,
    setups,
    sse_report,
    sse_setups,
)
from bench.client import (
    LEGACY_ELICIT_CAPS,
    MODERN_ELICIT_CAPS,
    BenchError,
    Connection,
    LoadResult,
    spawn,
)

GROUP_CODES = ("ml", "ll", "lm", "mm", "py1", "mrtr", "http", "sse")
LIVE: set[Connection] = set()


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="short phases (whole run ~1.5 min)")
    p.add_argument(
        "--out",
        default=str(setups.ROOT / "bench" / "RESULTS.md"),
        help="markdown report path ('' to skip; default bench/RESULTS.md)",
    )
    p.add_argument(
        "--requests",
        type=int,
        metavar="N",
        default=0,
        help="stop each measurement phase after N replies (default: time-bound only)",
    )
    p.add_argument(
        "--seconds",
        type=float,
        metavar="S",
        help="length of each measurement phase (default 1.25, quick 0.5)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        metavar="R",
        help="measure every run R times, interleaved, and keep the best (default 2, quick 1)",
    )
    p.add_argument(
        "--groups",
        default=",".join(GROUP_CODES),
        help=f"comma list of {', '.join(GROUP_CODES)} (default all)",
    )
    p.add_argument(
        "--parked",
        type=int,
        metavar="N",
        default=500,
        help="calls bench/parked_memory.py parks for the mrtr group (default 500)",
    )
    p.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="run the gateway under cProfile, writing DIR/gateway-<run>.prof",
    )
    return p.parse_args(argv)


async def _phase(
    conn: Connection, c: int, seconds: float, cap: int, work: str = "echo"
) -> LoadResult:
    result = await conn.load(c, seconds, cap or 10**9, work)
    if result.errors or conn.bad_lines:
        raise BenchError(
            f"{conn.name}: {result.errors} error replies, {conn.bad_lines} bad lines at c={c};"
            f" first: {result.first_error}"
        )
    # Through the gateway every MRTR interaction is input_required + one retry.
    retries = result.replies if work == "ask" and conn.client_era == "modern" else 0
    if result.follow_ups != retries:
        raise BenchError(f"{conn.name}: {result.follow_ups} retries for {result.replies} calls")
    return result


async def measure(
    run: setups.Run, seconds: float, warmup: float, cap: int, logdir: Path
) -> report.Measured:
    caps = None
    if run.work == "ask":
        caps = LEGACY_ELICIT_CAPS if run.client_era == "legacy" else MODERN_ELICIT_CAPS
    with (logdir / f"{run.key}.stderr").open("wb") as stderr:
        conn = await spawn(
            run.key, list(run.command), run.client_era, stderr, str(setups.ROOT), caps
        )
    LIVE.add(conn)
    levels, work = report.concurrencies(run), run.work
    try:
        await conn.handshake(timeout=60.0)
        await _phase(conn, max(levels), warmup, 0, work)  # warm caches and code paths
        # Latency with every process on one CPU: on 2 cores an unpinned ping-pong is
        # bimodal (same-CPU vs cross-CPU wake-ups), which would swamp a hop's cost.
        # Pin to the CPU that other work leaves most idle right now.
        before = procs.per_cpu_busy()
        await asyncio.sleep(0.1)
        cpu = procs.idlest_cpu(os.sched_getaffinity(0), before, procs.per_cpu_busy())
        with conn.pinned({cpu}):
            await _phase(conn, 1, warmup / 3, 0, work)
            latency = await _phase(conn, 1, seconds, cap, work)
        loads = {c: await _phase(conn, c, seconds, cap, work) for c in levels[:-1]}
        # CPU per request at the top concurrency: stable where req/s is noisy on 2 cores.
        pids = [conn.pid, *conn.tree()]
        cpu0 = [procs.cpu_seconds(pid) or 0.0 for pid in pids]
        top = levels[-1]
        loads[top] = await _phase(conn, top, seconds, cap, work)
        used = [(procs.cpu_seconds(pid) or b) - b for pid, b in zip(pids, cpu0, strict=True)]
        cpu_us = [u / loads[top].replies * 1e6 for u in used]
        rss = procs.vm_hwm_kib(conn.pid)
        kids = [procs.vm_hwm_kib(pid) for pid in conn.tree()]
        children = sum(k for k in kids if k is not None) if kids else None
        return report.Measured(run, latency, loads, rss, children, cpu_us[0], sum(cpu_us[1:]))
    finally:
        await conn.close()
        LIVE.discard(conn)


async def parked_memory(calls: int, logdir: Path) -> dict[str, Any]:
    """Run bench/parked_memory.py (its own process: tracemalloc stays out of the
    other runs) and return its figures."""
    with (logdir / "parked-memory.stderr").open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            *setups.parked_memory(calls),
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            cwd=setups.ROOT,
        )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 600.0)
    except TimeoutError:
        raise BenchError("parked_memory did not finish within 600 s") from None
    finally:
        if proc.returncode is None:
            procs.kill([proc.pid])
            await proc.wait()
    if proc.returncode != 0:
        raise BenchError(f"parked_memory exited with code {proc.returncode}")
    figures: dict[str, Any] = json.loads(out)
    return figures


async def amain(args: argparse.Namespace) -> int:  # noqa: PLR0912, PLR0915 - over the budget: one long procedure still to split
    seconds = args.seconds or (0.5 if args.quick else 1.25)
    warmup = 0.3 if args.quick else 0.7
    if args.rounds is None:
        args.rounds = 1 if args.quick else 2
    if args.requests < 0 or args.rounds < 1 or seconds <= 0 or args.parked < 1:
        print("--requests, --rounds, --seconds and --parked must be positive", file=sys.stderr)
        return 2
    wanted = {c.strip() for c in args.groups.split(",") if c.strip()}
    if not wanted <= set(GROUP_CODES):
        print(f"unknown --groups {sorted(wanted - set(GROUP_CODES))}", file=sys.stderr)
        return 2
    py1_why = setups.py1_missing() if wanted & {"py1", "http", "sse"} else None
    if py1_why:
        print(f"skipping the real SDK server: {py1_why}", file=sys.stderr)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    groups = [g for g in setups.groups(not py1_why, args.profile) if g.code in wanted]
    mrtr = setups.mrtr_group(args.profile) if "mrtr" in wanted else None
    order = setups.runs_in_order(groups) + (list(mrtr.runs()) if mrtr else [])
    proxies_why = http_setups.proxies_missing() if "http" in wanted else {}
    for kind, why in proxies_why.items():
        print(f"http group: not measuring {kind}: {why}", file=sys.stderr)
    http_groups: list[http_setups.HttpGroup] = []
    mrtr_http: http_setups.MrtrHttp | None = None
    if "http" in wanted:
        present = frozenset(http_setups.PROXY_FILES) - set(proxies_why)
        http_groups = http_setups.groups(present, args.profile, with_py1=not py1_why)
        mrtr_http = http_setups.mrtr_http(http_groups, args.profile)
    http_order = http_setups.runs_in_order(http_groups) + ([mrtr_http.run] if mrtr_http else [])
    sse_groups: list[sse_setups.SseGroup] = []
    if "sse" in wanted:
        sg_why = http_setups.proxies_missing().get("supergateway")
        if sg_why:
            print(f"sse group: not measuring supergateway: {sg_why}", file=sys.stderr)
        sse_groups = sse_setups.groups(not sg_why, args.profile, with_py1=not py1_why)
    # Measured every round, supergateway too, after the HTTP runs: the
    # comparison with supergateway is the point of the group.
    sse_order = sse_setups.runs_in_order(sse_groups)
    rounds: dict[str, list[report.Measured]] = {}
    http_rounds: dict[str, list[http_bench.HttpMeasured]] = {}
    parked: dict[str, Any] | None = None
    started = time.monotonic()
    busy0, own0 = procs.machine_busy_seconds(), procs.own_cpu_seconds()
    with tempfile.TemporaryDirectory(prefix="bench-logs-") as tmp:
        for n in range(1, args.rounds + 1):
            for run in order:
                print(f"… round {n}/{args.rounds} {run.key:<10} {run.label}", file=sys.stderr)
                try:
                    got = await measure(run, seconds, warmup, args.requests, Path(tmp))
                except BenchError as exc:
                    log = Path(tmp) / f"{run.key}.stderr"
                    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                    print(f"FAILED: {exc}\n--- stderr of {run.key} ---\n{tail}", file=sys.stderr)
                    return 1
                rounds.setdefault(run.key, []).append(got)
            for hrun in http_order + sse_order:
                if n > 1 and hrun.kind in http_setups.OTHER_PROXIES and hrun.front != "sse":
                    continue  # measured once: the goals ask for factors of 4, and time is short
                print(f"… round {n}/{args.rounds} {hrun.key:<13} {hrun.label}", file=sys.stderr)
                run_started = time.monotonic()
                try:
                    hgot = await http_bench.measure(hrun, seconds, warmup, args.requests, Path(tmp))
                except BenchError as exc:
                    log = Path(tmp) / f"{hrun.key}.stderr"
                    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                    print(f"FAILED: {exc}\n--- output of {hrun.key} ---\n{tail}", file=sys.stderr)
                    return 1
                http_rounds.setdefault(hrun.key, []).append(hgot)
                print(f"  {time.monotonic() - run_started:.1f} s", file=sys.stderr)
        if mrtr is not None:
            print(f"… memory per parked call ({args.parked} calls)", file=sys.stderr)
            try:
                parked = await parked_memory(args.parked, Path(tmp))
            except BenchError as exc:
                log = Path(tmp) / "parked-memory.stderr"
                print(f"FAILED: {exc}\n{log.read_text(errors='replace')[-2000:]}", file=sys.stderr)
                return 1
    measured = {key: report.best_of(ms) for key, ms in rounds.items()}
    elapsed = time.monotonic() - started
    others = procs.machine_busy_seconds() - busy0 - (procs.own_cpu_seconds() - own0)
    echo = [m for m in measured.values() if m.run.work == "echo"]
    runs = report.runs_table(echo) if echo else ""
    ratios, verdicts = report.ratios_table(groups, measured) if groups else ("", [])
    mrtr_text = ""
    if mrtr is not None and parked is not None:
        mrtr_runs = report.mrtr_table([measured[run.key] for run in mrtr.runs()])
        mrtr_ratio, mrtr_verdicts = report.mrtr_ratios(mrtr, measured)
        parked_table, parked_verdicts = report.parked_section(parked)
        mrtr_text = f"{mrtr_runs}\n\n{mrtr_ratio}\n\n{parked_table}"
        verdicts += mrtr_verdicts + parked_verdicts
    http_text = ""
    hm = {key: http_bench.best_of(ms) for key, ms in http_rounds.items()}
    if http_groups:
        missing = [f"{kind}: {why}" for kind, why in proxies_why.items()]
        if py1_why:
            missing.append(f"the real server (mcp 1.30 FastMCP): {py1_why}")
        notes = "\n".join(f"- {line}" for line in [*http_report.NOT_MEASURED, *missing])
        floors = http_report.floors_table(http_groups, hm)
        mrtr_line = f"{http_report.mrtr_line(mrtr_http, hm)}\n\n" if mrtr_http else ""
        http_text = (
            f"{http_report.runs_table([hm[r.key] for r in http_order])}\n\n"
            f"{http_report.ratios_table(http_groups, hm)}\n\n"
            + (f"Against the floor (issue #12):\n\n{floors}\n\n" if floors else "")
            + mrtr_line
            + f"Not measured:\n\n{notes}"
        )
        verdicts += http_report.verdicts(http_groups, hm)
        verdicts += http_report.floor_verdicts(http_groups, hm)
        verdicts += http_report.real_server_verdicts(http_groups, hm)
        verdicts += http_report.mrtr_verdicts(mrtr_http, hm) if mrtr_http else []
        verdicts += http_report.rss_verdicts([hm[r.key] for r in http_order])
    sse_text = ""
    if sse_groups:
        sse_text = (
            f"{http_report.runs_table([hm[r.key] for r in sse_order])}\n\n"
            f"{sse_report.ratios_table(sse_groups, hm)}\n\n"
            + "\n".join(f"- {line}" for line in sse_report.comparison_lines(sse_groups, hm))
        )
    settings = (
        f"best of {args.rounds} round(s); {seconds:g} s per phase after {warmup:g} s warm-up"
        + (f", at most {args.requests} replies per phase" if args.requests else "")
        + (", gateway under cProfile" if args.profile else "")
        + ("; other proxies: round 1 only" if args.rounds > 1 and http_groups else "")
        + f"; whole run {elapsed:.0f} s"
    )
    info = report.machine_info(max(0.0, others) / elapsed)
    tables = [t for t in (runs, ratios, mrtr_text, http_text, sse_text) if t]
    print("\n" + "\n\n".join([*tables, "\n".join(verdicts)]))
    print(f"\n{info['date']} · nproc {info['nproc']} · {info['python']} · {settings}", flush=True)
    if args.out:
        sections = [
            ("Runs", runs),
            ("Ratios against the baselines", ratios),
            ("MRTR round trip and parked calls", mrtr_text),
            ("Streamable HTTP: against direct HTTP and other proxies", http_text),
            ("HTTP+SSE: against direct stdio, supergateway, the Streamable HTTP front", sse_text),
        ]
        text = report.markdown(info, settings, sections, verdicts)
        Path(args.out).write_text(text)  # noqa: ASYNC240 (the run is over)
        print(f"written to {args.out}", file=sys.stderr)
    return 0


async def _guarded(args: argparse.Namespace) -> int:
    task = asyncio.current_task()
    assert task is not None
    # SIGTERM unwinds like Ctrl-C: every measurement's `finally` closes its processes.
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await amain(args)
    finally:
        for conn in list(LIVE):
            await conn.close(grace=2.0)
        for conn in list(http_bench.LIVE_STDIO):
            await conn.close(grace=2.0)
        for service in list(http_bench.LIVE):
            await service.stop(grace=2.0)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        return asyncio.run(_guarded(args))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        # Only if the event loop could not close them.
        for conn in [*LIVE, *http_bench.LIVE_STDIO]:
            conn.kill_now()
        for service in list(http_bench.LIVE):
            service.kill_now()


if __name__ == "__main__":
    sys.exit(main())
