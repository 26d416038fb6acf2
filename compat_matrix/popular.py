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
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Run as a script: `compat_matrix` is importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from compat_matrix.cells import REPO
from compat_matrix.environment import INSTALL_HINT, peers_dir
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
from compat_matrix.provenance import code_version
from compat_matrix.verdicts import first_line

HERE = Path(__file__).resolve().parent

HEADING = "## Popular servers through the gateway"
RESULTS = HERE / "popular_results.json"
DEFAULT_REPORT = HERE / "REPORT.md"
CLIENTS = {"modern": "popular_py2_client.py", "legacy": "popular_py1_client.py"}
CLIENT_VENVS = {"modern": "py2", "legacy": "py1"}
TRANSPORTS = ("stdio", "http")
CLIENT_TIMEOUT = 60.0  # the client's own deadline; the harness allows a little more
PROBE_TIMEOUT = 60.0
START_TIMEOUT = 60.0


@dataclass(frozen=True)
class Server:
    """A server to probe, and (with a scenario) to call through the gateway."""

    name: str
    label: str  # package and pinned version, as installed
    era: str  # what `probe` must print
    argv: Callable[[Path, Path], list[str]]  # (peers dir, case dir) -> command
    scenario: str | None = None  # compat_matrix/peers/_popular.py server; None: probe only
    env: Callable[[Path], dict[str, str]] = field(default=lambda _case: {})


def _node_bin(name: str) -> Callable[[Path, Path], list[str]]:
    return lambda peers, _case: [str(peers / "node" / "node_modules" / ".bin" / name)]


