"""The matrix data (compat_matrix/cells.toml) and how a run is judged (verdicts.py), without peers.

Issue #10: compat_matrix gains dual-era servers whose tools push their server
requests ("dual-push"); a legacy client must get through the gateway what it
gets direct, and a modern client, served modern (DESIGN §5.3), gets what the
server gives a modern request direct: no back-channel for a pushed request.
"""

from __future__ import annotations

from typing import Any

from compat_matrix.cells import ERAS, FEATURES, MRTR_FEATURES, cell_id, load_matrix, routes_for
from compat_matrix.runs import Run
from compat_matrix.verdicts import _observe, judge

NO_BACK_CHANNEL = "no back-channel for server-initiated requests"
# The features of issue #10's cells; the tasks cells (issue #16) have servers of
# their own and no dual-era one yet (tests/test_compat_matrix_tasks.py).
PUSH_FEATURES = tuple(f for f in FEATURES if f != "tasks")


def test_every_dual_push_combination_is_a_ready_cell_of_the_push_server() -> None:
    """Issue #10, Tests: dual-era push-style servers "over stdio and HTTP, both
    client eras, every MRTR feature and notifications" -- every client era x
    route x feature against `py2-push`, each once (load_matrix checks "once")."""
    matrix = load_matrix()
    for ce in ERAS:
        for front, back in routes_for(ce):
            for feature in PUSH_FEATURES:
                cell = matrix.cell(cell_id(ce, "dual-push", front, back, feature))
                assert cell.ready and cell.servers == ("py2-push",), cell.id
                assert cell.clients, cell.id


def test_dual_push_expectations_follow_design_5_3() -> None:
    """DESIGN §5.3: a legacy client of a dual-era server gets a legacy session
    (the pushed requests reach it natively: the call works, as direct); a modern
    or dual-era client is served modern, where a push-style tool fails direct,
    so it must fail the same way through the gateway, and only the MRTR call."""
    matrix = load_matrix()
    for cell in matrix.cells:
        if cell.server_era != "dual-push" or cell.feature == "tasks":
            continue
        era = "legacy" if cell.client_era == "legacy" else "modern"
        assert cell.gateway_era == era, cell.id
        if cell.front == cell.back:
            assert cell.direct_era == era, cell.id
        pushed = cell.feature in MRTR_FEATURES and era == "modern"
        assert cell.tool_error == (NO_BACK_CHANNEL if pushed else None), cell.id
    # The era-adaptive dual cells expect no tool error anywhere.
    assert not [c.id for c in matrix.cells if c.server_era == "dual" and c.tool_error]


def _observation(run: Run, steps: list[dict[str, Any]], error: str | None = None) -> Any:
    report = {"ok": error is None, "era": "modern", "steps": steps, "error": error}
    return _observe(
        run,
        report,
        duration=1.0,
        exit_code=0 if error is None else 1,
        timed_out=False,
        hard_timeout=50,
        leftovers=[],
        stderr="",
        first_stderr="",
        shared=1,
    )


def test_a_tool_error_cell_passes_only_on_the_servers_refusal_of_that_call() -> None:
    """A modern client's `summarize` against the push-style server: the call
    must fail with the SDK's "no back-channel" error and every other step pass;
    a call that works, or fails otherwise, or a failed connect, is a mismatch."""
    matrix = load_matrix()
    cell = matrix.cell("modern-dual-push.stdio-stdio.sampling")
    run = Run(cell, matrix.clients["raw-mrtr"], matrix.servers["py2-push"], "gateway")
    connect = {"step": "server/discover", "ok": True}
    listed = {"step": "sampling: summarize listed", "ok": True}
    refused = {
        "step": "sampling: summarize",
        "ok": False,
        "error": {
            "code": -32600,
            "message": f"Cannot send 'sampling/createMessage': "
            f"this transport context has {NO_BACK_CHANNEL}.",
        },
    }
    obs = _observation(run, [connect, listed, refused], "failed step: sampling: summarize")
    verdict = judge(obs)
    assert verdict.matched, verdict
    assert verdict.observed == "works (modern), tool error"
    assert "tool error:" in verdict.reason and "-32600" in verdict.reason

    worked = {"step": "sampling: summarize", "ok": True, "text": "sampled-by-client"}
    assert not judge(_observation(run, [connect, listed, worked])).matched
    other = {**refused, "error": {"code": -32603, "message": "boom"}}
    assert not judge(_observation(run, [connect, listed, other], "failed step: x")).matched
    lost = {"step": "server/discover", "ok": False, "error": "closed"}
    assert not judge(_observation(run, [lost, listed, refused], "failed step: x")).matched
    # Another feature's steps of a shared `--feature all` run do not count.
    roots = {"step": "roots: list_my_roots", "ok": False, "error": "other"}
    assert judge(_observation(run, [connect, listed, refused, roots], "failed step: x")).matched


def test_skip_leaves_out_matching_runs() -> None:
    """run.py --skip: the through-gateway runs of legacy clients' MRTR cells on
    the push-style server can be left out (and are not recorded) until the
    gateway's dual-era serving lands, while everything else of those cells runs."""
    from compat_matrix.runs import plan

    matrix = load_matrix()
    every = plan(matrix, "*dual-push*")
    kept = plan(matrix, "*dual-push*", ["legacy-dual-push.*.[esr]*@gateway"])
    left_out = {r.key for r in every} - {r.key for r in kept}
    assert left_out and all(
        k.startswith("legacy-dual-push.") and k.endswith("@gateway") for k in left_out
    )
    assert {matrix.cell(k.split(":")[0]).feature for k in left_out} == set(MRTR_FEATURES)
    assert any(r.key.startswith("legacy-dual-push.") and r.via == "direct" for r in kept)
