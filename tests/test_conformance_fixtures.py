"""The conformance-suite fixtures and runner (compat_matrix/conformance/).

The summary logic is tested on synthetic suite output. The `peers` tests run
the real suite (`@modelcontextprotocol/conformance`, installed on demand by
peers/install_conformance.sh; idempotent) against the fixture servers for a
few scenarios that cover each path:

- modern wire: `server-stateless` and MRTR multi-round;
- legacy push: `tools-call-elicitation` (py2, py1 and the TS 1.x ts1);
- modern suite against the legacy py1, which must fail;
- the TS 2.x fixture (ts2_fixture_server.mjs): MRTR multi-round on the modern
  wire and a pushed elicitation in a legacy HTTP session (the SDK's shim).

The TS fixtures read fixture_data.json, the JSON export of fixture_data.py:
one test keeps the two in sync, another checks that ts1 lists the same tools,
prompts and resources as py1.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from compat_matrix.conformance import fixture_data
from compat_matrix.conformance import run as conformance

REPO = Path(__file__).resolve().parent.parent


def _write_checks(root: Path, scenario: str, statuses: list[str]) -> None:
    folder = root / f"server-{scenario}-2026-11-29T20-46-53-994Z"
    folder.mkdir(parents=True)
    checks = [
        {"id": f"{scenario}-{i}", "name": "N", "status": s, "errorMessage": f"msg {i}"}
        for i, s in enumerate(statuses)
    ]
    (folder / "checks.json").write_text(json.dumps(checks))


def test_summary_separates_unscored_scenarios(tmp_path: Path) -> None:
    _write_checks(tmp_path, "tools-list", ["SUCCESS", "SUCCESS", "FAILURE"])
    _write_checks(tmp_path, "tasks-lifecycle", ["FAILURE", "WARNING"])
    output = "Not scored for 2026-07-28:\n  \u2717 tasks-lifecycle (extension)\n"
    unscored = dict(conformance._UNSCORED.findall(output))
    summary = conformance.summarise(conformance.collect(tmp_path), unscored)

    assert unscored == {"tasks-lifecycle": "extension"}
    assert summary["totals"]["SUCCESS"] == 2
    assert summary["totals"]["FAILURE"] == 1
    assert summary["unscored_totals"]["FAILURE"] == 1
    assert summary["unscored_totals"]["WARNING"] == 1
    assert (summary["scenarios_passing"], summary["scenario_count"]) == (0, 1)
    failing = summary["scenarios"]["tools-list"]["not_passing"]
    assert [c["id"] for c in failing] == ["tools-list-2"]

    summary.update(label="x", target="t", command="c", runtime_s=1.0, exit_code=1)
    text = conformance.markdown(summary)
    assert "**2 passed, 1 failed**" in text
    assert "| tasks-lifecycle *(extension)* | 0 | 1 | 1 |" in text


def test_fixture_data_json_is_in_sync() -> None:
    """The TS fixtures read fixture_data.json; it must equal fixture_data.py's export."""

    exported = json.loads((REPO / "compat_matrix/conformance/fixture_data.json").read_text())
    assert exported == json.loads(json.dumps(fixture_data.export())), (
        "regenerate: python3 compat_matrix/conformance/fixture_data.py"
        " > compat_matrix/conformance/fixture_data.json"
    )


@pytest.fixture(scope="module")
def suite_installed() -> None:
    subprocess.run(["bash", str(REPO / "peers/install_conformance.sh")], check=True, timeout=600)


def _run(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    label = "t"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "compat_matrix/conformance/run.py"),
            *args,
            "--label",
            label,
            "--results",
            str(tmp_path),
            "--raw-dir",
            str(tmp_path / "raw"),
            "--timeout",
            "120",
        ],
        capture_output=True,
        timeout=180,
        check=False,
    )
    return proc.returncode, json.loads((tmp_path / f"{label}.json").read_text())


@pytest.mark.peers
@pytest.mark.usefixtures("suite_installed")
@pytest.mark.parametrize(
    ("server", "scenario", "version", "min_checks"),
    [
        ("py2-dual", "server-stateless", "2026-07-28", 30),
        ("py2-modern", "input-required-result-multi-round", "2026-07-28", 4),
        ("py2-dual", "tools-call-elicitation", "2025-11-25", 2),
        ("py1", "tools-call-elicitation", "2025-11-25", 2),
        ("ts2-dual", "input-required-result-multi-round", "2026-07-28", 4),
        ("ts2-dual", "tools-call-elicitation", "2025-11-25", 2),
        ("ts1", "tools-call-elicitation", "2025-11-25", 2),
        ("ts1", "elicitation-sep1330-enums", "2025-11-25", 5),
    ],
)
def test_fixture_passes_scenario(
    tmp_path: Path, server: str, scenario: str, version: str, min_checks: int
) -> None:
    code, summary = _run(
        tmp_path, "--server", server, "--scenario", scenario, "--spec-version", version
    )
    totals = summary["totals"]
    assert code == 0, summary["scenarios"]
    assert totals["FAILURE"] == 0
    assert totals["SUCCESS"] >= min_checks


@pytest.mark.peers
@pytest.mark.usefixtures("suite_installed")
def test_modern_suite_against_legacy_py1_fails(tmp_path: Path) -> None:
    code, summary = _run(
        tmp_path,
        "--server",
        "py1",
        "--scenario",
        "tools-call-simple-text",
        "--spec-version",
        "2026-07-28",
    )
    assert code == 1
    failing = summary["scenarios"]["tools-call-simple-text"]["not_passing"]
    assert any("Missing session ID" in c["message"] for c in failing)


