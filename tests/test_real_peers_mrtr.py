"""The MRTR bridge with real third-party MCP peers, through the gateway over stdio.

Multi round-trip requests (2026-07-28) on one side, server-initiated requests
(2025-11-25) on the other, with real SDKs and no scripted peers:

- modern clients (the stdlib raw client, and mcp 2.3.0's `Client` with
  callbacks, pinned to 2026-07-28) -> gateway -> mcp 1.30.0 FastMCP tools that
  call `ctx.elicit`, `create_message` and `list_roots`, and TS SDK 1.x
  server-everything's trigger-elicitation-request / trigger-url-elicitation /
  trigger-sampling-request / get-roots-list: the client gets `input_required`
  with gateway keys and a `requestState`, and its answers reach the server;
- mcp 1.30.0 `ClientSession` with callbacks -> gateway -> the modern-only
  mcp 2.3.0 server whose tools answer `input_required`: the gateway pushes the
  input requests to the legacy client (ids `gw-N`) and retries upstream;
- a tampered / rebound / replayed `requestState` is refused with -32602 and the
  correct retry still works; a -32042 (URL elicitation required) from py1
  reaches modern clients as `input_required` with a URL elicitation;
- 32 concurrent modern MRTR calls through ONE gateway process to the real py1
  server, each answered with its own name, each getting its own greeting back.

Everything goes through the matrix's runner, `compat_matrix/runner.py` (hard
timeout, own process group, every spawned process reaped), once per session,
two client runs at a time. The peers come from `bash peers/install.sh`; when they are
missing the tests FAIL, they are never skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from compat_matrix.cells import MRTR_FEATURES, URL_REQUIRED, Matrix, Peer, load_matrix
from compat_matrix.environment import INSTALL_HINT, Context, missing_peers, peers_dir
from compat_matrix.runner import run_many
from compat_matrix.runs import Run, find_run
from compat_matrix.verdicts import Observation, judge

pytestmark = pytest.mark.peers

MODERN = "2026-07-28"
CONCURRENT_CALLS = 32
# What each feature's tool call must return (compat_matrix/peers/_mrtr_common.py)
# and the input request method the server must have made.
FIXTURE_TOOLS = {
    "elicitation-form": ("ask_name", "Hello, Ada", "elicitation/create"),
    "elicitation-url": ("open_link", "URL elicitation: accept", "elicitation/create"),
    "sampling": ("summarize", "sampled-by-client", "sampling/createMessage"),
    "roots": ("list_my_roots", "file:///srv/compat", "roots/list"),
}
EVERYTHING_TOOLS = {
    "elicitation-form": ("trigger-elicitation-request", "- Name: Ada", "elicitation/create"),
    "elicitation-url": (
        "trigger-url-elicitation",
        "completed the URL elicitation",
        "elicitation/create",
    ),
    "sampling": ("trigger-sampling-request", "sampled-by-client", "sampling/createMessage"),
    "roots": ("get-roots-list", "file:///srv/compat", "roots/list"),
}
GATEWAY_KEY = re.compile(r"(input|url)-\d+")  # the gateway's inputRequests keys
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

# Every MRTR feature (one `--feature all` client run per pair) through the gateway.
GATEWAY_ALL: list[tuple[str, str]] = [
    ("raw-mrtr", "py1"),  # stdlib modern client -> mcp 1.30.0 FastMCP
    ("py2-mrtr-pinned", "py1"),  # mcp 2.3.0 Client, 2026-07-28 -> mcp 1.30.0
    ("raw-mrtr", "everything"),  # -> TS SDK 1.x server-everything
    ("py2-mrtr-pinned", "everything"),
    ("py1-mrtr", "py2-modern"),  # mcp 1.30.0 ClientSession -> modern-only mcp 2.3.0
]
# The same pairs without the gateway fail as the spec says (one feature is enough).
DIRECT_FAILS: list[tuple[str, str, str]] = [
    ("raw-mrtr", "py1", "-32602"),
    ("py1-mrtr", "py2-modern", "-32022"),
]
CHECKS = ("--check-errors", "--check-binding")


def concurrent_client(calls: int) -> Peer:
    """compat_matrix/peers/concurrent_mrtr_client.py as a run.py client."""
    return Peer(
        name=f"concurrent-mrtr-{calls}",
        role="client",
        era="modern",
        label=f"{calls} concurrent modern MRTR calls over one connection (stdlib asyncio)",
        command=f"python3 {{src}}/concurrent_mrtr_client.py --calls {calls} "
        "--timeout {timeout} -- {server}",
        transports=("stdio",),
        features=(),
    )


def planned(matrix: Matrix) -> dict[str, Run]:
    runs: dict[str, Run] = {}
    for client, server in GATEWAY_ALL:
        for feature in MRTR_FEATURES:
            runs[f"{client}>{server}:{feature}"] = find_run(
                matrix, client, server, "gateway", feature
            )
    for client, server, _ in DIRECT_FAILS:
        runs[f"{client}>{server}:direct"] = find_run(
            matrix, client, server, "direct", "elicitation-form"
        )
    runs["checks"] = find_run(
        matrix, "raw-mrtr", "py1", "gateway", "elicitation-form", options=CHECKS
    )
    for client in ("raw-mrtr", "py2-mrtr-pinned"):
        runs[f"{client}>py1:-32042"] = find_run(
            matrix, client, "py1", "gateway", "elicitation-url", feature_arg=URL_REQUIRED
        )
    runs["concurrent"] = Run(
        matrix.cell("modern-legacy.stdio-stdio.elicitation-form"),
        concurrent_client(CONCURRENT_CALLS),
        matrix.servers["py1"],
        "gateway",
    )
    return runs


@dataclass
class MrtrRuns:
    """All observations of this module, or why there are none."""

    results: dict[str, Observation]
    problem: str | None = None

    def get(self, key: str) -> Observation:
        if self.problem is not None:
            pytest.fail(self.problem, pytrace=False)
        return self.results[key]


@pytest.fixture(scope="module")
def mrtr_runs() -> Iterator[MrtrRuns]:
    missing = missing_peers()
    if missing:
        yield MrtrRuns(
            {},
            f"the real MCP peers are not installed in {peers_dir()} "
            f"(missing: {', '.join(missing)}): {INSTALL_HINT}",
        )
        return
    matrix = load_matrix()
    runs = planned(matrix)
    observations = run_many(list(runs.values()), Context.for_matrix(matrix), jobs=2)
    yield MrtrRuns(dict(zip(runs, observations, strict=True)))


# -- helpers -------------------------------------------------------------------


def explain(obs: Observation) -> str:
    tail = "\n    ".join(obs.stderr_tail[-8:])
    return f"{obs.run.key}: {obs.evidence}\n  report: {obs.report}\n  stderr:\n    {tail}"


def step(obs: Observation, name: str) -> dict[str, Any]:
    assert obs.report is not None, explain(obs)
    for item in obs.steps():
        if item.get("step") == name:
            return dict(item)
    raise AssertionError(f"no step {name!r} in {explain(obs)}")


def works(obs: Observation, era: str) -> None:
    assert obs.ok, explain(obs)
    assert obs.era == era, explain(obs)
    assert judge(obs).matched, judge(obs).reason


def tool_call(obs: Observation, feature: str, tools: dict[str, tuple[str, str, str]]) -> Any:
    """The feature's call step, checked: the answer came back, without isError."""
    tool, expected, _ = tools[feature]
    call = step(obs, f"{feature}: {tool}")
    assert call["ok"], explain(obs)
    assert expected in call["text"], explain(obs)
    assert not call["isError"], explain(obs)
    return call


