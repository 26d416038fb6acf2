"""The servers people actually run, through the gateway (issue 10, "Tests").

Issue 10: "Real popular servers, installed by `peers/install.sh` at pinned
versions: from npm `@modelcontextprotocol/server-filesystem`, `server-memory`,
`server-everything`; from PyPI `mcp-server-time` (an old pinned legacy release
and, where one exists, a newer dual-era release). Through the gateway, a modern
client (mcp 2.3 `Client` pinned to 2026-07-28) and a legacy client (mcp 1.30
`ClientSession`) each list tools and call a real tool with a checked answer
(write then read a file, create then read an entity, the time in UTC, ...), over
stdio and over HTTP, first request of a fresh gateway included." and "`probe` on
each of the above prints the right era (a test per kind)."

Everything runs through `compat_matrix/popular.py` (which also writes the
"Popular servers" section of REPORT.md): every case gets a fresh gateway and
its own temporary directory (the filesystem root, the memory store); the
clients declare roots, as the desktop clients that run these servers do.
Processes are tagged and reaped. When the peers are missing the tests FAIL,
they are never skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from compat_matrix.environment import INSTALL_HINT, peers_dir
from compat_matrix.popular import run_all
from compat_matrix.popular_report import HEADING, section, write_section
from compat_matrix.popular_servers import CLIENTS, TRANSPORTS, missing, servers

pytestmark = pytest.mark.peers

CALLED = [s.name for s in servers(peers_dir()) if s.scenario is not None]
PROBED = {s.name: s.era for s in servers(peers_dir())}


@dataclass
class PopularRuns:
    probes: dict[str, dict[str, Any]]
    calls: dict[tuple[str, str, str], dict[str, Any]]
    problem: str | None = None

    def check(self) -> None:
        if self.problem is not None:
            pytest.fail(self.problem, pytrace=False)


@pytest.fixture(scope="module")
def popular() -> Iterator[PopularRuns]:
    peers = peers_dir()
    lacking = missing(peers)
    if lacking:
        yield PopularRuns(
            {}, {}, f"peers missing in {peers} ({', '.join(lacking)}): {INSTALL_HINT}"
        )
        return
    probes, calls = run_all(peers, jobs=3)
    yield PopularRuns(
        {p["server"]: p for p in probes},
        {(c["server"], c["client"], c["transport"]): c for c in calls},
    )


def explain(result: dict[str, Any]) -> str:
    what = result.get("error")
    if "client" not in result:  # a probe: what it printed
        answer = result.get("answer") or {}
        what = f"era {result.get('era')!r}, probe {answer.get('probe')}, {what or ''}"
    lines = [
        f"{result.get('server')} {result.get('client', 'probe')} {result.get('transport', '')}: "
        f"{what}",
        *(f"  {c}" for c in result.get("commands") or [result.get("command", "")]),
        *(f"  step: {s}" for s in result.get("steps") or []),
        *(f"  stderr: {line}" for line in result.get("stderr_tail") or []),
    ]
    return "\n".join(lines)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("client", list(CLIENTS))
@pytest.mark.parametrize("server", CALLED)
def test_popular_server_through_a_fresh_gateway(
    popular: PopularRuns, server: str, client: str, transport: str
) -> None:
    """Issue 10: the client lists tools and calls a real tool with a checked
    answer through a fresh gateway, first request included, in its own era
    ("Popular servers work out of the box"). For the modern client in front of
    server-filesystem this is the defect the issue names: the server asks
    `roots/list` right after `initialized` while the first `tools/list` is in
    flight, and that call failed with -32021 although the client declared roots."""
    popular.check()
    result = popular.calls[(server, client, transport)]
    assert result["ok"], explain(result)
    assert result["era"] == client, explain(result)
    names = [s["step"] for s in result["steps"]]
    assert "tools/list" in names, explain(result)
    assert any(n.startswith("tools/call") for n in names), explain(result)


@pytest.mark.parametrize("server", list(PROBED))
def test_probe_prints_the_right_era(popular: PopularRuns, server: str) -> None:
    """Issue 10: "`probe` on each of the above prints the right era (a test per
    kind)", three eras: "`probe` prints `"era": "dual"` with the versions of both
    eras for a server that serves both, `modern` / `legacy` otherwise, and how it
    found out". Legacy: the npm reference servers and mcp-server-time 2026.1.26;
    dual: mcp-server-time 2026.10.19 and the mcp 2.3 fixture with --dual (mcp 2.x
    servers are dual-era by default); modern-only: the mcp 2.3 fixture that
    rejects initialize, and the TS 2.4 fixture with legacy:'reject'."""
    popular.check()
    result = popular.probes[server]
    assert result["exit_code"] == 0, explain(result)
    assert result["era"] == PROBED[server], explain(result)
    answer = result["answer"]
    assert answer.get("probe", {}).get("reason"), explain(result)  # how it found out
    if PROBED[server] == "dual":
        # The versions of both eras, wherever the answer lists them.
        text = json.dumps(answer)
        assert "2026-07-28" in text, answer
        assert "2025-11-25" in text, answer


def test_report_section_is_rewritten_in_place(tmp_path: Path) -> None:
    """Issue 10: the popular servers "become rows of `REPORT.md`", regenerated
    from a saved run: writing the section twice leaves one copy, and the
    sections around it stay."""
    saved = {
        "date": "2026-12-01 00:00 UTC",
        "code": "commit `abc`",
        "probes": [
            {"server": "memory", "era": "legacy", "want": "legacy", "label": "server-memory 1"},
            {"server": "time-dual", "era": "modern", "want": "dual", "label": "time 2"},
        ],
        "calls": [
            {
                "server": "memory",
                "client": c,
                "transport": t,
                "ok": c == "legacy",
                "error": None if c == "legacy" else "JSON-RPC error -32021: no | roots",
                "steps": [{"step": "tools/call open_nodes", "ok": True, "text": "seen x"}],
            }
            for c in CLIENTS
            for t in TRANSPORTS
        ],
    }
    results = tmp_path / "results.json"
    results.write_text(json.dumps(saved))
    out = tmp_path / "REPORT.md"
    out.write_text("# Report\n\n## Earlier\n\ntext\n\n" + HEADING + "\n\nold\n\n## Later\n\nkept\n")
    text = section(results)
    write_section(out, text)
    write_section(out, text)
    body = out.read_text()
    assert body.count(HEADING) == 1
    assert "old" not in body
    assert body.index("## Earlier") < body.index(HEADING) < body.index("## Later")
    assert "2/4 calls work, 1/2 probes print the right era" in body
    assert (
        "| memory | server-memory 1 | legacy (legacy) | "
        "**fails**: JSON-RPC error -32021: no \\| roots" in body
    )
    assert "| time-dual | time 2 | modern (dual) **wrong** |" in body
    assert "open_nodes: seen x" in body