# -- the REPORT.md section (compat_matrix/conformance/report.py) ------------------


def _recorded(root: Path, label: str, not_passing: list[dict[str, Any]]) -> None:
    failures = sum(1 for c in not_passing if c["status"] == "FAILURE")
    summary = {
        "totals": {"SUCCESS": 10, "FAILURE": failures, "WARNING": 0, "SKIPPED": 0, "INFO": 0},
        "unscored_totals": {"SUCCESS": 0, "FAILURE": 0, "WARNING": 0, "SKIPPED": 0, "INFO": 0},
        "scenarios": {
            "tools-list": {"counts": {}, "ok": True, "not_passing": [], "unscored": None},
            "mrtr": {"counts": {}, "ok": False, "not_passing": not_passing, "unscored": None},
        },
    }
    (root / f"{label}.json").write_text(json.dumps(summary))


def test_report_section_names_every_unexplained_check(tmp_path: Path) -> None:
    from compat_matrix.conformance import report

    reasons = tmp_path / "reasons.toml"
    reasons.write_text(
        '[[reason]]\ncheck = "known"\nruns = ["gw-py1-*"]\nkind = "principled"\nwhy = "because"\n'
    )
    bad = [
        {"id": "known", "status": "FAILURE", "message": "m1"},
        {"id": "novel", "status": "WARNING", "message": "something new"},
    ]
    _recorded(tmp_path, "gw-py1-all-2026-07-28", bad)
    _recorded(tmp_path, "py2-dual-all-2026-07-28", [])
    text = report.section(tmp_path, reasons)
    assert "| **10 / 1 / 0** |" in text
    assert "| principled | because |" in text
    assert "**UNEXPLAINED** | something new |" in text
    assert "**1 of 2 non-passing checks have no written reason.**" in text
    # A reason for another run does not explain this one.
    _recorded(tmp_path, "gw-ts2-modern-req-2025-11-25", [bad[0]])
    assert "**2 of 3 non-passing checks" in report.section(tmp_path, reasons)


def test_every_recorded_gateway_failure_has_a_written_reason() -> None:
    """compat_matrix/REPORT.md may list a check the gateway cannot pass only
    with its reason (issue #4): a newly recorded failure needs one."""
    from compat_matrix.conformance import report

    text = report.section()
    assert "UNEXPLAINED" not in text, text


def _stdio_listings(command: list[str]) -> dict[str, Any]:
    """initialize, then the four lists over stdio, each reduced to what the suite relies on."""
    lists = ["tools/list", "prompts/list", "resources/list", "resources/templates/list"]
    init = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    }
    lines = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        *({"jsonrpc": "2.0", "id": i, "method": m} for i, m in enumerate(lists, 1)),
    ]
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write("".join(json.dumps(line) + "\n" for line in lines))
        proc.stdin.flush()
        results: dict[int, Any] = {}
        while len(results) < len(lists) + 1:
            message = json.loads(proc.stdout.readline())
            results[message["id"]] = message["result"]
    finally:
        proc.kill()
        proc.wait(timeout=10)
        proc.stdin.close()
        proc.stdout.close()
    tools = {
        t["name"]: (
            sorted(t["inputSchema"].get("properties", {})),
            t["inputSchema"].get("required", []),
        )
        for t in results[1]["tools"]
    }
    prompts = {
        p["name"]: sorted((a["name"], bool(a.get("required"))) for a in p.get("arguments") or [])
        for p in results[2]["prompts"]
    }
    return {
        "tools": tools,
        "prompts": prompts,
        "resources": sorted(
            (r["uri"], r["name"], r.get("mimeType")) for r in results[3]["resources"]
        ),
        "templates": sorted(t["uriTemplate"] for t in results[4]["resourceTemplates"]),
        "header_param": next(
            t["inputSchema"]["properties"]["region"].get("x-mcp-header")
            for t in results[1]["tools"]
            if t["name"] == "test_header_param"
        ),
    }


@pytest.mark.peers
def test_ts1_lists_what_py1_lists() -> None:
    ts1 = _stdio_listings(conformance.SERVERS["ts1"])
    py1 = _stdio_listings(conformance.SERVERS["py1"])
    assert ts1 == py1
    assert ts1["header_param"] == "Region"


def test_report_lists_checks_that_pass_direct_but_not_through_a_dual_era_upstream(
    tmp_path: Path,
) -> None:
    """Issue #10: "every check that passes direct passes through" to a dual-era
    upstream (the legacy suite through the gateway to push-style py2); the
    report names each one that does not, and a run not recorded yet says so."""
    from compat_matrix.conformance import report

    reasons = tmp_path / "reasons.toml"
    reasons.write_text("")
    sse = {"id": "server-sse-polling", "status": "WARNING", "message": "no priming event"}
    _recorded(tmp_path, "py2-push-all-2025-11-25", [sse])
    text = report.section(tmp_path, reasons)
    assert "- `gw-py2-push-all-2025-11-25`: not recorded yet." in text
    # A check that does not pass direct either is not a loss.
    _recorded(tmp_path, "gw-py2-push-all-2025-11-25", [sse])
    text = report.section(tmp_path, reasons)
    assert "every check that passes direct (`py2-push-all-2025-11-25`) passes through" in text
    lost = {"id": "tools-call-sampling", "status": "FAILURE", "message": "no back-channel"}
    _recorded(tmp_path, "gw-py2-push-all-2025-11-25", [sse, lost])
    text = report.section(tmp_path, reasons)
    assert "**1 check passes direct (`py2-push-all-2025-11-25`) but not through:** " in text
    assert "mrtr / `tools-call-sampling` (FAILURE)" in text
