"""Real third-party MCP peers through the gateway over stdio.

Each test runs the fixture clients and servers of `compat_matrix/peers/` (real
SDKs: mcp 1.30.0 / 2.3.0, TS SDK 1.32.2 server-everything, TS SDK 2.4.0) with
`python -m gateway` in between, and, for the cells the spec says fail, also
without it, so the test proves that the gateway is what makes them work.

The runs go through the matrix's runner, `compat_matrix/runner.py` (hard
timeout, own process group, every spawned process reaped) and all run once
per session, two at a time. The peers come from `bash peers/install.sh`; when they are missing the
tests FAIL (CI installs them first), they are never skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from compat_matrix.cells import MRTR_FEATURES, Via, load_matrix
from compat_matrix.environment import INSTALL_HINT, Context, missing_peers, peers_dir
from compat_matrix.runner import group_runs, run_many
from compat_matrix.runs import Run, find_run
from compat_matrix.verdicts import Observation, _observe, judge

pytestmark = pytest.mark.peers

MODERN = "2026-07-28"

# (client, server) pairs of compat_matrix/cells.toml and the routes to run.
GATEWAY_PAIRS: list[tuple[str, str]] = [
    ("raw-modern", "py1"),  # modern -> mcp 1.30.0 FastMCP
    ("raw-modern", "everything"),  # modern -> TS 1.x server-everything
    ("py1", "py2-modern"),  # mcp 1.30.0 ClientSession -> modern-only mcp 2.3.0
    ("py1", "ts2-modern"),  # mcp 1.30.0 ClientSession -> modern-only TS 2.x
    ("py2-auto", "py1"),  # dual -> legacy: must stay modern
    ("py1", "py1"),  # same era: legacy -> legacy
    ("raw-modern", "py2-modern"),  # same era: modern -> modern
    ("py2-auto", "py2-dual"),  # dual -> dual: stays modern
]
# Direct counterparts of the cells the spec says fail, plus dual -> legacy
# direct (works, but only as legacy: the gateway is what keeps it modern).
DIRECT_FAILS: list[tuple[str, str, str]] = [
    ("raw-modern", "py1", "-32602"),  # 1.x: any request before initialize
    ("raw-modern", "everything", "-32601"),  # server/discover is unknown
    ("py1", "py2-modern", "-32022"),  # initialize refused, data.supported
    ("py1", "ts2-modern", "-32022"),
]
DIRECT_OTHER: list[tuple[str, str]] = [("py2-auto", "py1")]

Key = tuple[str, str, Via]


@dataclass
class PeerRuns:
    """All observations of this module, or why there are none."""

    results: dict[Key, Observation]
    problem: str | None = None

    def get(self, client: str, server: str, via: Via) -> Observation:
        if self.problem is not None:
            pytest.fail(self.problem, pytrace=False)
        return self.results[(client, server, via)]


@pytest.fixture(scope="session")
def peer_runs() -> Iterator[PeerRuns]:
    missing = missing_peers()
    if missing:
        yield PeerRuns(
            {},
            f"the real MCP peers are not installed in {peers_dir()} "
            f"(missing: {', '.join(missing)}): {INSTALL_HINT}",
        )
        return
    matrix = load_matrix()
    wanted: list[Key] = [(c, s, "gateway") for c, s in GATEWAY_PAIRS]
    wanted += [(c, s, "direct") for c, s, _ in DIRECT_FAILS]
    wanted += [(c, s, "direct") for c, s in DIRECT_OTHER]
    runs = [find_run(matrix, c, s, via) for c, s, via in wanted]
    observations = run_many(runs, Context.for_matrix(matrix), jobs=2)
    yield PeerRuns({(o.run.client.name, o.run.server.name, o.run.via): o for o in observations})


# -- helpers -------------------------------------------------------------------


def explain(obs: Observation) -> str:
    tail = "\n    ".join(obs.stderr_tail[-8:])
    return f"{obs.run.key}: {obs.evidence}\n  report: {obs.report}\n  stderr:\n    {tail}"


def step(obs: Observation, name: str) -> dict[str, Any]:
    assert obs.report is not None, explain(obs)
    for item in obs.report.get("steps") or []:
        if item.get("step") == name:
            return dict(item)
    raise AssertionError(f"no step {name!r} in {explain(obs)}")


def works(obs: Observation, era: str) -> None:
    assert obs.ok, explain(obs)
    assert obs.era == era, explain(obs)
    assert judge(obs).matched, judge(obs).reason


def tools(obs: Observation) -> set[str]:
    return set(step(obs, "tools/list")["tools"])


def server_name(obs: Observation, first_step: str) -> str:
    return str(step(obs, first_step)["serverInfo"]["name"])


# -- modern client -> legacy servers ------------------------------------------------


def test_modern_client_reaches_py1_fastmcp(peer_runs: PeerRuns) -> None:
    obs = peer_runs.get("raw-modern", "py1", "gateway")
    works(obs, "modern")
    assert MODERN in step(obs, "server/discover")["supportedVersions"]
    assert step(obs, "tools/call echo")["resultType"] == "complete"
    assert {"echo", "add", "ask_name", "summarize"} <= tools(obs)  # the py1 fixture's tools


def test_modern_client_reaches_ts1_server_everything(peer_runs: PeerRuns) -> None:
    obs = peer_runs.get("raw-modern", "everything", "gateway")
    works(obs, "modern")
    assert step(obs, "tools/list")["resultType"] == "complete"
    assert "get-sum" in tools(obs)
    assert step(obs, "echo text")["text"].startswith("Echo: ")  # server-everything's echo


# -- legacy client -> modern-only servers -------------------------------------------


def test_legacy_client_reaches_modern_only_py2(peer_runs: PeerRuns) -> None:
    obs = peer_runs.get("py1", "py2-modern", "gateway")
    works(obs, "legacy")
    assert step(obs, "initialize")["protocolVersion"] != MODERN
    assert server_name(obs, "initialize") == "py2-fixture"
    assert step(obs, "tools/call add")["structuredContent"] == {"result": 5}


def test_legacy_client_reaches_modern_only_ts2(peer_runs: PeerRuns) -> None:
    obs = peer_runs.get("py1", "ts2-modern", "gateway")
    works(obs, "legacy")
    assert step(obs, "initialize")["protocolVersion"] != MODERN
    assert server_name(obs, "initialize") == "ts2-fixture"
    assert step(obs, "tools/call echo")["ok"]


# -- dual client -> legacy server stays modern -------------------------------------


def test_dual_client_reaches_legacy_server_and_stays_modern(peer_runs: PeerRuns) -> None:
    obs = peer_runs.get("py2-auto", "py1", "gateway")
    works(obs, "modern")
    connect = step(obs, "connect")
    assert connect["protocolVersion"] == MODERN
    assert connect["via"] == "server/discover"
    assert connect["serverInfo"]["name"] == "py1-fixture"
    # Without the gateway the same client falls back to legacy.
    direct = peer_runs.get("py2-auto", "py1", "direct")
    works(direct, "legacy")
    assert step(direct, "connect")["via"] == "initialize"


# -- same era still works ---------------------------------------------------------


def test_legacy_to_legacy_still_works(peer_runs: PeerRuns) -> None:
    obs = peer_runs.get("py1", "py1", "gateway")
    works(obs, "legacy")
    assert server_name(obs, "initialize") == "py1-fixture"


def test_modern_to_modern_still_works(peer_runs: PeerRuns) -> None:
    obs = peer_runs.get("raw-modern", "py2-modern", "gateway")
    works(obs, "modern")
    assert step(obs, "tools/call echo")["resultType"] == "complete"


def test_dual_client_to_dual_server_stays_modern(peer_runs: PeerRuns) -> None:
    obs = peer_runs.get("py2-auto", "py2-dual", "gateway")
    works(obs, "modern")
    assert step(obs, "connect")["protocolVersion"] == MODERN
    assert server_name(obs, "connect") == "py2-fixture"


# -- the failing cells really fail without the gateway ----------------------------------


@pytest.mark.parametrize(
    ("client", "server", "code"), DIRECT_FAILS, ids=[f"{c}>{s}" for c, s, _ in DIRECT_FAILS]
)
def test_direct_counterpart_fails(peer_runs: PeerRuns, client: str, server: str, code: str) -> None:
    obs = peer_runs.get(client, server, "direct")
    assert not obs.ok, f"works without the gateway: {explain(obs)}"
    assert not obs.timed_out, explain(obs)
    assert code in (obs.error or ""), explain(obs)
    assert judge(obs).matched, judge(obs).reason
    # ... and the same pair works through the gateway.
    assert peer_runs.get(client, server, "gateway").ok


def test_matrix_data_is_consistent() -> None:
    matrix = load_matrix()
    ready = [c for c in matrix.cells if c.ready]
    # client eras x server kinds (the three eras and dual-push, issue #10) x front x back
    # x feature, and the legacy clients' sse front (issue #15) x server kinds x back x feature
    assert len(matrix.cells) == 3 * 4 * 2 * 2 * 7 + 4 * 2 * 7
    # every front x back: basic and the four MRTR features, every era combination
    assert {(c.front, c.back) for c in ready} == {
        ("stdio", "stdio"),
        ("stdio", "http"),
        ("http", "stdio"),
        ("http", "http"),
        ("sse", "stdio"),
        ("sse", "http"),
    }
    assert {c.feature for c in ready} == {"basic", *MRTR_FEATURES, "notifications", "tasks"}
    # every cell but the tasks cells without a dual-era peer (issue #16): 20 tasks cells ready
    assert len(ready) == 12 * 6 * 4 + 4 * 6 * 2 + 20
    assert len([c for c in matrix.cells if not c.ready]) == 36
    for cell in matrix.cells:
        # the issue that made them runnable
        if cell.feature == "tasks":
            assert cell.issues == ("#16",), cell.id
        elif cell.front == "sse":
            assert cell.issues == ("#15",), cell.id
        elif cell.server_era == "dual-push":
            assert cell.issues == ("#10",), cell.id
        elif cell.feature == "notifications":
            assert "#5" in cell.issues, cell.id
        if cell.feature == "notifications":
            assert "ts2-modern" not in cell.servers and "ts2-dual" not in cell.servers
    # every basic client is told what to check; the MRTR clients stay MRTR-only
    for client in matrix.clients.values():
        assert client.takes_feature
        assert ("notifications" in client.features) != client.mrtr, client.name


def test_mrtr_runs_of_a_pair_share_one_client_run() -> None:
    matrix = load_matrix()
    runs = [find_run(matrix, "raw-mrtr", "py1", "gateway", f) for f in MRTR_FEATURES]
    runs.append(find_run(matrix, "raw-modern", "py1", "gateway"))
    runs.append(find_run(matrix, "raw-mrtr", "py1", "direct", "roots"))
    assert group_runs(runs) == [[0, 1, 2, 3], [4], [5]]
    assert group_runs(runs, group=False) == [[i] for i in range(6)]
    assert group_runs(runs[1:]) == [[0], [1], [2], [3], [4]]  # three of four: one each
    ctx = Context(peers=peers_dir())
    assert "--feature" in (argv := runs[0].argv(ctx, feature="all"))
    assert argv[argv.index("--feature") + 1] == "all"
    checks = find_run(matrix, "raw-mrtr", "py1", "gateway", "roots", options=["--check-errors"])
    argv = checks.argv(ctx)
    assert argv[argv.index("--check-errors") + 1 : argv.index("--check-errors") + 2] == ["--"]
    assert argv[argv.index("--feature") + 1] == "roots"


def _fake(run: Run, report: dict[str, Any] | None, exit_code: int = 1) -> Observation:
    return _observe(
        run,
        report,
        duration=1.0,
        exit_code=exit_code,
        timed_out=False,
        hard_timeout=50,
        leftovers=[],
        stderr="",
        first_stderr="",
        shared=4,
    )


def test_notifications_runs_are_judged_on_the_whole_report() -> None:
    matrix = load_matrix()
    run = find_run(matrix, "raw-modern", "py1", "gateway", "notifications")
    ctx = Context(peers=peers_dir())
    argv = run.argv(ctx)
    assert argv[argv.index("--feature") + 1] == "notifications"
    basic = find_run(matrix, "raw-modern", "py1", "gateway").argv(ctx)
    assert basic[basic.index("--feature") + 1] == "basic"
    assert group_runs([run, run]) == [[0], [1]]  # never shared

    path = "listen id 4; acknowledged; resources/updated notes://compat; tools/list_changed"
    steps: list[dict[str, Any]] = [
        {"step": "server/discover", "ok": True, "supportedVersions": [MODERN]},
        {"step": "notifications: listen acknowledged first", "ok": True},
        {"step": "notifications: resources/updated tagged", "ok": True},
        {"step": "notifications: delivered", "ok": True, "path": path},
    ]
    good = {"ok": True, "era": "modern", "steps": steps, "error": None}
    obs = _fake(run, good, 0)
    assert obs.ok and judge(obs).matched
    assert obs.input_path == path and path in obs.evidence
    # a failed notifications step fails the run, and the error names the step
    failed = [*steps[:2], {"step": "notifications: resources/updated tagged", "ok": False}]
    bad = dict(good, ok=False, steps=failed, error="failed step: notifications: resources/…")
    obs = _fake(run, bad, 1)
    assert not obs.ok and not judge(obs).matched
    assert "failed step notifications: resources/updated tagged" in (obs.error or "")
    # a client that ignored --feature notifications (basic steps only) does not pass
    only_basic = dict(good, steps=steps[:1])
    obs = _fake(run, only_basic, 0)
    assert not obs.ok and obs.error == "the report has no notifications check"
    # the same report is fine for the basic cell
    assert _fake(find_run(matrix, "raw-modern", "py1", "gateway"), only_basic, 0).ok
    # a direct run of a cell the spec says fails: failing is as expected
    direct = find_run(matrix, "raw-modern", "py1", "direct", "notifications")
    refused = {"ok": False, "era": "modern", "steps": steps[:1], "error": "server/discover failed"}
    assert judge(_fake(direct, refused, 1)).matched
    assert not judge(_fake(direct, good, 0)).matched


def test_each_mrtr_cell_is_judged_on_its_own_steps() -> None:
    matrix = load_matrix()
    runs = {f: find_run(matrix, "raw-mrtr", "py1", "gateway", f) for f in MRTR_FEATURES}
    steps: list[dict[str, Any]] = [{"step": "server/discover", "ok": True}]
    for feature, tool in zip(
        MRTR_FEATURES, ("ask_name", "open_link", "summarize", "list_my_roots"), strict=True
    ):
        steps.append({"step": f"{feature}: {tool} listed", "ok": True})
        rounds = [{"inputRequests": {"input-1": "x/y"}, "requestState": True}]
        steps.append({"step": f"{feature}: {tool}", "ok": feature != "sampling", "rounds": rounds})
    report = {"ok": False, "era": "modern", "steps": steps, "error": "failed step: sampling: s"}
    got = {f: _fake(run, report) for f, run in runs.items()}
    assert [got[f].ok for f in MRTR_FEATURES] == [True, True, False, True]
    assert "input_required x1 [input-1=x/y] +requestState" in got["roots"].evidence
    assert "failed step sampling: summarize" in (got["sampling"].error or "")
    # a step outside any feature, or an error of the client itself, fails them all
    broken = dict(report, error="timeout after 30s")
    assert not any(_fake(run, broken).ok for run in runs.values())
    common = dict(report, steps=[*steps, {"step": "no server-to-client requests", "ok": False}])
    assert not any(_fake(run, common).ok for run in runs.values())
    # a feature whose call never ran does not pass
    only_form = dict(report, ok=True, error=None, steps=steps[:3])
    assert _fake(runs["elicitation-form"], only_form, 0).ok
    assert not _fake(runs["roots"], only_form, 0).ok
    assert not _fake(runs["roots"], None).ok
