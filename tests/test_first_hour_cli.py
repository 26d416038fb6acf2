"""Issue #14 ("A new user's first hour"), the command line: each sub-command
has its own help, `probe URL` is accepted, a missing `--` says what to do,
and `example-server` runs the bundled server for the desktop snippet. Each
test runs `python -m gateway` as a user would."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.http_gateway_process import free_port
from tests.push_peers import legacy_client
from tests.refused_start import assert_refused

ROOT = Path(__file__).parent.parent
GATEWAY = [sys.executable, "-m", "gateway"]


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MCP_ERA_GATEWAY_")}
    return subprocess.run(
        [*GATEWAY, *args],
        check=False,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        env=environ,
        cwd=ROOT,
    )


@pytest.mark.parametrize(
    ("sub", "usage", "words"),
    [
        ("probe", "mcp-era-gateway probe [options] (URL | -- COMMAND", "Classify"),
        ("demo", "mcp-era-gateway demo [options] [-- COMMAND", "step by step"),
        ("example-server", "mcp-era-gateway example-server", "bundled legacy notes server"),
    ],
)
def test_each_sub_command_prints_its_own_help(sub: str, usage: str, words: str) -> None:
    """Issue #14: "`probe --help` and `demo --help` print the general help"."""
    result = run(sub, "--help")
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"usage: {usage}")
    assert words in result.stdout
    assert "Let every generation" not in result.stdout  # (the general description)


def test_probe_takes_the_upstream_url_without_the_option() -> None:
    """Issue #14: "`probe https://host/mcp` (a URL without `--upstream`) is
    refused; accept it." Nothing listens there: the probe itself reports
    that (exit 1, a JSON report), rather than the command line refusing."""
    port = free_port()
    result = run(
        "probe", f"http://127.0.0.1:{port}/mcp", "--log-level", "critical", "--startup-timeout", "5"
    )
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["era"] is None
    # Where it went and why, not "initialize failed" (the era probe's fallback
    # to the legacy handshake, which an unreachable server tells nothing).
    assert report["error"] == (
        f"Upstream HTTP exchange failed: cannot connect to 127.0.0.1:{port}: Connection refused"
    )
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["python", "server.py"], "mcp-era-gateway [options] -- python server.py"),
        (
            ["--log-level", "debug", "python", "-u", "server.py"],
            "mcp-era-gateway [options] -- python -u server.py",
        ),
        (["probe", "python", "server.py"], "mcp-era-gateway probe [options] -- python server.py"),
        (["demo", "node", "s.js"], "mcp-era-gateway demo [options] -- node s.js"),
    ],
)
def test_a_missing_double_dash_says_where_it_goes(args: list[str], hint: str) -> None:
    """Issue #14: "A missing `--` before the server command gives
    'unrecognized arguments' with no hint": one line, exit 2, and the hint."""
    line = assert_refused(run(*args), "unrecognized arguments", "put -- before the server command")
    assert line.endswith(hint), line


def test_a_missing_double_dash_is_one_json_line_under_json_logs() -> None:
    """Issue #14, the same refusal as one JSON event under --log-format json
    (like every other configuration error, cli._refuse)."""
    line = assert_refused(run("--log-format", "json", "python", "server.py"))
    event = json.loads(line)
    assert event["event"] == "invalid configuration"
    assert "put -- before the server command" in event["error"]


def test_example_server_speaks_only_mcp_on_stdout() -> None:
    """Issue #14: "an `mcp-era-gateway example-server` entry point": its
    stdout is its MCP channel, so it carries nothing but the answers."""
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    result = run("example-server", stdin=json.dumps(init) + "\n")
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.splitlines()
    assert json.loads(line)["result"]["serverInfo"]["name"] == "notes-example"


@pytest.mark.peers
def test_the_desktop_snippet_with_example_server_serves_a_real_sdk_client() -> None:
    """Issue #14: "The desktop snippet runs `python -m gateway.examples.notes_server`,
    which works only when `python` on the client's PATH is the gateway's
    venv": `{"command": "mcp-era-gateway", "args": ["--", "mcp-era-gateway",
    "example-server"]}`, driven by mcp 1.30's ClientSession over stdio."""
    out = legacy_client(
        [*GATEWAY, "--log-level", "warning", "--", *GATEWAY, "example-server"],
        tool="search_notes",
        arguments='{"query": "gateway"}',
    )
    assert out["isError"] is False
    assert any("mcp-era-gateway lets modern clients" in text for text in out["text"])


def _demo(*args: str, columns: int) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MCP_ERA_GATEWAY_")}
    result = subprocess.run(
        [*GATEWAY, "demo", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**environ, "NO_COLOR": "1", "COLUMNS": str(columns)},
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _quotes(line: str) -> int:
    return len(re.findall(r'(?<!\\)"', line))


def test_the_demo_fits_the_terminal_and_never_cuts_a_token() -> None:
    """Issue #14: "The demo hard-wraps JSON at 100 columns mid-word; fit the
    terminal width." A message that does not fit on one line is indented
    JSON: every line holds whole tokens (its quotes pair up), and only a
    line of one long member may pass the width."""
    out = _demo(columns=60)
    messages = [line for line in out.splitlines() if line.startswith("  ")]
    assert len(messages) > 20
    for line in messages:
        assert _quotes(line) % 2 == 0, line
        if len(line) > 60:
            assert line.lstrip().startswith('"'), line  # one member, not a cut
    assert '"resultType": "complete"' in out


@pytest.mark.peers
def test_demo_in_front_of_another_server_scripts_itself_from_its_tools() -> None:
    """Issue #14: "`demo -- OTHER_SERVER` is accepted and still runs the notes
    script against it ('Unknown tool: search_notes')". In front of mcp 1.30's
    FastMCP fixture it calls that server's first tool (echo), its required
    argument made from the input schema."""
    server = [str(ROOT / ".peers/py1/bin/python"), str(ROOT / "compat_matrix/peers/py1_server.py")]
    out = _demo("--", *server, columns=1000)
    assert "Unknown tool" not in out and "search_notes" not in out
    assert '"name":"echo","arguments":{"text":"example"}' in out
    assert '"isError":false' in out
