"""The servers people actually run, through the gateway: the "Popular servers"
section of compat_matrix/REPORT.md.

    python compat_matrix/popular.py [--jobs N] [--only PATTERN]   # run, save, write the section
    python compat_matrix/popular.py --report-only                  # section from the saved run

Each popular reference server (installed by `peers/install.sh` at pinned
versions) is probed by `gateway probe`, then reached through a FRESH gateway by
a modern client (mcp 2.3.0 `Client` pinned to 2026-07-28) and a legacy client
(mcp 1.30.0 `ClientSession`), over stdio (the client spawns the gateway, which
spawns the server) and over HTTP (`gateway --listen 127.0.0.1:PORT`): each
lists tools and makes a call whose answer is checked (compat_matrix/peers/_popular.py).
The clients declare roots (their one root is the case's temporary directory),
as the desktop clients that run these servers do.

Probe-only rows add the SDK fixtures whose era is known by construction: the
mcp 2.3.0 server modern-only and dual, the TS 2.4 server with legacy:'reject'.

This module runs them (`probe`, `call_through`, `run_all`) and is the command
line; the rows are in `popular_servers.py`, the saved run and the section
written from it in `popular_report.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

# Run as a script: `compat_matrix` is importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from compat_matrix.cells import REPO
from compat_matrix.environment import INSTALL_HINT, peers_dir
from compat_matrix.popular_report import save, section, write_section
from compat_matrix.popular_servers import (
    CLIENT_VENVS,
    CLIENTS,
    HERE,
    TRANSPORTS,
    Server,
    missing,
    servers,
)
from compat_matrix.processes import (
    HOST,
    RUN_TAG_VAR,
    Background,
    StartError,
    _reap_tagged,
    _start,
    _stop,
    free_port,
)
from compat_matrix.verdicts import first_line

DEFAULT_REPORT = HERE / "REPORT.md"
CLIENT_TIMEOUT = 60.0  # the client's own deadline; the harness allows a little more
PROBE_TIMEOUT = 60.0
START_TIMEOUT = 60.0


def _env(tag: str, peers: Path, extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ, MCP_PEERS_DIR=str(peers), PYTHONUNBUFFERED="1", **extra)
    env[RUN_TAG_VAR] = tag
    return env


def _gateway(options: list[str], upstream: list[str]) -> list[str]:
    """`gateway [OPTIONS] -- UPSTREAM`. The probe waits up to 30 s for
    `server/discover` instead of 5: on a loaded 2-core machine mcp 2.3 takes
    longer than 5 s to answer its first request, and the fall-back initialize
    then reaches a process that has already fixed its era."""
    return [
        sys.executable,
        "-m",
        "gateway",
        *options,
        "--log-level",
        "warning",
        "--probe-timeout",
        "30",
        "--",
        *upstream,
    ]


def probe(server: Server, peers: Path) -> dict[str, Any]:
    """`gateway probe -- SERVER`: the era it prints, and the whole answer."""
    tag = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="popular-probe-") as tmp:
        case = Path(tmp)
        argv = _gateway(["probe"], server.argv(peers, case))
        started = time.monotonic()
        try:
            done = subprocess.run(
                argv,
                cwd=REPO,
                env=_env(tag, peers, server.env(case)),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=PROBE_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            _reap_tagged(tag)
            return {"server": server.name, "era": None, "error": f"timeout {PROBE_TIMEOUT:g}s"}
        _reap_tagged(tag)
    answer: dict[str, Any] = {}
    with contextlib.suppress(ValueError):
        answer = json.loads(done.stdout)
    return {
        "server": server.name,
        "era": answer.get("era"),
        "answer": answer,
        "exit_code": done.returncode,
        "stderr_tail": done.stderr.decode(errors="replace").strip().splitlines()[-6:],
        "elapsed_s": round(time.monotonic() - started, 2),
        "command": shlex.join(argv),
    }


def _disk_checks(server: Server, case: Path, report: dict[str, Any]) -> list[str]:
    """What the answer claims, checked where the server keeps it."""
    problems: list[str] = []
    steps = report.get("steps") or []
    if server.scenario == "filesystem":
        read: dict[str, Any] = next(
            (s for s in steps if s.get("step") == "tools/call read_text_file"), {}
        )
        path, want = read.get("path"), read.get("want")
        try:
            held = Path(path).read_text() if path else None
        except OSError:
            held = None
        if not path or Path(path).parent != case.resolve() or held != want:
            problems.append(f"file {path!r} does not hold {want!r} in {case}")
    if server.scenario == "memory":
        opened: dict[str, Any] = next(
            (s for s in steps if s.get("step") == "tools/call open_nodes"), {}
        )
        store = case / "memory.jsonl"
        text = store.read_text() if store.exists() else ""
        if not opened.get("ok") or "popular-" not in text:
            problems.append(f"the entity is not in the storage file {store}")
    return problems


def call_through(server: Server, client: str, transport: str, peers: Path) -> dict[str, Any]:
    """One client era x transport against a fresh gateway in front of `server`."""
    assert server.scenario is not None
    tag = uuid.uuid4().hex
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"popular-{server.name}-") as tmp:
        case = Path(tmp)
        env = _env(tag, peers, server.env(case))
        client_argv = [
            str(peers / CLIENT_VENVS[client] / "bin" / "python"),
            str(HERE / "peers" / CLIENTS[client]),
            "--server",
            server.scenario,
            "--dir",
            str(case),
            "--timeout",
            f"{CLIENT_TIMEOUT:g}",
        ]
        upstream = server.argv(peers, case)
        background = None
        commands: list[str] = []
        result: dict[str, Any] = {"server": server.name, "client": client, "transport": transport}
        try:
            if transport == "http":
                port = free_port()
                spec = Background(
                    "gateway",
                    _gateway(["--listen", f"{HOST}:{port}"], upstream),
                    port,
                    f"http://{HOST}:{port}/readyz",
                )
                commands.append(f"gateway: {shlex.join(spec.argv)}")
                try:
                    background = _start(spec, env, START_TIMEOUT)
                except StartError as exc:
                    return {**result, "ok": False, "error": str(exc), "commands": commands}
                client_argv += ["--url", f"http://{HOST}:{port}/mcp"]
            else:
                client_argv += ["--", *_gateway([], upstream)]
            commands.append(f"client: {shlex.join(client_argv)}")
            try:
                done = subprocess.run(
                    client_argv,
                    cwd=REPO,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=CLIENT_TIMEOUT + 15,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                return {**result, "ok": False, "error": "client did not exit", "commands": commands}
            report: dict[str, Any] = {}
            with contextlib.suppress(ValueError):
                report = json.loads(done.stdout.decode(errors="replace").strip().splitlines()[-1])
            problems = [] if not report.get("ok") else _disk_checks(server, case, report)
            ok = bool(report.get("ok")) and report.get("era") == client and not problems
            error = report.get("error") or (problems[0] if problems else None)
            if not report:
                error = "no report: " + first_line(done.stderr.decode(errors="replace"), 300)
            gateway_tail = background.tail(6) if background is not None else []
            return {
                **result,
                "ok": ok,
                "era": report.get("era"),
                "error": error,
                "steps": report.get("steps") or [],
                "exit_code": done.returncode,
                "stderr_tail": done.stderr.decode(errors="replace").strip().splitlines()[-6:]
                + gateway_tail,
                "elapsed_s": round(time.monotonic() - started, 2),
                "commands": commands,
            }
        finally:
            if background is not None:
                _stop(background)
                background.output.close()
            _reap_tagged(tag)


def run_all(
    peers: Path, jobs: int = 2, only: str | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(probes, calls) for every row whose name contains `only`."""
    rows = [s for s in servers(peers) if only is None or only in s.name]
    cases = [
        (s, client, transport)
        for s in rows
        if s.scenario is not None
        for client in CLIENTS
        for transport in TRANSPORTS
    ]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        probes = list(pool.map(lambda s: probe(s, peers), rows))
        calls = list(pool.map(lambda c: call_through(c[0], c[1], c[2], peers), cases))
    return probes, calls


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", help="rows whose name contains this (not saved)")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--out", type=Path, default=DEFAULT_REPORT)
    args = parser.parse_args(argv)
    peers = peers_dir()
    if not args.report_only:
        lacking = missing(peers)
        if lacking:
            print(
                f"popular.py: peers missing ({', '.join(lacking)}): {INSTALL_HINT}", file=sys.stderr
            )
            return 2
        started = time.monotonic()
        probes, calls = run_all(peers, args.jobs, args.only)
        for p in probes:
            print(f"probe {p['server']:<12} era={p['era']}", file=sys.stderr)
        for c in calls:
            mark = "ok " if c["ok"] else "BAD"
            print(
                f"{mark} {c['server']:<12} {c['client']:<7} {c['transport']:<5} "
                f"{c.get('elapsed_s', 0):5.1f}s {first_line(c.get('error') or '', 100)}",
                file=sys.stderr,
            )
        print(f"popular.py: {time.monotonic() - started:.0f}s", file=sys.stderr)
        if args.only:
            return 0 if all(c["ok"] for c in calls) else 1
        save(probes, calls, peers)
    write_section(args.out, section())
    print(f"popular.py: wrote the popular-servers section of {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
