"""Real third-party MCP peers through the gateway over Streamable HTTP.

A compact selection of the HTTP cells of `compat_matrix/cells.toml` (the whole
set runs in `python compat_matrix/run.py`):

- http front -> stdio back (`gateway --listen 127.0.0.1:PORT -- SERVER`): the
  stdlib modern client and mcp 2.3.0's `Client` pinned to 2026-07-28 reach the
  legacy mcp 1.30.0 FastMCP server, including a form elicitation that becomes
  `input_required`; mcp 1.30.0's `ClientSession` over HTTP reaches the
  modern-only mcp 2.3.0 server, including an elicitation the gateway pushes on
  the POST's SSE stream;
- http front -> http back (`gateway --listen ... --upstream URL`, the server on
  its own HTTP port): modern client -> py1 over HTTP, and py1 -> the modern-only
  py2 server over HTTP, each with an MRTR feature, and the same pairs directly
  (no gateway), which fail as the spec says;
- stdio front -> http back (the client spawns `gateway --upstream URL`): the
  dual-era py2 client stays modern in front of py1.

Everything goes through the matrix's runner (`compat_matrix/runner.py`): the
HTTP servers and gateways it starts listen on free 127.0.0.1 ports, are
awaited (TCP accept, or the gateway's /readyz) and stopped by process group;
every process is tagged and reaped. The peers come from
`bash peers/install.sh`; when they are missing the tests FAIL, they are
never skipped.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from compat_matrix.cells import MRTR_FEATURES, ROUTES, Peer, Via, load_matrix
from compat_matrix.environment import INSTALL_HINT, Context, missing_peers, peers_dir
from compat_matrix.runner import run_job, run_many
from compat_matrix.runs import Run, find_run
from compat_matrix.verdicts import Observation, judge

pytestmark = pytest.mark.peers

MODERN = "2026-07-28"
HTTP_STDIO = ("http", "stdio")
HTTP_HTTP = ("http", "http")
STDIO_HTTP = ("stdio", "http")

# (client, server, via, feature, (front, back)) of compat_matrix/cells.toml.
Key = tuple[str, str, Via, str, tuple[str, str]]
WANTED: list[Key] = [
    # modern clients -> HTTP front -> legacy py1 (stdio)
    ("raw-modern", "py1", "gateway", "basic", HTTP_STDIO),
    ("raw-mrtr", "py1", "gateway", "elicitation-form", HTTP_STDIO),
    ("py2-mrtr-pinned", "py1", "gateway", "elicitation-form", HTTP_STDIO),
    # legacy py1 over HTTP -> gateway -> modern-only py2 (stdio)
    ("py1", "py2-modern", "gateway", "basic", HTTP_STDIO),
    ("py1-mrtr", "py2-modern", "gateway", "elicitation-form", HTTP_STDIO),
    # HTTP on both sides, and the same pairs without the gateway
    ("raw-mrtr", "py1", "gateway", "sampling", HTTP_HTTP),
    ("raw-mrtr", "py1", "direct", "sampling", HTTP_HTTP),
    ("py1-mrtr", "py2-modern", "gateway", "elicitation-url", HTTP_HTTP),
    ("py1-mrtr", "py2-modern", "direct", "elicitation-url", HTTP_HTTP),
    # stdio front -> HTTP back: a dual-era client stays modern
    ("py2-auto", "py1", "gateway", "basic", STDIO_HTTP),
]


@dataclass
class PeerRuns:
    """All observations of this module, or why there are none."""

    results: dict[Key, Observation]
    problem: str | None = None

    def get(self, key: Key) -> Observation:
        if self.problem is not None:
            pytest.fail(self.problem, pytrace=False)
        return self.results[key]


def _key(run: Run) -> Key:
    cell = run.cell
    return (run.client.name, run.server.name, run.via, cell.feature, (cell.front, cell.back))


@pytest.fixture(scope="module")
def http_runs() -> Iterator[PeerRuns]:
    missing = missing_peers()
    if missing:
        yield PeerRuns(
            {},
            f"the real MCP peers are not installed in {peers_dir()} "
            f"(missing: {', '.join(missing)}): {INSTALL_HINT}",
        )
        return
    matrix = load_matrix()
    runs = [
        find_run(matrix, client, server, via, feature, front=front, back=back)
        for client, server, via, feature, (front, back) in WANTED
    ]
    observations = run_many(runs, Context.for_matrix(matrix), jobs=2)
    yield PeerRuns({_key(o.run): o for o in observations})


# -- helpers -------------------------------------------------------------------


def explain(obs: Observation) -> str:
    tail = "\n    ".join(obs.stderr_tail[-10:])
    commands = "\n    ".join(obs.commands)
    return (
        f"{obs.run.key}: {obs.evidence}\n  commands:\n    {commands}\n"
        f"  report: {obs.report}\n  stderr:\n    {tail}"
    )


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
    assert not obs.leftovers, explain(obs)


def role_command(obs: Observation, role: str) -> str:
    found = [c.split(": ", 1)[1] for c in obs.commands if c.startswith(f"{role}: ")]
    assert len(found) == 1, explain(obs)
    return found[0]


# -- http front -> stdio back --------------------------------------------------------


def test_modern_client_over_http_reaches_py1(http_runs: PeerRuns) -> None:
    obs = http_runs.get(("raw-modern", "py1", "gateway", "basic", HTTP_STDIO))
    works(obs, "modern")
    assert MODERN in step(obs, "server/discover")["supportedVersions"]
    assert step(obs, "tools/call echo")["resultType"] == "complete"
    # run.py started the gateway on HTTP with py1 as its stdio upstream
    gateway = role_command(obs, "gateway")
    assert "--listen 127.0.0.1:" in gateway and "py1_server.py" in gateway
    assert "--url http://127.0.0.1:" in role_command(obs, "client")


def test_modern_mrtr_over_http_to_py1_gets_input_required(http_runs: PeerRuns) -> None:
    obs = http_runs.get(("raw-mrtr", "py1", "gateway", "elicitation-form", HTTP_STDIO))
    works(obs, "modern")
    call = step(obs, "elicitation-form: ask_name")
    assert call["text"] == "Hello, Ada"
    assert call["resultType"] == "complete"
    # one round: the gateway's key and a sealed requestState
    assert call["rounds"] == [
        {"inputRequests": {"input-1": "elicitation/create"}, "requestState": True}
    ]


def test_py2_pinned_drives_mrtr_over_http_to_py1(http_runs: PeerRuns) -> None:
    obs = http_runs.get(("py2-mrtr-pinned", "py1", "gateway", "elicitation-form", HTTP_STDIO))
    works(obs, "modern")
    call = step(obs, "elicitation-form: ask_name")
    assert call["text"] == "Hello, Ada"
    # the SDK ran the input_required round itself: the request id is the gateway's key
    assert [(c["method"], c["request_id"]) for c in call["callbacks"]] == [
        ("elicitation/create", "input-1")
    ]


def test_legacy_client_over_http_reaches_modern_only_py2(http_runs: PeerRuns) -> None:
    obs = http_runs.get(("py1", "py2-modern", "gateway", "basic", HTTP_STDIO))
    works(obs, "legacy")
    assert step(obs, "initialize")["protocolVersion"] != MODERN
    assert step(obs, "initialize")["serverInfo"]["name"] == "py2-fixture"
    assert step(obs, "tools/call add")["structuredContent"] == {"result": 5}


def test_legacy_client_over_http_gets_pushed_elicitation(http_runs: PeerRuns) -> None:
    obs = http_runs.get(("py1-mrtr", "py2-modern", "gateway", "elicitation-form", HTTP_STDIO))
    works(obs, "legacy")
    call = step(obs, "elicitation-form: ask_name")
    assert call["text"] == "Hello, Ada"
    # py2 answered input_required; the gateway pushed it on the POST's SSE stream
    assert [c["method"] for c in call["callbacks"]] == ["elicitation/create"]
    assert str(call["callbacks"][0]["request_id"]).startswith("gw-")


# -- http front -> http back ---------------------------------------------------------


def test_modern_client_reaches_py1_http_through_gateway(http_runs: PeerRuns) -> None:
    obs = http_runs.get(("raw-mrtr", "py1", "gateway", "sampling", HTTP_HTTP))
    works(obs, "modern")
    call = step(obs, "sampling: summarize")
    assert "sampled-by-client" in call["text"]
    assert call["rounds"][0]["inputRequests"] == {"input-1": "sampling/createMessage"}
    server = role_command(obs, "server")
    assert "py1_server.py" in server and " --http " in server
    port = server.rsplit(" ", 1)[1]
    assert f"--upstream http://127.0.0.1:{port}/mcp" in role_command(obs, "gateway")
    # ... and without the gateway py1 turns the modern POST away (400, no session)
    direct = http_runs.get(("raw-mrtr", "py1", "direct", "sampling", HTTP_HTTP))
    assert not direct.ok and not direct.timed_out, explain(direct)
    assert "HTTP 400" in (direct.error or ""), explain(direct)
    assert judge(direct).matched, judge(direct).reason


def test_legacy_client_reaches_modern_only_py2_http_through_gateway(http_runs: PeerRuns) -> None:
    obs = http_runs.get(("py1-mrtr", "py2-modern", "gateway", "elicitation-url", HTTP_HTTP))
    works(obs, "legacy")
    call = step(obs, "elicitation-url: open_link")
    assert call["text"] == "URL elicitation: accept"
    (pushed,) = call["callbacks"]
    assert pushed["mode"] == "url" and pushed["elicitationId"]  # minted by the gateway
    # ... and without it the modern-only server rejects initialize with HTTP 400
    direct = http_runs.get(("py1-mrtr", "py2-modern", "direct", "elicitation-url", HTTP_HTTP))
    assert not direct.ok and not direct.timed_out, explain(direct)
    assert "400" in (direct.error or ""), explain(direct)
    assert judge(direct).matched, judge(direct).reason


# -- stdio front -> http back -------------------------------------------------------


def test_dual_client_stays_modern_in_front_of_py1_http(http_runs: PeerRuns) -> None:
    obs = http_runs.get(("py2-auto", "py1", "gateway", "basic", STDIO_HTTP))
    works(obs, "modern")
    connect = step(obs, "connect")
    assert connect["protocolVersion"] == MODERN
    assert connect["via"] == "server/discover"
    assert connect["serverInfo"]["name"] == "py1-fixture"
    # the client spawned the gateway; only the server ran in the background
    assert "--upstream http://127.0.0.1:" in role_command(obs, "client")
    assert [c.split(": ", 1)[0] for c in obs.commands] == ["server", "client"]


# -- the matrix data and the runner -------------------------------------------------


def test_every_http_cell_is_ready() -> None:
    matrix = load_matrix()
    ready = [c for c in matrix.cells if c.ready]
    # client eras x server kinds (with dual-push, issue #10) x stdio|http routes, and
    # the legacy clients' sse front (issue #15) x server kinds x back; and the tasks
    # cells (issue #16) that have peers: modern|legacy x modern|legacy, every route
    assert len(ready) == 12 * 6 * 4 + 4 * 6 * 2 + 20
    assert {(c.front, c.back) for c in ready} == set(ROUTES)
    assert {c.feature for c in ready} == {"basic", *MRTR_FEATURES, "notifications", "tasks"}
    for cell in matrix.cells:
        if cell.feature == "notifications":
            want = (
                ("#15",)
                if cell.front == "sse"
                else ("#10",)
                if cell.server_era == "dual-push"
                else ("#5",)
            )
            assert cell.issues == want, cell.id
        if cell.ready and "http" in (cell.front, cell.back):
            for name in cell.servers:
                assert matrix.servers[name].http_command is not None or cell.back == "stdio"
            if cell.front != cell.back:
                assert cell.direct == "n/a", cell.id


def test_launch_plans_each_route() -> None:
    matrix = load_matrix()
    ctx = Context(peers=Path("/peers"))
    ports = iter(range(31001, 31100))

    def launch(via: Via, front: str, back: str) -> tuple[list[str], list[str], list[str]]:
        run = find_run(matrix, "py1", "py2-modern", via, front=front, back=back)
        plan = run.launch(ctx, ports=lambda: next(ports))
        roles: list[str] = [b.role for b in plan.background]
        argv = [" ".join(b.argv) for b in plan.background]
        return roles, argv, plan.client

    roles, _, client = launch("gateway", "stdio", "stdio")
    assert roles == [] and "gateway" in client
    assert "--url" not in client and "--listen" not in client

    roles, argv, client = launch("gateway", "stdio", "http")
    assert roles == ["server"] and argv[0].endswith("py2_modern_server.py --http 31001")
    assert client[client.index("--upstream") + 1] == "http://127.0.0.1:31001/mcp"

    roles, argv, client = launch("gateway", "http", "stdio")
    assert roles == ["gateway"] and "--listen 127.0.0.1:31002 -- " in argv[0]
    assert client[-2:] == ["--url", "http://127.0.0.1:31002/mcp"]

    roles, argv, client = launch("gateway", "http", "http")
    assert roles == ["server", "gateway"]
    assert "--listen 127.0.0.1:31004 --upstream http://127.0.0.1:31003/mcp" in argv[1]
    assert client[-2:] == ["--url", "http://127.0.0.1:31004/mcp"]

    roles, argv, client = launch("direct", "http", "http")
    assert roles == ["server"] and client[-2:] == ["--url", "http://127.0.0.1:31005/mcp"]

    with pytest.raises(ValueError, match="no direct run"):
        launch("direct", "stdio", "http")


def test_a_server_that_cannot_start_fails_the_run_cleanly() -> None:
    """An HTTP server that exits before it listens: the run fails with its
    output, quickly, and nothing is left behind."""
    matrix = load_matrix()
    run = find_run(matrix, "raw-modern", "py1", "gateway", front="http", back="http")
    broken: Peer = replace(
        run.server,
        http_command=f'{sys.executable} -c \'import sys; print("no port", sys.argv[1]); '
        "sys.exit(3)' {port}",
    )
    run = replace(run, server=broken)
    (obs,) = run_job([run], Context(peers=peers_dir(), start_timeout=10))
    assert not obs.ok
    assert obs.error is not None and obs.error.startswith("setup failed: server exited (3)")
    assert "no port" in obs.error
    assert obs.duration < 5
    assert not obs.leftovers
