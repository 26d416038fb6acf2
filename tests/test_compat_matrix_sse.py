"""The compatibility matrix's sse front (issue #15: "Compat matrix rows for the
SSE front"): the deprecated HTTP+SSE transport as a third front transport.

HTTP+SSE (2024-11-05) is a legacy-only transport: a modern or dual-era client
never uses it, so the sse front has legacy clients only, against every server
era, over both backs, for every feature; and the gateway must make every one
of those cells work (legacy, as the client negotiates). The last test runs a
few of them with the real SDK clients (mcp 1.30 `sse_client`, TS SDK 1.x
`SSEClientTransport`); `python compat_matrix/run.py` runs them all.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from compat_matrix.cells import (
    CELLS_FILE,
    ERAS,
    FEATURES,
    MRTR_FEATURES,
    SERVER_ERAS,
    TRANSPORTS,
    MatrixError,
    Via,
    cell_id,
    load_matrix,
)
from compat_matrix.environment import Context, missing_peers, peers_dir
from compat_matrix.matrix_report import render_report
from compat_matrix.runner import run_many
from compat_matrix.runs import Run, find_run
from compat_matrix.verdicts import _observe, judge

SSE_CLIENTS = {"basic": {"py1", "ts1-sse"}, "notifications": {"py1", "ts1-sse"}}
# The features of issue #15's cells; the sse tasks cells (issue #16) are ready only
# where a tasks fixture server exists (tests/test_compat_matrix_tasks.py).
SSE_FEATURES = tuple(f for f in FEATURES if f != "tasks")


def test_every_legacy_sse_combination_is_a_ready_cell_the_gateway_must_make_work() -> None:
    """Issue #15: cells "legacy client x every server era x front sse x back stdio
    and http x every feature ... Every one must be gateway = "works" and ready";
    no back is HTTP+SSE, so there is no direct run (n/a)."""
    matrix = load_matrix()
    for se in SERVER_ERAS:
        for back in TRANSPORTS:
            for feature in SSE_FEATURES:
                cell = matrix.cell(cell_id("legacy", se, "sse", back, feature))
                assert cell.ready and cell.gateway == "works", cell.id
                assert cell.gateway_era == "legacy", cell.id
                assert cell.direct == "n/a" and cell.direct_era is None, cell.id
                assert cell.servers, cell.id
                want = SSE_CLIENTS.get(feature, {"py1-mrtr"})
                assert set(cell.clients) == want, cell.id
                for name in cell.clients:
                    assert "sse" in matrix.clients[name].transports, name
                # As its stdio-<back> sibling: same servers, same expected tool error.
                sibling = matrix.cell(cell_id("legacy", se, "stdio", back, feature))
                assert cell.servers == sibling.servers, cell.id
                assert cell.tool_error == sibling.tool_error, cell.id


def test_modern_and_dual_clients_have_no_sse_front() -> None:
    """Issue #15: "a modern or dual client never uses" HTTP+SSE: no such cell, and
    no client of those eras declares the transport."""
    matrix = load_matrix()
    assert {c.client_era for c in matrix.cells if c.front == "sse"} == {"legacy"}
    for ce in ERAS:
        if ce != "legacy":
            with pytest.raises(KeyError):
                matrix.cell(cell_id(ce, "legacy", "sse", "stdio", "basic"))
    assert all("sse" not in c.transports for c in matrix.clients.values() if c.era != "legacy")
    assert all("sse" not in s.transports for s in matrix.servers.values())


def _broken(tmp_path: Path, edit: Any) -> str:
    """load_matrix's complaint about cells.toml after `edit(text) -> text`."""
    path = tmp_path / "cells.toml"
    path.write_text(edit(CELLS_FILE.read_text()))
    with pytest.raises(MatrixError) as caught:
        load_matrix(path)
    return str(caught.value)


def test_the_consistency_checks_cover_the_sse_front(tmp_path: Path) -> None:
    """Issue #15: "run.py's consistency checks (every combination appears exactly
    once, etc.) must cover the new front": a missing sse cell, a duplicated one,
    one for a modern client, and a modern client with an sse transport are errors."""
    wanted = 'id = "legacy-legacy.sse-http.sampling"'

    def drop(text: str) -> str:
        head, _, rest = text.partition(wanted)
        before = head.rsplit("[[cell]]", 1)[0]
        after = rest.split("[[cell]]", 1)[1]
        return before + "[[cell]]" + after

    assert "cell legacy-legacy.sse-http.sampling: missing from the matrix" in _broken(
        tmp_path, drop
    )

    def duplicate(text: str) -> str:
        block = "[[cell]]" + text.partition(wanted)[0].rsplit("[[cell]]", 1)[1] + wanted
        block += text.partition(wanted)[2].split("[[cell]]", 1)[0]
        return text + "\n" + block

    assert "legacy-legacy.sse-http.sampling: listed 2 times" in _broken(tmp_path, duplicate)

    modern = """
[[cell]]
id = "modern-legacy.sse-stdio.basic"
client_era = "modern"
server_era = "legacy"
front = "sse"
back = "stdio"
feature = "basic"
clients = ["raw-modern"]
servers = ["py1"]
direct = "n/a"
gateway = "works"
gateway_era = "modern"
status = "ready"
"""
    complaint = _broken(tmp_path, lambda text: text + modern)
    assert "cell modern-legacy.sse-stdio.basic: outside the declared dimensions" in complaint

    def modern_sse(text: str) -> str:
        head, sep, rest = text.partition("[clients.raw-modern]")
        line = 'transports = ["stdio", "http"]'
        return head + sep + rest.replace(line, 'transports = ["stdio", "http", "sse"]', 1)

    complaint = _broken(tmp_path, modern_sse)
    assert "client raw-modern: a modern client has no sse front" in complaint