def round_methods(call: dict[str, Any]) -> list[tuple[str, str]]:
    """(inputRequests key, method) of every input_required round of a raw client call."""
    return [(k, m) for item in call["rounds"] for k, m in item["inputRequests"].items()]


# -- modern clients -> gateway -> legacy servers ---------------------------------------


@pytest.mark.parametrize("feature", MRTR_FEATURES)
def test_raw_modern_client_answers_py1_requests_as_input_required(
    mrtr_runs: MrtrRuns, feature: str
) -> None:
    obs = mrtr_runs.get(f"raw-mrtr>py1:{feature}")
    works(obs, "modern")
    assert MODERN in step(obs, "server/discover")["supportedVersions"]
    call = tool_call(obs, feature, FIXTURE_TOOLS)
    assert call["resultType"] == "complete"
    # py1 pushed one request during the call; the client saw it as one
    # input_required round, under a gateway key, with a sealed requestState.
    rounds = round_methods(call)
    assert [method for _, method in rounds] == [FIXTURE_TOOLS[feature][2]], explain(obs)
    assert all(GATEWAY_KEY.fullmatch(key) for key, _ in rounds), explain(obs)
    assert all(item["requestState"] for item in call["rounds"]), explain(obs)
    # no server->client request leaked onto the modern wire
    assert not any(s["step"].startswith("no server-to-client") for s in obs.steps())


