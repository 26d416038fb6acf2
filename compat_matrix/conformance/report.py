"""The conformance section of compat_matrix/REPORT.md.

It reads the recorded runs in `results/` (written by run.py: the gateway runs
by through_gateway.sh, the direct ones by baseline.sh) and reasons.toml, and
compares each gateway run with the same upstream reached directly and with a
dual-era server of the same SDK (the baseline a gateway should reach). Every
scored check that does not pass through the gateway is listed with its written
reason, or as UNEXPLAINED. For an upstream that serves the client's era itself
(`same_era`: a dual-era server under the legacy suite, issue #10) the rule is
stricter: every check that passes direct passes through, and the section lists
any that does not.

    python3 compat_matrix/conformance/report.py    # print the section

Standard library only, like run.py.
"""

from __future__ import annotations

import fnmatch
import json
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
REASONS = HERE / "reasons.toml"


@dataclass(frozen=True)
class GatewayRun:
    label: str  # results/<label>.json
    suite: str
    upstream: str
    direct: str | None  # the same upstream without the gateway
    baseline: str  # a dual-era server of the same SDK, direct
    # The upstream serves the suite's era natively, so the run must keep every
    # check that passes direct (issue #10: "every check that passes direct
    # passes through"). `direct` names that run.
    same_era: bool = False


MODERN_ALL = "modern: `--suite all --spec-version 2026-07-28`"
MODERN_REQ = "modern: `--requirements 2026-07-28`"
LEGACY_REQ = "legacy: `--requirements 2025-11-25`"
LEGACY_ALL = "legacy: `--suite all --spec-version 2025-11-25`"
PY2_PUSH = "dual-era mcp 2.3, push-style tools (`py2-push`)"
TS2_PUSH = "dual-era TS SDK 2.4, push-style tools (`ts2-push`)"
RUNS = (
    GatewayRun(
        "gw-py1-all-2026-07-28",
        MODERN_ALL,
        "legacy mcp 1.30 FastMCP (`py1`)",
        "py1-all-2026-07-28",
        "py2-dual-all-2026-07-28",
    ),
    GatewayRun(
        "gw-py1-req-2026-07-28",
        MODERN_REQ,
        "legacy mcp 1.30 FastMCP (`py1`)",
        None,
        "py2-dual-req-2026-07-28",
    ),
    GatewayRun(
        "gw-ts1-all-2026-07-28",
        MODERN_ALL,
        "legacy TS SDK 1.32 (`ts1`)",
        "ts1-all-2026-07-28",
        "ts2-dual-all-2026-07-28",
    ),
    GatewayRun(
        "gw-ts1-req-2026-07-28",
        MODERN_REQ,
        "legacy TS SDK 1.32 (`ts1`)",
        None,
        "ts2-dual-req-2026-07-28",
    ),
    GatewayRun(
        "gw-py1-all-2026-07-28-ttl3-ms4",
        MODERN_ALL + ", gateway `--max-sessions 4`, `[mrtr] state_ttl = 3`",
        "legacy mcp 1.30 FastMCP (`py1`)",
        "py1-all-2026-07-28",
        "py2-dual-all-2026-07-28",
    ),
    GatewayRun(
        "gw-ts1-all-2026-07-28-ms4",
        MODERN_ALL + ", gateway `--max-sessions 4`",
        "legacy TS SDK 1.32 (`ts1`)",
        "ts1-all-2026-07-28",
        "ts2-dual-all-2026-07-28",
    ),
    GatewayRun(
        "gw-py2-modern-req-2025-11-25",
        LEGACY_REQ,
        "modern-only mcp 2.3 (`py2-modern`)",
        "py2-modern-req-2025-11-25",
        "py2-dual-req-2025-11-25",
    ),
    GatewayRun(
        "gw-ts2-modern-req-2025-11-25",
        LEGACY_REQ,
        "modern-only TS SDK 2.4 (`ts2-modern`)",
        "ts2-modern-req-2025-11-25",
        "ts2-dual-req-2025-11-25",
    ),
    GatewayRun(
        "gw-py2-push-all-2025-11-25",
        LEGACY_ALL,
        PY2_PUSH,
        "py2-push-all-2025-11-25",
        "py2-push-all-2025-11-25",
        same_era=True,
    ),
    GatewayRun(
        "gw-py2-push-req-2025-11-25",
        LEGACY_REQ,
        PY2_PUSH,
        "py2-push-req-2025-11-25",
        "py2-dual-req-2025-11-25",
        same_era=True,
    ),
    GatewayRun(
        "gw-ts2-push-all-2025-11-25",
        LEGACY_ALL,
        TS2_PUSH,
        "ts2-push-all-2025-11-25",
        "ts2-push-all-2025-11-25",
        same_era=True,
    ),
    GatewayRun(
        "gw-ts2-push-req-2025-11-25",
        LEGACY_REQ,
        TS2_PUSH,
        "ts2-push-req-2025-11-25",
        "ts2-dual-req-2025-11-25",
        same_era=True,
    ),
)


