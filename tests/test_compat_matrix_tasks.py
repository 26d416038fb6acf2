"""The compatibility matrix's tasks feature (issue #16, "Compat matrix rows for
tasks"): `io.modelcontextprotocol/tasks` across eras (DESIGN 5.4).

Ready where a peer exists and the gateway serves it: a modern client (the raw
client, declaring the extension and polling its task) and a legacy client (mcp
1.30, ordinary results) against the modern tasks server and the legacy server
with the same task tools, over every route of the client's era. The dual-era
servers and clients have no tasks peer yet: those cells are "not yet" (#16).
The last test runs a few cells with the real peers; `python compat_matrix/run.py
--only '*.tasks:*'` runs them all.
"""

from __future__ import annotations

from typing import Any

import pytest

from compat_matrix.cells import ERAS, SERVER_ERAS, cell_id, load_matrix, routes_for
from compat_matrix.environment import Context, missing_peers, peers_dir
from compat_matrix.runner import run_many
from compat_matrix.runs import Run, find_run
from compat_matrix.verdicts import _observe, judge

SERVED = {("modern", "modern"), ("modern", "legacy"), ("legacy", "modern"), ("legacy", "legacy")}
TASK_SERVERS = {"modern": ("py2-tasks",), "legacy": ("py1-tasks",)}
TASK_CLIENTS = {"modern": ("raw-modern",), "legacy": ("py1",)}
# The shortest task tool call of the clients' checks takes 1 s (confirm_delete's
# work before it asks); the gateway must turn it into a task before that.
SHORTEST_CALL = 1.0


def test_the_tasks_cells_with_peers_are_ready_and_the_others_wait_on_16() -> None:
    """Every client era x server era x route has a tasks cell (load_matrix checks
    "exactly once"); the modern and legacy pairs are ready with the tasks
    fixtures, the rest are "not yet" with issue #16 and a reason."""
    matrix = load_matrix()
    ready = []
    for ce in ERAS:
        for se in SERVER_ERAS:
            for front, back in routes_for(ce):
                cell = matrix.cell(cell_id(ce, se, front, back, "tasks"))
                assert cell.issues == ("#16",) and cell.note, cell.id
                assert cell.gateway == "works", cell.id
                if (ce, se) in SERVED:
                    assert cell.ready, cell.id
                    assert cell.clients == TASK_CLIENTS[ce], cell.id
                    assert cell.servers == TASK_SERVERS[se], cell.id
                    ready.append(cell)
                else:
                    assert cell.status == "not yet", cell.id
    # modern: 2 server eras x 4 routes; legacy: 2 x 6 (the sse front too)
    assert len(ready) == 2 * 4 + 2 * 6
    assert len([c for c in matrix.cells if c.feature == "tasks" and not c.ready]) == 36


def test_the_tasks_cells_expect_what_the_spec_and_design_5_4_say() -> None:
    """Direct, modern -> legacy and legacy -> modern fail (the spec's rows) and
    the same-era pairs work, the modern pair with the task polled to its result;
    through the gateway every served cell works in the client's era."""
    matrix = load_matrix()
    for cell in matrix.cells:
        if cell.feature != "tasks" or not cell.ready:
            continue
        if cell.front != cell.back:
            assert cell.direct == "n/a", cell.id
        elif cell.client_era == cell.server_era:
            assert (cell.direct, cell.direct_era) == ("works", cell.client_era), cell.id
        else:
            assert cell.direct == "fails", cell.id
        assert cell.gateway_era == cell.client_era, cell.id


def test_every_tasks_cell_runs_the_gateway_with_a_short_tasks_after() -> None:
    """A modern client of a legacy server gets a task only for a call that
    outlasts `[tasks] after` (2 s by default): the cells set it below the
    shortest call, and the runs' commands say so."""
    matrix = load_matrix()
    ctx = Context.for_matrix(matrix, peers=peers_dir())
    for cell in matrix.cells:
        if cell.feature != "tasks":
            assert cell.env == (), cell.id
            continue
        env = dict(cell.env)
        assert float(env["MCP_ERA_GATEWAY_TASKS_AFTER"]) < SHORTEST_CALL, cell.id
    run = find_run(matrix, "raw-modern", "py1-tasks", "gateway", "tasks")
    described = run.launch(ctx, ports=lambda: 0).describe()
    assert described[0] == "env: MCP_ERA_GATEWAY_TASKS_AFTER=0.5"
    assert described[-1].startswith("client: ") and "--feature tasks" in described[-1]


def _observation(run: Run, steps: list[dict[str, Any]]) -> Any:
    ok = all(s["ok"] for s in steps)
    report = {"ok": ok, "era": "modern", "steps": steps, "error": None if ok else "failed step: x"}
    return _observe(
        run,
        report,
        duration=1.0,
        exit_code=0 if ok else 1,
        timed_out=False,
        hard_timeout=50,
        leftovers=[],
        stderr="",
        first_stderr="",
        shared=1,
    )


def test_a_tasks_run_needs_the_clients_tasks_check() -> None:
    """A client that ignored `--feature tasks` (a report without `tasks: `
    steps) does not pass; one that ran it shows what happened to the calls."""
    matrix = load_matrix()
    run = find_run(matrix, "raw-modern", "py1-tasks", "gateway", "tasks")
    connect = {"step": "server/discover", "ok": True}
    plain = judge(_observation(run, [connect]))
    assert not plain.matched and "no tasks check" in plain.reason
    path = "slow_compute: task working→completed"
    steps = [
        connect,
        {"step": "tasks: slow_compute: answered with a task", "ok": True},
        {"step": "tasks: path", "ok": True, "path": path},
    ]
    obs = _observation(run, steps)
    assert judge(obs).matched and obs.input_path == path
    refused = [*steps[:1], {"step": "tasks: slow_compute: answered with a task", "ok": False}]
    assert not judge(_observation(run, refused)).matched


# -- real peers ------------------------------------------------------------------


@pytest.mark.peers
def test_real_tasks_cells_through_the_gateway() -> None:
    """Issue #16's two directions with the real peers: the raw modern client gets
    tasks of the gateway's own from the mcp 1.30 server (stdio), its elicitation
    as input_required; the mcp 1.30 client gets ordinary results of the modern
    tasks server (HTTP back), the gateway declaring the extension and polling."""
    missing = missing_peers()
    if missing:
        pytest.fail(f"the real MCP peers are not installed in {peers_dir()}: {missing}")
    matrix = load_matrix()
    runs = [
        find_run(matrix, "raw-modern", "py1-tasks", "gateway", "tasks"),
        find_run(matrix, "py1", "py2-tasks", "gateway", "tasks", front="stdio", back="http"),
    ]
    observations = run_many(runs, Context.for_matrix(matrix), jobs=2)
    for obs in observations:
        verdict = judge(obs)
        assert verdict.matched, f"{obs.run.key}: {verdict.reason}\n{obs.stderr_tail}"
        assert not obs.leftovers, obs.run.key
    modern, legacy = observations
    assert modern.input_path == (
        "slow_compute: task working→completed; "
        "confirm_delete: task working→input_required→completed"
    )
    assert legacy.input_path == "ordinary results; elicitations asked: 2"