@pytest.mark.parametrize("feature", MRTR_FEATURES)
def test_py2_client_callbacks_answer_py1_requests(mrtr_runs: MrtrRuns, feature: str) -> None:
    obs = mrtr_runs.get(f"py2-mrtr-pinned>py1:{feature}")
    works(obs, "modern")
    connect = step(obs, "connect")
    assert connect["protocolVersion"] == MODERN
    assert connect["via"] == "server/discover"
    call = tool_call(obs, feature, FIXTURE_TOOLS)
    # The SDK ran the MRTR rounds itself: its callback's request id is the
    # gateway's inputRequests key, not a JSON-RPC id of a pushed request.
    methods = [(c["method"], c["request_id"]) for c in call["callbacks"]]
    assert [m for m, _ in methods] == [FIXTURE_TOOLS[feature][2]], explain(obs)
    assert all(GATEWAY_KEY.fullmatch(str(rid)) for _, rid in methods), explain(obs)
    if feature == "elicitation-url":
        # The modern wire has no elicitationId; the gateway removed py1's.
        assert call["callbacks"][0]["mode"] == "url"
        assert call["callbacks"][0]["elicitationId"] is None


@pytest.mark.parametrize("client", ["raw-mrtr", "py2-mrtr-pinned"])
@pytest.mark.parametrize("feature", MRTR_FEATURES)
def test_modern_clients_reach_server_everything_triggers(
    mrtr_runs: MrtrRuns, client: str, feature: str
) -> None:
    obs = mrtr_runs.get(f"{client}>everything:{feature}")
    works(obs, "modern")
    assert step(obs, "tools/list")["server"] == "everything"
    call = tool_call(obs, feature, EVERYTHING_TOOLS)
    method = EVERYTHING_TOOLS[feature][2]
    asked = (
        [m for _, m in round_methods(call)]
        if client == "raw-mrtr"
        else [c["method"] for c in call["callbacks"]]
    )
    if feature == "roots":
        # server-everything also asks for roots on its own 350 ms after
        # `initialized`; whichever call is running then may carry that request,
        # and get-roots-list answers from its cache. The answer must get there.
        assert set(asked) <= {method}, explain(obs)
    else:
        assert asked == [method], explain(obs)


# -- legacy client -> gateway -> modern-only server ------------------------------------


@pytest.mark.parametrize("feature", MRTR_FEATURES)
def test_legacy_client_gets_modern_servers_input_requests_pushed(
    mrtr_runs: MrtrRuns, feature: str
) -> None:
    obs = mrtr_runs.get(f"py1-mrtr>py2-modern:{feature}")
    works(obs, "legacy")
    assert step(obs, "initialize")["protocolVersion"] != MODERN
    assert step(obs, "initialize")["serverInfo"]["name"] == "py2-fixture"
    call = tool_call(obs, feature, FIXTURE_TOOLS)
    # mcp 2.3.0 answered input_required; the gateway pushed each input request
    # to the legacy client as a server request with its own id, then retried.
    pushed = call["callbacks"]
    assert [c["method"] for c in pushed] == [FIXTURE_TOOLS[feature][2]], explain(obs)
    assert all(str(c["request_id"]).startswith("gw-") for c in pushed), explain(obs)
    if feature == "elicitation-url":
        # a 2025-11-25 client expects an elicitationId; the gateway minted one
        assert UUID.fullmatch(pushed[0]["elicitationId"]), explain(obs)


@pytest.mark.parametrize(
    ("client", "server", "code"), DIRECT_FAILS, ids=[f"{c}>{s}" for c, s, _ in DIRECT_FAILS]
)
def test_direct_counterparts_fail(mrtr_runs: MrtrRuns, client: str, server: str, code: str) -> None:
    obs = mrtr_runs.get(f"{client}>{server}:direct")
    assert not obs.ok, f"works without the gateway: {explain(obs)}"
    assert not obs.timed_out, explain(obs)
    assert code in (obs.error or ""), explain(obs)
    assert judge(obs).matched, judge(obs).reason
    assert mrtr_runs.get(f"{client}>{server}:elicitation-form").ok


