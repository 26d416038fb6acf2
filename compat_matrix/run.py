#!/usr/bin/env python3
"""Run the compatibility matrix with real peers and write REPORT.md.

    python compat_matrix/run.py [--only PATTERN] [--jobs N] [--out compat_matrix/REPORT.md]

Every "ready" cell of `cells.toml` is expanded into its client x server peer
pairs, and every pair runs twice: DIRECT and THROUGH THE GATEWAY. How depends
on the cell's front (client ↔ gateway) and back (gateway ↔ server) transports:

    stdio→stdio  direct: the client spawns the server; gateway: the client
                 spawns the gateway, which spawns the server
    stdio→http   the server serves HTTP on a free 127.0.0.1 port (run.py starts
                 it and waits until it accepts connections); the client spawns
                 `gateway --upstream URL`. No direct run (n/a).
    http→stdio   run.py starts `gateway --listen 127.0.0.1:PORT -- SERVER` and
                 waits for its /readyz; the client connects with `--url`. No
                 direct run (n/a).
    http→http    the server on HTTP as above; direct: the client connects to
                 the server's URL; gateway: `gateway --listen ... --upstream URL`
                 and the client connects to the gateway's URL.
    sse→stdio,   legacy clients only: the gateway starts as for an http front,
    sse→http     and the client connects with `--sse-url http://127.0.0.1:PORT/sse`
                 (the deprecated HTTP+SSE transport). No direct run (n/a): no
                 back is HTTP+SSE.

Every client gets the cell's feature (`--feature F`). A basic or
notifications run is judged on the client's whole report, and a notifications
(tasks) run must also contain the client's `notifications: ` (`tasks: `) steps.
A cell's `env` is added to the environment of all its processes (the gateway
reads its `MCP_ERA_GATEWAY_*` settings there). An MRTR client's
run is judged on that feature's steps of its report; when all four MRTR cells
of one client x server pair and route are planned, one client run with
`--feature all` serves them (`--separate-features` runs one per cell).
Each client run has a hard timeout, runs in its own process group and is
tagged through its environment, so everything it started (including upstream
servers that the gateway put in sessions of their own) is found and killed at
the end. The HTTP servers and gateways that run.py starts itself get the same
tag, their own process groups, and are stopped (SIGTERM, then SIGKILL) by
process group once the client has exited. The exit status is 1 iff an
observed outcome differs from the expected one (a direct run that works where
the spec says it fails counts), 2 if the matrix or the peers are unusable.

This module is the command line. The library it runs on, which the real-peer
tests use too, is split by job in the modules beside it: `cells` (the matrix
data, `load_matrix`), `environment` (the installed peers, the `Context` that
fills the placeholders), `runs` (a `Run`, `plan`, `find_run`), `processes`
(ports, the HTTP servers and gateways started before a client, reaping),
`runner` (`run_job`, `run_many`), `verdicts` (`judge`), `matrix_report`
(`render_report`) and `provenance` (which code ran).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path

# Run as a script: `compat_matrix` is importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from compat_matrix import popular_report
from compat_matrix.cells import CELLS_FILE, HERE, MatrixError, load_matrix
from compat_matrix.conformance import report as conformance_report
from compat_matrix.environment import INSTALL_HINT, Context, missing_peers
from compat_matrix.matrix_report import render_report
from compat_matrix.provenance import code_fingerprint, code_version
from compat_matrix.runner import run_many
from compat_matrix.runs import plan
from compat_matrix.verdicts import Observation, first_line, judge

CONFORMANCE_HEADING = "## Conformance suite through the gateway"
DEFAULT_REPORT = HERE / "REPORT.md"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        metavar="PATTERN",
        help="run only runs whose `<cell id>:<client>><server>@<via>` matches "
        "(glob if it has * ? [, else substring)",
    )
    parser.add_argument(
        "--skip",
        metavar="PATTERN",
        action="append",
        default=[],
        help="leave out the runs that match (as --only; repeatable), e.g. through-gateway "
        "runs that wait on a change still to land",
    )
    parser.add_argument("--jobs", type=int, default=None, help="parallel runs (default 2)")
    parser.add_argument("--out", type=Path, default=DEFAULT_REPORT, help="report path")
    parser.add_argument("--cells", type=Path, default=CELLS_FILE, help="matrix data")
    parser.add_argument(
        "--gateway",
        metavar="TEMPLATE",
        help="gateway command template for a stdio back, with {listen} and {server} words "
        "(default from cells.toml)",
    )
    parser.add_argument(
        "--gateway-upstream",
        metavar="TEMPLATE",
        help="gateway command template for an HTTP back, with {listen} and {upstream} words "
        "(default from cells.toml)",
    )
    parser.add_argument(
        "--separate-features",
        action="store_true",
        help="one client run per MRTR cell (default: one `--feature all` run serves the "
        "four MRTR cells of a client x server pair and route)",
    )
    parser.add_argument("--list", action="store_true", help="list the runs and exit")
    parser.add_argument(
        "--conformance-only",
        action="store_true",
        help="rewrite only the report's conformance section, from the recorded "
        "compat_matrix/conformance/results (no cell runs)",
    )
    args = parser.parse_args(argv)
    # The sections other runs write, from their saved results.
    tail = "\n\n" + conformance_report.section() + "\n" + popular_report.section()
    if args.conformance_only:
        kept = args.out.read_text().split(CONFORMANCE_HEADING)[0] if args.out.exists() else ""
        args.out.write_text(kept.rstrip("\n") + tail)
        print(f"run.py: wrote the conformance section of {args.out}", file=sys.stderr)
        return 0

    try:
        matrix = load_matrix(args.cells)
    except MatrixError as exc:
        print(f"run.py: bad matrix: {exc}", file=sys.stderr)
        return 2
    ctx = Context.for_matrix(matrix)
    if args.gateway:
        ctx = dataclasses.replace(ctx, gateway_command=args.gateway)
    if args.gateway_upstream:
        ctx = dataclasses.replace(ctx, gateway_upstream_command=args.gateway_upstream)
    runs = plan(matrix, args.only, args.skip)
    if args.list:
        with contextlib.suppress(BrokenPipeError):
            print("\n".join(run.key for run in runs), flush=True)
        return 0
    missing = missing_peers(ctx.peers)
    if missing:
        print(f"run.py: peers missing ({', '.join(missing)}): {INSTALL_HINT}", file=sys.stderr)
        return 2
    if not runs:
        print(f"run.py: no run matches {args.only!r}", file=sys.stderr)
        return 2
    jobs = args.jobs or matrix.jobs

    def progress(done: int, total: int, obs: Observation) -> None:
        verdict = judge(obs)
        mark = "ok " if verdict.matched else "BAD"
        print(
            f"[{done:3d}/{total}] {mark} {obs.run.key:<62} {verdict.observed:<15} "
            f"{obs.duration:5.1f}s  {first_line(verdict.reason, 90)}",
            file=sys.stderr,
            flush=True,
        )

    code = code_version()
    fingerprint = code_fingerprint()
    started = time.monotonic()
    observations = run_many(
        runs, ctx, jobs=jobs, progress=progress, group=not args.separate_features
    )
    elapsed = time.monotonic() - started
    report = render_report(
        matrix,
        observations,
        only=args.only,
        elapsed=elapsed,
        jobs=jobs,
        ctx=ctx,
        code=code,
        code_changed=code_fingerprint() != fingerprint,
        skip=args.skip,
    )
    args.out.write_text(report + tail)
    bad = [o for o in observations if not judge(o).matched]
    if code_fingerprint() != fingerprint:
        print("run.py: warning: the code changed during the run", file=sys.stderr)
    print(
        f"run.py: {len(observations)} runs in {elapsed:.0f}s, {len(bad)} mismatches; "
        f"wrote {args.out}",
        file=sys.stderr,
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