def test_launch_plans_the_sse_front() -> None:
    """Issue #15: "Gateway start for the sse front: like http-* (run.py starts the
    gateway with --listen 127.0.0.1:PORT, waits for /readyz), and the client gets
    http://127.0.0.1:PORT/sse" -- as `--sse-url URL` in place of `-- {server}`."""
    matrix = load_matrix()
    ctx = Context(peers=Path("/peers"))
    ports = iter(range(31201, 31300))

    def launch(client: str, back: str, feature: str = "basic") -> tuple[list[Any], list[str]]:
        run = find_run(matrix, client, "py1", "gateway", feature, front="sse", back=back)
        plan = run.launch(ctx, ports=lambda: next(ports))
        return list(plan.background), plan.client

    (gateway,), client = launch("py1", "stdio")
    assert gateway.role == "gateway" and gateway.port == 31201
    assert gateway.ready_url == "http://127.0.0.1:31201/readyz"
    assert "--listen 127.0.0.1:31201 -- " in " ".join(gateway.argv)
    assert client[-2:] == ["--sse-url", "http://127.0.0.1:31201/sse"]
    assert "--" not in client and "--url" not in client

    (server, gateway), client = launch("py1-mrtr", "http", "roots")
    assert [server.role, gateway.role] == ["server", "gateway"]
    assert "--listen 127.0.0.1:31203 --upstream http://127.0.0.1:31202/mcp" in " ".join(
        gateway.argv
    )
    assert client[-2:] == ["--sse-url", "http://127.0.0.1:31203/sse"]

    _, client = launch("ts1-sse", "stdio")
    assert client[0] == "node" and client[1].endswith("ts1_sse_client.mjs")
    assert client[-2:] == ["--sse-url", "http://127.0.0.1:31204/sse"]

    run = find_run(matrix, "py1", "py1", "direct", front="sse", back="stdio")
    with pytest.raises(ValueError, match="no direct run"):
        run.launch(ctx, ports=lambda: 0)


def test_the_report_has_the_sse_front_tables() -> None:
    """Issue #15: "its report tables must show the sse front" -- a table per sse
    route, with the legacy client's rows only, and the sse routes in the summary."""
    matrix = load_matrix()
    cell = matrix.cell("legacy-modern.sse-stdio.basic")
    run = Run(cell, matrix.clients["ts1-sse"], matrix.servers["py2-modern"], "gateway")
    report = {"ok": True, "era": "legacy", "steps": [{"step": "initialize", "ok": True}]}
    obs = _observe(
        run,
        report,
        duration=1.0,
        exit_code=0,
        timed_out=False,
        hard_timeout=50,
        leftovers=[],
        stderr="",
        first_stderr="",
        shared=1,
    )
    assert judge(obs).matched
    text = render_report(
        matrix, [obs], only=None, elapsed=1.0, jobs=1, ctx=Context.for_matrix(matrix)
    )
    assert "| sse→stdio | gateway | 1 | 1 | 1 | 0 | 1 | 0 |" in text
    for back in TRANSPORTS:
        table = text.split(f"### sse front → {back} back\n", 1)[1].split("\n\n", 2)[0]
        rows = re.findall(r"^\| \*\*(\w+) → ([\w-]+)\*\*", table, re.MULTILINE)
        assert rows == [("legacy", se) for se in SERVER_ERAS], table
    assert "`--sse-url URL`" in text


# -- real peers ------------------------------------------------------------------

Key = tuple[str, str, Via, str, tuple[str, str]]
WANTED: list[Key] = [
    ("py1", "py2-modern", "gateway", "notifications", ("sse", "stdio")),
    ("ts1-sse", "everything", "gateway", "basic", ("sse", "http")),
    *[("py1-mrtr", "py1", "gateway", f, ("sse", "http")) for f in MRTR_FEATURES],
]


@pytest.mark.peers
def test_real_legacy_sse_clients_through_the_gateway() -> None:
    """Issue #15: the sse cells pass with the real clients -- mcp 1.30's
    `sse_client` and the TS SDK 1.x `SSEClientTransport` -- through the gateway's
    sse front to a modern-only server (notifications on the event stream), the TS
    reference server over an HTTP back, and py1's server requests (elicitation,
    sampling, roots) pushed on the legacy session's event stream."""
    missing = missing_peers()
    if missing:
        pytest.fail(f"the real MCP peers are not installed in {peers_dir()}: {missing}")
    matrix = load_matrix()
    runs = [
        find_run(matrix, client, server, via, feature, front=front, back=back)
        for client, server, via, feature, (front, back) in WANTED
    ]
    observations = run_many(runs, Context.for_matrix(matrix), jobs=2)
    for obs in observations:
        verdict = judge(obs)
        assert verdict.matched, f"{obs.run.key}: {verdict.reason}\n{obs.stderr_tail}"
        assert obs.era == "legacy" and not obs.leftovers, obs.run.key
        assert any("--sse-url" in c and c.endswith("/sse") for c in obs.commands), obs.commands
    # the four MRTR cells of the pair shared one `--feature all` client run
    assert [o.shared for o in observations[2:]] == [4] * 4
    notified = observations[0].input_path or ""
    assert "(the HTTP+SSE event stream)" in notified, notified