def _node_version(peers: Path, package: str) -> str:
    manifest = peers / "node" / "node_modules" / "@modelcontextprotocol" / package / "package.json"
    try:
        return str(json.loads(manifest.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return "?"


def _pip_version(peers: Path, venv: str, dist: str) -> str:
    for meta in (peers / venv).glob(f"lib/python*/site-packages/{dist}-*.dist-info"):
        return meta.name.removeprefix(f"{dist}-").removesuffix(".dist-info")
    return "?"


def servers(peers: Path) -> list[Server]:
    """Every row, with the versions actually installed in `peers`."""
    py2 = str(peers / "py2" / "bin" / "python")
    fixture = str(HERE / "peers" / "py2_modern_server.py")
    ts2 = str(HERE / "peers" / "ts2_modern_server.mjs")
    time_argv = ["--local-timezone", "UTC"]
    return [
        Server(
            "filesystem",
            f"@modelcontextprotocol/server-filesystem {_node_version(peers, 'server-filesystem')}",
            "legacy",
            lambda p, case: [*_node_bin("mcp-server-filesystem")(p, case), str(case)],
            "filesystem",
        ),
        Server(
            "memory",
            f"@modelcontextprotocol/server-memory {_node_version(peers, 'server-memory')}",
            "legacy",
            _node_bin("mcp-server-memory"),
            "memory",
            env=lambda case: {"MEMORY_FILE_PATH": str(case / "memory.jsonl")},
        ),
        Server(
            "everything",
            f"@modelcontextprotocol/server-everything {_node_version(peers, 'server-everything')}",
            "legacy",
            lambda p, case: [*_node_bin("mcp-server-everything")(p, case), "stdio"],
            "everything",
        ),
        Server(
            "time-legacy",
            f"mcp-server-time {_pip_version(peers, 'time1', 'mcp_server_time')} "
            f"(mcp {_pip_version(peers, 'time1', 'mcp')})",
            "legacy",
            lambda p, _case: [str(p / "time1" / "bin" / "mcp-server-time"), *time_argv],
            "time",
        ),
        Server(
            "time-dual",
            f"mcp-server-time {_pip_version(peers, 'time2', 'mcp_server_time')} "
            f"(mcp {_pip_version(peers, 'time2', 'mcp')})",
            "dual",
            lambda p, _case: [str(p / "time2" / "bin" / "mcp-server-time"), *time_argv],
            "time",
        ),
        Server(
            "py2-dual",
            f"mcp {_pip_version(peers, 'py2', 'mcp')} fixture server, --dual",
            "dual",
            lambda _p, _case: [py2, fixture, "--dual"],
        ),
        Server(
            "py2-modern",
            f"mcp {_pip_version(peers, 'py2', 'mcp')} fixture server, initialize rejected",
            "modern",
            lambda _p, _case: [py2, fixture],
        ),
        Server(
            "ts2-modern",
            f"@modelcontextprotocol/server {_node_version(peers, 'server')} fixture, "
            "legacy:'reject'",
            "modern",
            lambda _p, _case: ["node", ts2],
        ),
    ]


def missing(peers: Path) -> list[str]:
    """What peers/install.sh should have created for these rows (empty when usable)."""
    needed = [
        peers / "py1" / "bin" / "python",
        peers / "py2" / "bin" / "python",
        peers / "time1" / "bin" / "mcp-server-time",
        peers / "time2" / "bin" / "mcp-server-time",
        *(
            peers / "node" / "node_modules" / ".bin" / f"mcp-server-{name}"
            for name in ("filesystem", "memory", "everything")
        ),
    ]
    return [str(p) for p in needed if not p.exists()]


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


def checked_answer(result: dict[str, Any]) -> str:
    """The last checked call's answer, shortened for the table."""
    calls = [
        s for s in result.get("steps") or [] if str(s.get("step", "")).startswith("tools/call")
    ]
    if not calls:
        return ""
    text = " ".join(str(calls[-1].get("text") or "").split())
    return f"{calls[-1]['step'].removeprefix('tools/call ')}: {text[:70]}"


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


# -- the report section ---------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def section(results: Path = RESULTS) -> str:
    """The REPORT.md section from the saved run."""
    head = [
        HEADING,
        "",
        "The reference servers people install, at the versions `peers/install.sh` pins,",
        "each behind a **fresh** gateway (the first request included): a modern client",
        "(mcp 2.3.0 `Client` pinned to 2026-07-28) and a legacy client (mcp 1.30.0",
        "`ClientSession`), both declaring roots, over stdio (the client spawns the gateway,",
        "which spawns the server) and over HTTP (`gateway --listen`). Each lists tools and",
        "makes calls whose answers are checked: a file written then read back (and found on",
        "disk), an entity created then opened (and found in the storage file), the time in",
        "UTC (parsed, within a minute of now), echo and get-sum. `era` is what",
        "`gateway probe` prints; the last rows are SDK fixtures whose era is known by",
        "construction. Reproduce: `bash peers/install.sh && python compat_matrix/popular.py`",
        "(`--report-only` rewrites this section from `compat_matrix/popular_results.json`);",
        "`tests/test_popular_servers.py` checks the same.",
        "",
    ]
    if not results.exists():
        return "\n".join([*head, "Not run yet."]) + "\n"
    saved = json.loads(results.read_text())
    calls = {(c["server"], c["client"], c["transport"]): c for c in saved["calls"]}
    lines = [
        *head,
        f"Run of {saved['date']} on {saved['code']}: "
        f"{sum(c['ok'] for c in saved['calls'])}/{len(saved['calls'])} calls work, "
        f"{sum(p['era'] == p['want'] for p in saved['probes'])}/{len(saved['probes'])} "
        "probes print the right era.",
        "",
        "| server | version | probe era (want) | modern · stdio | modern · http "
        "| legacy · stdio | legacy · http | checked answer |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in saved["probes"]:
        era = p["era"] or "no answer"
        mark = "" if p["era"] == p["want"] else " **wrong**"
        cells = []
        answer = ""
        for client in CLIENTS:
            for transport in TRANSPORTS:
                c = calls.get((p["server"], client, transport))
                if c is None:
                    cells.append("-")
                    continue
                answer = answer or (checked_answer(c) if c["ok"] else "")
                cells.append(
                    "works" if c["ok"] else f"**fails**: {first_line(c['error'] or '', 90)}"
                )
        lines.append(
            f"| {p['server']} | {_cell(p['label'])} | {era} ({p['want']}){mark} | "
            + " | ".join(_cell(c) for c in cells)
            + f" | {_cell(answer)} |"
        )
    return "\n".join(lines) + "\n"


def write_section(out: Path, text: str) -> None:
    """Replace this section of `out` (it runs to the end of the file or the next
    `## ` heading), or append it."""
    current = out.read_text() if out.exists() else ""
    before, found, after = current.partition(HEADING)
    rest = ""
    if found:
        cut = after.find("\n## ")
        rest = after[cut + 1 :] if cut >= 0 else ""
    body = before.rstrip("\n") + "\n\n" + text
    out.write_text(body + ("\n" + rest if rest else ""))


def save(probes: list[dict[str, Any]], calls: list[dict[str, Any]], peers: Path) -> None:
    wanted = {s.name: s for s in servers(peers)}
    for p in probes:
        p["want"] = wanted[p["server"]].era
        p["label"] = wanted[p["server"]].label
        p.pop("answer", None)
    RESULTS.write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "code": code_version(),
                "probes": probes,
                "calls": calls,
            },
            indent=1,
        )
        + "\n"
    )


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
