"""Misconfiguration ends in one line and exit 2, never a traceback (issue:
"Misconfiguration ends in a Python traceback instead of a one-line error and
exit 2: `log_level = "verbose"` or `"WARNING"` in TOML, a too-short
`MCP_ERA_GATEWAY_STATE_KEY`, a port already in use (...), `--listen
http://127.0.0.1:8080`").

Each case runs `python -m gateway` as the operator would; none gets as far
as serving (they fail before any upstream starts), so each is quick."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway import config as config_mod
from tests.refused_start import assert_refused

NOTES = [sys.executable, "-m", "gateway.examples.notes_server"]

# One modern request, as a stdio client writes it.
MODERN_TOOLS_LIST = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
)


def run(
    tmp_path: Path,
    *args: str,
    toml: str | None = None,
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "gateway"]
    if toml is not None:
        path = tmp_path / "gw.toml"
        path.write_text(toml)
        argv += ["--config", str(path)]
    argv += [*args, "--", *(command or NOTES)]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MCP_ERA_GATEWAY_")}
    return subprocess.run(
        argv,
        check=False,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        env={**environ, **(env or {})},
        cwd=Path(__file__).parent.parent,
    )


@pytest.mark.parametrize(
    ("toml", "words"),
    [
        ('[gateway]\nlog_level = "verbose"\n', ["log_level", "verbose"]),
        ('[gateway]\nlog_format = "xml"\n', ["log_format"]),
        ('[upstream]\nera = "future"\n', ["upstream_era", "future"]),
        ("[upstream]\nrequest_timeout = -1\n", ["[upstream] request_timeout"]),
        ("[upstream]\nrequest_timeout = nan\n", ["[upstream] request_timeout"]),
        ("[upstream]\nprobe_timeout = inf\n", ["[upstream] probe_timeout"]),
        ("[http]\nsession_idle = 0\n", ["[http] session_idle"]),
        ("[http]\nmax_concurrent = 0\n", ["[http] max_concurrent"]),
        ("[http]\nsse_poll_after = -1\n", ["[http] sse_poll_after"]),
        ("[http]\nsse_retry = nan\n", ["[http] sse_retry"]),
        ("[http]\nsse_resume_window = 0\n", ["[http] sse_resume_window"]),
        ("[gateway]\nmax_inflight_per_client = -5\n", ["[gateway] max_inflight_per_client"]),
        ("[mrtr]\ninput_batch_window = -1\n", ["input_batch_window"]),
        ('[gateway]\nmax_message_bytes = "big"\n', ["[gateway] max_message_bytes"]),
        ("[upstream]\nenv = { API_KEY = 1 }\n", ["[upstream] env", "API_KEY"]),
        ('[upstream]\nheaders = { "Bad Name" = "x" }\n', ["[upstream] headers"]),
        ('[http]\ntokens = { alice = "" }\n', ["[http] tokens", "alice"]),
        ('[http]\ntokens = { a = "same-token", b = "same-token" }\n', ["[http] tokens"]),
        ('[http]\nallowed_hosts = ["localhost:80@evil.com"]\n', ["allowed_hosts"]),
        ('[http]\nallowed_origins = ["app.example"]\n', ["allowed_origins"]),
        ('[upstream]\nredirect_origins = ["mcp.example"]\n', ["[upstream] redirect_origins"]),
        ('[upstream]\nredirect_origins = ["https://x/mcp"]\n', ["redirect_origins", "host[:port]"]),
        ('[upstream]\nredirect_origins = ["https://x:99999"]\n', ["redirect_origins", "port"]),
        ('[upstream]\nredirect_origins = "https://x"\n', ["redirect_origins", "list of strings"]),
        ('[mrtr]\nstatic_roots = [{ name = "no uri" }]\n', ["[mrtr] static_roots", "uri"]),
        ('[upstream]\nroots = ["srv/data"]\n', ["[upstream] roots", "absolute"]),
        ('[upstream]\nroots = [{ uri = "https://x/y" }]\n', ["[upstream] roots", "file://"]),
        ('[upstream]\nroots = "/srv/data"\n', ["[upstream] roots", "list"]),
        ("[upstream]\nroots = [1]\n", ["[upstream] roots", "path or a table"]),
        ('[upstream]\nroots = [{ uri = "file:///a", nmae = "a" }]\n', ["unknown keys", "nmae"]),
        ('[upstream]\nroots = [{ uri = "file:///a", name = 1 }]\n', ["[upstream] roots", "name"]),
        (
            '[upstream]\nroots = ["/a"]\n[mrtr]\nstatic_roots = ["/b"]\n',
            ["[upstream] roots", "[mrtr] static_roots", "one setting"],
        ),
        ('[mrtr]\nstate_key = "short"\n', ["state_key"]),
        ('[mrtr]\nstate_key = ["%s", "short"]\n' % ("k" * 32), ["state_key", "key 2 of 2"]),
        ("[mrtr]\nstate_key = []\n", ["state_key", "non-empty list"]),
        ("[mrtr]\nstate_key = [1]\n", ["[mrtr] state_key", "list of strings"]),
        ('[upstream]\ncwd = "/does/not/exist"\n', ["cwd", "/does/not/exist"]),
        ("[cache]\nttl_ms = { 'tools/list' = -1 }\n", ["ttl_ms"]),
        ('[gateway]\nlisten = "https://127.0.0.1:8080"\n', ["listen", "TLS"]),
        ('[gateway]\nlisten = "127.0.0.1"\n', ["listen", "port"]),
        ("[nope]\nx = 1\n", ["unknown config key"]),
        ("not toml at all [\n", ["cannot read config"]),
    ],
)
def test_bad_config_values_are_one_line_and_exit_2(
    tmp_path: Path, toml: str, words: list[str]
) -> None:
    assert_refused(run(tmp_path, toml=toml), *words)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--listen", "127.0.0.1:99999"], ["listen", "65535"]),
        (["--listen", "localhost:80@evil.com"], ["listen"]),
        (["--listen", "http://127.0.0.1:8080/other"], ["listen", "/mcp"]),
        (["--max-sessions", "0"], ["max_sessions"]),
        (["--max-processes", "0"], ["max_processes"]),
        (["--startup-timeout", "inf"], ["startup_timeout"]),
        (["--request-timeout", "nan"], ["request_timeout"]),
        (["--log-level", "verbose"], ["--log-level", "verbose"]),
        (["--bogus"], ["--bogus"]),
        (["--upstream-era", "future"], ["--upstream-era"]),
        (["--root", "relative/dir"], ["--root", "absolute"]),
        (["--root", "http://x/"], ["--root", "absolute"]),
        (["--upstream", "ftp://127.0.0.1/mcp"], ["upstream url"]),
        (["--upstream", "http://"], ["upstream url"]),
        (["--upstream", "http://localhost:99999/mcp"], ["upstream url", "65535"]),
        (["--upstream", "http://user:pw@localhost:9000/mcp"], ["upstream url", "headers"]),
    ],
)
def test_bad_options_are_one_line_and_exit_2(
    tmp_path: Path, args: list[str], words: list[str]
) -> None:
    assert_refused(run(tmp_path, *args), *words)


@pytest.mark.parametrize("what", ["missing", "directory", "not utf-8"])
def test_a_config_file_that_cannot_be_read_is_refused(tmp_path: Path, what: str) -> None:
    path = tmp_path / "gw.toml"
    if what == "directory":
        path.mkdir()
    elif what == "not utf-8":
        path.write_bytes(b'[gateway]\nlog_level = "\xff"\n')
    assert_refused(run(tmp_path, "--config", str(path)), "cannot read config")


def test_a_short_state_key_in_the_environment_is_refused(tmp_path: Path) -> None:
    """Issue: "a too-short MCP_ERA_GATEWAY_STATE_KEY" ended in a traceback."""
    result = run(tmp_path, env={"MCP_ERA_GATEWAY_STATE_KEY": "short"})
    assert_refused(result, "MCP_ERA_GATEWAY_STATE_KEY", "16 bytes")


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"MCP_ERA_GATEWAY_HTTP_MAX_SESION": "5"}, ["MCP_ERA_GATEWAY_HTTP_MAX_SESION", "unknown"]),
        ({"MCP_ERA_GATEWAY_UPSTREAM_REQUEST_TIMEOUT": "-1"}, ["request_timeout", "given by"]),
        (
            {"MCP_ERA_GATEWAY_UPSTREAM_CWD": "/does/not/exist"},
            ["cwd", "MCP_ERA_GATEWAY_UPSTREAM_CWD"],
        ),
    ],
)
def test_a_bad_environment_variable_is_one_line_and_exit_2(
    tmp_path: Path, env: dict[str, str], words: list[str]
) -> None:
    """Issue #13: every setting from the environment; a bad or misspelt
    variable is refused as a bad key in the file is, and named."""
    assert_refused(run(tmp_path, env=env), *words)


def test_the_log_format_from_the_environment_makes_the_one_line_json(tmp_path: Path) -> None:
    env = {"MCP_ERA_GATEWAY_GATEWAY_LOG_FORMAT": "json", "MCP_ERA_GATEWAY_HTTP_MAX_SESSIONS": "0"}
    event = json.loads(assert_refused(run(tmp_path, env=env)))
    assert "MCP_ERA_GATEWAY_HTTP_MAX_SESSIONS" in event["error"]


@pytest.mark.parametrize(
    "command", [["no-such-program-here"], ["./no/such/program"], ["/dev/null"]]
)
def test_an_upstream_command_that_is_not_there_is_refused(
    tmp_path: Path, command: list[str]
) -> None:
    """Issue scope: "a command that does not exist — one line, exit 2"."""
    assert_refused(run(tmp_path, command=command), "upstream command", command[0])


def test_json_log_format_makes_the_one_line_json(tmp_path: Path) -> None:
    """Under --log-format json the refusal is one JSON object like every log line."""
    result = run(tmp_path, "--log-format", "json", toml='[gateway]\nlog_level = "verbose"\n')
    line = assert_refused(result)
    event = json.loads(line)
    assert event["level"] == "error" and "log_level" in event["error"]


def test_a_json_log_format_in_the_config_file_makes_the_one_line_json(tmp_path: Path) -> None:
    toml = '[gateway]\nlog_format = "json"\n[upstream]\nrequest_timeout = -1\n'
    event = json.loads(assert_refused(run(tmp_path, toml=toml)))
    assert "[upstream] request_timeout" in event["error"]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize("log_format", ["console", "json"])
def test_a_port_in_use_is_one_line_and_exit_2(
    tmp_path: Path, busy_port: int, log_format: str
) -> None:
    """Issue: "a port already in use (it logs "listening" before it binds, then
    a 54-line ExceptionGroup, mostly not JSON under --log-format json)". The
    gateway binds first; a failure is one line (JSON under json) and exit 2."""
    result = run(tmp_path, "--listen", f"127.0.0.1:{busy_port}", "--log-format", log_format)
    line = assert_refused(result, "cannot listen")
    assert "listening" not in result.stderr
    if log_format == "json":
        assert json.loads(line)["address"] == f"127.0.0.1:{busy_port}"


# -- what is accepted ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("stdio", "stdio"),
        ("127.0.0.1:8080", "127.0.0.1:8080"),
        ("http://127.0.0.1:8080", "127.0.0.1:8080"),
        ("http://localhost:8080/mcp", "localhost:8080"),
        ("HTTP://[::1]:8080/", "[::1]:8080"),
        ("[0:0::1]:9000", "[::1]:9000"),
    ],
)
def test_listen_takes_host_port_or_the_endpoint_url(given: str, canonical: str) -> None:
    """Issue: "`--listen http://127.0.0.1:8080`": the URL form is accepted."""
    assert config_mod.Config().with_overrides(listen=given).listen == canonical


def test_state_key_takes_one_key_or_a_list(tmp_path: Path) -> None:
    """Issue #13: "several keys, the first seals and all open": `[mrtr]
    state_key` is one string or a list of strings, the sealing key first."""
    path = tmp_path / "gw.toml"
    path.write_text(f'[mrtr]\nstate_key = ["{"n" * 16}", "{"o" * 16}"]\n')
    assert config_mod.load(path).state_keys() == ("n" * 16, "o" * 16)
    path.write_text(f'[mrtr]\nstate_key = "{"n" * 16}"\n')
    assert config_mod.load(path).state_keys() == ("n" * 16,)
    assert config_mod.Config().state_keys() == ()


def test_log_level_is_case_insensitive(tmp_path: Path) -> None:
    """Issue: `log_level = "WARNING"` in TOML: accepted, as warning."""
    path = tmp_path / "gw.toml"
    path.write_text('[gateway]\nlog_level = "WARNING"\nlog_format = "JSON"\n')
    loaded = config_mod.load(path)
    assert (loaded.log_level, loaded.log_format) == ("warning", "json")


def test_an_upper_case_log_level_in_toml_runs(tmp_path: Path) -> None:
    """The same through the command: the gateway serves, and warnings show."""
    path = tmp_path / "gw.toml"
    path.write_text('[gateway]\nlog_level = "WARNING"\n')
    line = MODERN_TOOLS_LIST
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "--config", str(path), "--", *NOTES],
        check=False,
        input=line + "\n",
        capture_output=True,
        text=True,
        timeout=30,
        cwd=Path(__file__).parent.parent,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert json.loads(result.stdout.splitlines()[0])["result"]["tools"]


def test_the_upstream_command_from_the_environment_serves() -> None:
    """Issue #13: "Every config key also from the environment (...), the
    form containers use": a container gives its upstream and settings so,
    with no file and no options."""
    line = MODERN_TOOLS_LIST
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MCP_ERA_GATEWAY_")}
    environ["MCP_ERA_GATEWAY_UPSTREAM_COMMAND"] = json.dumps(NOTES)
    environ["MCP_ERA_GATEWAY_GATEWAY_LOG_LEVEL"] = "WARNING"
    result = subprocess.run(
        [sys.executable, "-m", "gateway"],
        check=False,
        input=line + "\n",
        capture_output=True,
        text=True,
        timeout=30,
        env=environ,
        cwd=Path(__file__).parent.parent,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[0])["result"]["tools"]


def test_a_url_listen_serves(tmp_path: Path) -> None:
    """`--listen http://HOST:PORT` serves at http://HOST:PORT/mcp, and
    "listening" is logged once the port is bound."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    argv = [
        sys.executable,
        "-m",
        "gateway",
        "--listen",
        f"http://127.0.0.1:{port}",
        "--log-format",
        "json",
        "--",
        *NOTES,
    ]
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    # The bound on the whole test: a gateway that never says "listening" is
    # killed, which ends its stderr and the loop below.
    watchdog = threading.Timer(20, process.kill)
    watchdog.start()
    try:
        assert process.stderr is not None
        for line in process.stderr:  # ends at "listening" (or at exit, failing)
            if json.loads(line)["event"] == "listening":
                break
        reply = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
        assert reply.json() == {"status": "alive"}
    finally:
        watchdog.cancel()
        process.terminate()
        process.wait(timeout=15)
        if process.stderr is not None:
            process.stderr.close()


async def test_the_bound_socket_serves_without_delayed_acks() -> None:
    """Binding before start-up must not cost latency: asyncio sets TCP_NODELAY
    on an accepted connection only when the listening socket says it is TCP
    (without it each small answer waited ~40 ms, found by the HTTP bench)."""
    import asyncio

    from gateway.runtime.http_app import _bind

    accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    (sock,) = _bind("127.0.0.1", 0)
    server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
    async with server:
        port = sock.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(accepted, 5) != 0
        writer.close()