# -- requestState and -32042 --------------------------------------------------------


def test_bad_request_state_is_refused_and_the_correct_retry_still_works(
    mrtr_runs: MrtrRuns,
) -> None:
    obs = mrtr_runs.get("checks")
    works(obs, "modern")
    for name in (
        "tampered requestState rejected",
        "requestState with other arguments rejected",
        "replayed requestState rejected",
    ):
        checked = step(obs, name)
        assert checked["ok"], explain(obs)
        assert checked["error"]["code"] == -32602, explain(obs)
    assert "verification" in step(obs, "tampered requestState rejected")["error"]["message"]
    # the tampered and rebound retries touched nothing: the real one completes
    call = tool_call(obs, "elicitation-form", FIXTURE_TOOLS)
    assert call["resultType"] == "complete"
    assert len(call["rounds"]) == 1


def test_url_elicitation_required_reaches_raw_client_as_input_required(
    mrtr_runs: MrtrRuns,
) -> None:
    obs = mrtr_runs.get("raw-mrtr>py1:-32042")
    works(obs, "modern")
    call = step(obs, f"{URL_REQUIRED}: authorize")
    assert call["ok"], explain(obs)
    assert call["resultType"] == "complete"
    assert call["text"] == "Authorized after URL elicitation"
    # py1 failed the first call with -32042; the client got input_required with
    # a URL elicitation (gateway key url-N) instead, and the retry re-ran the call.
    rounds = round_methods(call)
    assert len(rounds) == 1, explain(obs)
    key, method = rounds[0]
    assert method == "elicitation/create"
    assert re.fullmatch(r"url-\d+", key), explain(obs)


def test_url_elicitation_required_reaches_py2_client_as_url_elicitation(
    mrtr_runs: MrtrRuns,
) -> None:
    obs = mrtr_runs.get("py2-mrtr-pinned>py1:-32042")
    works(obs, "modern")
    call = step(obs, f"{URL_REQUIRED}: authorize")
    assert call["ok"], explain(obs)
    assert call["text"] == "Authorized after URL elicitation"
    # no -32042 on the modern wire: the SDK's elicitation callback got the link
    (seen,) = call["callbacks"]
    assert seen["method"] == "elicitation/create", explain(obs)
    assert seen["mode"] == "url"
    assert seen["url"] == "https://example.com/compat/authorize"


# -- concurrency --------------------------------------------------------------------


def test_32_concurrent_mrtr_calls_through_one_gateway_each_get_their_own_answer(
    mrtr_runs: MrtrRuns,
) -> None:
    obs = mrtr_runs.get("concurrent")
    assert obs.ok, explain(obs)
    assert not obs.timed_out
    sent = step(obs, f"{CONCURRENT_CALLS} tools/call ask_name written before any answer was read")
    assert sent["ok"]
    result = step(obs, "every call got its own name back")
    assert result["ok"], explain(obs)
    assert result["completed"] == CONCURRENT_CALLS
    assert result["failed"] == 0
    assert sorted(result["completion_order"]) == list(range(1, CONCURRENT_CALLS + 1))
    # every call needed exactly one round of input (py1's ask_name elicits once)
    assert result["rounds"] == {"1": CONCURRENT_CALLS}, explain(obs)


def test_mrtr_matrix_cells_are_ready() -> None:
    matrix = load_matrix()
    for feature in MRTR_FEATURES:
        cells = [c for c in matrix.cells if c.feature == feature]
        ready = {(c.client_era, c.server_era, c.front, c.back) for c in cells if c.ready}
        # client eras x server kinds (dual-push: #10) x stdio|http routes, and the
        # legacy client's sse front (#15) x server kinds x back
        assert len(ready) == 12 * 4 + 4 * 2, feature
        for cell in cells:
            if cell.ready:
                assert all(matrix.clients[n].takes_feature for n in cell.clients)
                if cell.server_era == "dual-push":  # the one push-style server
                    assert cell.servers == ("py2-push",), cell.id
                    continue
                # stdio cells run both servers of the era; an HTTP cell may leave
                # one out, and its note says why.
                assert (
                    len(cell.servers) == 2
                    if (cell.front, cell.back) == ("stdio", "stdio")
                    else cell.servers and (len(cell.servers) == 2 or cell.note)
                ), cell.id