@dataclass(frozen=True)
class Reason:
    check: str
    runs: tuple[str, ...]
    kind: str
    why: str

    def covers(self, check: str, label: str) -> bool:
        return check == self.check and any(fnmatch.fnmatchcase(label, p) for p in self.runs)


def load_reasons(path: Path = REASONS) -> list[Reason]:
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    reasons = []
    for entry in raw.get("reason", []):
        kind = entry["kind"]
        if kind not in ("principled", "upstream", "policy"):
            raise ValueError(f"{path}: unknown kind {kind!r} for {entry['check']}")
        why = " ".join(str(entry["why"]).split())
        reasons.append(Reason(entry["check"], tuple(entry["runs"]), kind, why))
    return reasons


def load_run(label: str, results: Path = RESULTS) -> dict[str, Any] | None:
    path = results / f"{label}.json"
    if not path.exists():
        return None
    summary: dict[str, Any] = json.loads(path.read_text())
    return summary


def _counts(summary: dict[str, Any] | None) -> str:
    if summary is None:
        return "not recorded"
    t = summary["totals"]
    return f"{t['SUCCESS']} / {t['FAILURE']} / {t['WARNING']}"


def not_passing(summary: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(scenario, check) for every scored FAILURE or WARNING."""
    return [
        (name, check)
        for name, scenario in summary["scenarios"].items()
        if not scenario["unscored"]
        for check in scenario["not_passing"]
    ]


def lost_checks(direct: dict[str, Any], through: dict[str, Any]) -> list[str]:
    """The checks that pass direct but not through the gateway, as "scenario / check".

    The recorded runs list only the checks that do not pass, so: a check that
    does not pass through and is not among the direct run's non-passing checks
    of the same scenario; and, per scenario, any shortfall in SUCCESS count
    (which also catches a scenario the gateway run lacks).
    """
    lost: list[str] = []
    for name, scenario in direct["scenarios"].items():
        failing_direct = {c["id"] for c in scenario["not_passing"]}
        other = through["scenarios"].get(name)
        if other is None:
            lost.append(f"{name} / (scenario not run through the gateway)")
            continue
        named = [
            f"{name} / `{c['id']}` ({c['status']})"
            for c in other["not_passing"]
            if c["id"] not in failing_direct
        ]
        lost += named
        short = scenario["counts"].get("SUCCESS", 0) - other["counts"].get("SUCCESS", 0)
        if short > 0 and not named:
            lost.append(f"{name} / {short} fewer passing checks")
    return lost


def section(results: Path = RESULTS, reasons_file: Path = REASONS) -> str:
    reasons = load_reasons(reasons_file)
    lines = [
        "## Conformance suite through the gateway",
        "",
        "The official suite (`@modelcontextprotocol/conformance@0.2.0-alpha.12`, server mode, "
        "Streamable HTTP) against the gateway's HTTP front, with a fixture server behind it "
        "on stdio (`compat_matrix/conformance/`: fixtures, runner, per-check tables). "
        "Reproduce with `bash compat_matrix/conformance/through_gateway.sh` (gateway runs) and "
        "`bash compat_matrix/conformance/baseline.sh` (direct runs); "
        "this section is written from their recorded results by "
        "`compat_matrix/conformance/report.py`.",
        "",
        "Scored checks, pass / fail / warn. *That upstream direct* is the same server "
        "without the gateway (a cross-era pair: it fails). *Dual-era baseline* is a "
        "dual-era server of the same SDK family reached directly: what a client of that era "
        "gets from a server that speaks it natively.",
        "",
        "| suite | upstream | through the gateway | that upstream direct | dual-era baseline |",
        "|---|---|---|---|---|",
    ]
    rows: list[tuple[GatewayRun, dict[str, Any]]] = []
    same_era: list[str] = []
    for run in RUNS:
        summary = load_run(run.label, results)
        direct_run = load_run(run.direct, results) if run.direct else None
        if run.same_era and direct_run is not None:
            if summary is None:
                lines.append(
                    f"| {run.suite} | {run.upstream} | not recorded | {_counts(direct_run)} "
                    f"| {_counts(load_run(run.baseline, results))} (`{run.baseline}`) |"
                )
                same_era.append(f"- `{run.label}`: not recorded yet.")
            else:
                lost = lost_checks(direct_run, summary)
                same_era.append(
                    f"- `{run.label}`: every check that passes direct (`{run.direct}`) passes "
                    "through."
                    if not lost
                    else f"- `{run.label}`: **{len(lost)} "
                    f"{'check passes' if len(lost) == 1 else 'checks pass'} direct "
                    f"(`{run.direct}`) but not through:** " + "; ".join(lost) + "."
                )
        if summary is None:
            continue
        rows.append((run, summary))
        direct = _counts(load_run(run.direct, results)) if run.direct else "-"
        baseline = load_run(run.baseline, results)
        base = f"{_counts(baseline)} (`{run.baseline}`)"
        lines.append(
            f"| {run.suite} | {run.upstream} | **{_counts(summary)}** | {direct} | {base} |"
        )
    lines += [
        "",
        "- The legacy runs count 69 against the baseline's 70 with no failure: the suite "
        "scores `server-sse-streams-functional` INFO, not SUCCESS, when three concurrent "
        "calls are answered with JSON rather than SSE streams; 2025-11-25 allows either, "
        "and the gateway streams only when something comes before the result.",
    ]
    unscored = [
        (run, s["unscored_totals"]) for run, s in rows if any(s["unscored_totals"].values())
    ]
    if unscored:
        for run, u in unscored:
            lines.append(
                f"- `{run.label}`, not scored by the suite (the tasks extension, whose "
                f"tools these fixtures lack: see the tasks-* runs below; and pending "
                f"scenarios): "
                f"{u['SUCCESS']} pass / {u['FAILURE']} fail / {u['WARNING']} warn."
            )
    if same_era:
        lines += [
            "",
            "### Dual-era upstreams: every check that passes direct passes through",
            "",
            "A legacy client of a dual-era server must get through the gateway what it gets "
            "from that server directly (issue #10, DESIGN §5.3). `py2-push` and `ts2-push` "
            "are the py2 and ts2 fixtures with `--push`: their tools push "
            "`sampling/createMessage` and `elicitation/create` on the session (as the SDK "
            "2.x `everything-server` does), which a modern request has no back-channel for.",
            "",
            *same_era,
        ]
    table = [
        "",
        "### Every scored check that does not pass through the gateway",
        "",
        "| run | scenario / check | status | kind | why |",
        "|---|---|---|---|---|",
    ]
    unexplained = 0
    total = 0
    for run, summary in rows:
        for scenario, check in not_passing(summary):
            total += 1
            reason = next((r for r in reasons if r.covers(check["id"], run.label)), None)
            if reason is None:
                unexplained += 1
                kind, why = "**UNEXPLAINED**", " ".join(str(check["message"]).split())[:300]
            else:
                kind, why = reason.kind, reason.why
            table.append(
                f"| `{run.label}` | {scenario} / `{check['id']}` | {check['status']} "
                f"| {kind} | {why} |"
            )
    lines += table if total else ["", "Every scored check passes through the gateway."]
    lines.append("")
    if unexplained:
        lines.append(f"- **{unexplained} of {total} non-passing checks have no written reason.**")
    elif total:
        lines.append(
            f"- All {total} non-passing checks have a written reason "
            "(`compat_matrix/conformance/reasons.toml`)."
        )
    lines += tasks_section(results, reasons)
    return "\n".join(lines) + "\n"


# The tasks extension's scenarios, each run alone (through_gateway.sh t-tasks).
TASK_SCENARIOS = (
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
)


def tasks_section(results: Path, reasons: list[Reason]) -> list[str]:
    """The tasks-* scenarios through the gateway in front of the legacy
    fixture with their tools (issue #16), each check that does not pass
    with its written reason."""
    lines = [
        "",
        "### The tasks extension (tasks-* scenarios, issue #16)",
        "",
        "Each scenario against the gateway in front of the legacy mcp 1.30 fixture "
        "`compat_matrix/peers/py1_task_tools.py`, which has the scenarios' tools (the gateway "
        "runs the tasks itself, docs/design.md §5.4): `through_gateway.sh t-tasks`. No "
        "installed server implements the extension, so there is no direct baseline.",
        "",
        "| scenario | pass / fail / skipped | not passing: why |",
        "|---|---|---|",
    ]
    passed = failed = 0
    for scenario in TASK_SCENARIOS:
        label = f"gw-py1-{scenario}"
        summary = load_run(label, results)
        if summary is None:
            lines.append(f"| {scenario} | not recorded | |")
            continue
        counts = summary["totals"]
        passed += counts["SUCCESS"]
        failed += counts["FAILURE"] + counts["WARNING"]
        whys = []
        for _, check in not_passing(summary):
            reason = next((r for r in reasons if r.covers(check["id"], label)), None)
            why = reason.why if reason is not None else "**UNEXPLAINED**"
            whys.append(f"`{check['id']}`: {why}")
        lines.append(
            f"| {scenario} | {counts['SUCCESS']} / {counts['FAILURE'] + counts['WARNING']} / "
            f"{counts['SKIPPED']} | {' '.join(whys)} |"
        )
    lines += ["", f"- {passed} checks pass, {failed} do not.", ""]
    return lines


def main() -> int:
    sys.stdout.write(section())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
