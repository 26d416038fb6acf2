"""Every setting from the environment (issue #13: "Every config key also from
the environment (`MCP_ERA_GATEWAY_<SECTION>_<KEY>`, the form containers use);
CLI wins over environment over file"). The reading is a function of a
mapping, so these tests pass a dict and never touch os.environ."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway import cli
from gateway.config import Config, ConfigError
from gateway.config.environment import ALIASES, PREFIX, VARIABLES, from_environ, variable
from gateway.config.keys import KEYS

DEFAULTS = Config()
TYPES = {f.name: str(f.type) for f in fields(Config)}
# Settings whose default is no value the environment could give.
SAMPLES: dict[str, Any] = {
    "command": ("python", "server.py"),
    "upstream_url": "http://127.0.0.1:9000/mcp",
    "cwd": "/srv",
    "instance_id": "gw-1",
    "state_key": "k" * 32,
}


def as_text(value: Any) -> str:
    """A value in the environment's form: scalars as text, the rest as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    if isinstance(value, frozenset):
        value = sorted(value)
    return orjson.dumps(value).decode()


def value_of(env: dict[str, str], name: str) -> Any:
    return from_environ(env)[name][0]


def test_every_key_has_one_variable_and_the_names_are_unique() -> None:
    """Issue #13: one variable per `[section] key` of keys.py, derived from
    KEYS so that a key added later has its variable for free."""
    derived = [variable(table, key) for table, key in KEYS]
    assert len(set(derived)) == len(derived)
    assert set(VARIABLES) == set(derived) | set(ALIASES)
    assert variable("http", "max_sessions") == "MCP_ERA_GATEWAY_HTTP_MAX_SESSIONS"
    assert variable("gateway", "listen") == "MCP_ERA_GATEWAY_GATEWAY_LISTEN"
    assert all(name.startswith(PREFIX) and name == name.upper() for name in VARIABLES)


@pytest.mark.parametrize(("spelled", "name"), list(KEYS.items()), ids=[variable(*k) for k in KEYS])
def test_every_key_reads_back_from_its_variable(spelled: tuple[str, str], name: str) -> None:
    """Whatever its type, each setting's value written in the environment's
    form (scalars as text, lists and tables as JSON) reads back as the value."""
    expected = SAMPLES.get(name, getattr(DEFAULTS, name))
    if expected is None:  # an optional setting added later: any value of its type
        expected = {"str": "x", "int": 3, "float": 1.5}[TYPES[name].removesuffix(" | None")]
    assert value_of({variable(*spelled): as_text(expected)}, name) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("yes", True),
        ("false", False),
        ("0", False),
        ("No", False),
    ],
)
def test_booleans(text: str, expected: bool) -> None:
    assert (
        value_of({"MCP_ERA_GATEWAY_HTTP_FORWARD_AUTHORIZATION": text}, "http_forward_authorization")
        is expected
    )


def test_numbers_strings_lists_and_tables() -> None:
    env = {
        "MCP_ERA_GATEWAY_HTTP_MAX_SESSIONS": "50",
        "MCP_ERA_GATEWAY_UPSTREAM_REQUEST_TIMEOUT": "30",
        "MCP_ERA_GATEWAY_GATEWAY_LISTEN": "0.0.0.0:8080",
        "MCP_ERA_GATEWAY_UPSTREAM_COMMAND": '["python","server.py"]',
        "MCP_ERA_GATEWAY_HTTP_TOKENS": '{"alice":"a-token"}',
        "MCP_ERA_GATEWAY_UPSTREAM_ROOTS": '["/srv/data"]',
    }
    given = {name: value for name, (value, _) in from_environ(env).items()}
    assert given == {
        "http_max_sessions": 50,
        "request_timeout": 30.0,
        "listen": "0.0.0.0:8080",
        "command": ("python", "server.py"),
        "http_tokens": {"alice": "a-token"},
        "static_roots": ({"uri": "file:///srv/data", "name": "data"},),
    }
    assert isinstance(given["request_timeout"], float)


def test_the_state_key_is_one_key_or_a_json_list() -> None:
    """Issue #13: "`[mrtr] state_key` accepts one string or a list of strings
    (env: a JSON list, or a single string)"."""
    one = "x" * 32
    assert value_of({"MCP_ERA_GATEWAY_MRTR_STATE_KEY": one}, "state_key") == one
    listed = orjson.dumps(["n" * 16, "o" * 16]).decode()
    assert value_of({"MCP_ERA_GATEWAY_MRTR_STATE_KEY": listed}, "state_key") == ("n" * 16, "o" * 16)


@pytest.mark.parametrize(
    ("env", "words"),
    [
        (
            {"MCP_ERA_GATEWAY_HTTP_MAX_SESSIONS": "many"},
            ["MCP_ERA_GATEWAY_HTTP_MAX_SESSIONS", "integer"],
        ),
        (
            {"MCP_ERA_GATEWAY_HTTP_MAX_SESSIONS": "1.5"},
            ["MCP_ERA_GATEWAY_HTTP_MAX_SESSIONS", "integer"],
        ),
        (
            {"MCP_ERA_GATEWAY_UPSTREAM_REQUEST_TIMEOUT": "soon"},
            ["MCP_ERA_GATEWAY_UPSTREAM_REQUEST_TIMEOUT", "number"],
        ),
        (
            {"MCP_ERA_GATEWAY_HTTP_FORWARD_AUTHORIZATION": "on"},
            ["MCP_ERA_GATEWAY_HTTP_FORWARD_AUTHORIZATION", "true or false"],
        ),
        (
            {"MCP_ERA_GATEWAY_UPSTREAM_COMMAND": "python server.py"},
            ["MCP_ERA_GATEWAY_UPSTREAM_COMMAND", "JSON"],
        ),
        ({"MCP_ERA_GATEWAY_UPSTREAM_COMMAND": "[]"}, ["MCP_ERA_GATEWAY_UPSTREAM_COMMAND", "empty"]),
        (
            {"MCP_ERA_GATEWAY_UPSTREAM_COMMAND": '"python"'},
            ["MCP_ERA_GATEWAY_UPSTREAM_COMMAND", "list of strings"],
        ),
        ({"MCP_ERA_GATEWAY_HTTP_TOKENS": '["a"]'}, ["MCP_ERA_GATEWAY_HTTP_TOKENS", "table"]),
        (
            {"MCP_ERA_GATEWAY_UPSTREAM_ENV": '{"API_KEY": 1}'},
            ["MCP_ERA_GATEWAY_UPSTREAM_ENV", "API_KEY"],
        ),
        (
            {"MCP_ERA_GATEWAY_UPSTREAM_ROOTS": '["rel/dir"]'},
            ["MCP_ERA_GATEWAY_UPSTREAM_ROOTS", "absolute"],
        ),
        (
            {"MCP_ERA_GATEWAY_MRTR_STATE_KEY": "[1, 2]"},
            ["MCP_ERA_GATEWAY_MRTR_STATE_KEY", "list of strings"],
        ),
    ],
)
def test_a_bad_value_names_its_variable(env: dict[str, str], words: list[str]) -> None:
    """Issue #13 (brief): values are parsed by the setting's type with the
    same checks and error style as the file; "an error names the variable"."""
    with pytest.raises(ConfigError) as refused:
        from_environ(env)
    for word in words:
        assert word in str(refused.value)


def test_a_misspelt_variable_is_refused_and_named() -> None:
    """Issue #13 (brief): "an unknown MCP_ERA_GATEWAY_* variable is refused
    with a clear error that names it (a typo must not pass silently)"."""
    with pytest.raises(ConfigError, match="MCP_ERA_GATEWAY_HTTP_MAX_SESSION:") as refused:
        from_environ({"MCP_ERA_GATEWAY_HTTP_MAX_SESSION": "5"})
    assert "did you mean MCP_ERA_GATEWAY_HTTP_MAX_SESSIONS" in str(refused.value)
    # Other variables are none of the gateway's business.
    assert from_environ({"PATH": "/bin", "MCP_ERA_GATEWAYX": "1"}) == {}


def test_the_old_state_key_variable_is_an_alias_and_not_both() -> None:
    """MCP_ERA_GATEWAY_STATE_KEY (the one variable before issue #13) still
    works; with MCP_ERA_GATEWAY_MRTR_STATE_KEY as well it is refused, as two
    spellings of one key in the file are."""
    key = "s" * 32
    assert value_of({"MCP_ERA_GATEWAY_STATE_KEY": key}, "state_key") == key
    with pytest.raises(ConfigError, match="one setting"):
        from_environ({"MCP_ERA_GATEWAY_STATE_KEY": key, "MCP_ERA_GATEWAY_MRTR_STATE_KEY": key})


def test_the_two_names_of_the_roots_are_one_setting() -> None:
    with pytest.raises(
        ConfigError, match="MCP_ERA_GATEWAY_MRTR_STATIC_ROOTS and MCP_ERA_GATEWAY_UPSTREAM_ROOTS"
    ):
        from_environ(
            {
                "MCP_ERA_GATEWAY_UPSTREAM_ROOTS": '["/a"]',
                "MCP_ERA_GATEWAY_MRTR_STATIC_ROOTS": '["/b"]',
            }
        )


@pytest.mark.parametrize(
    "env",
    [
        {"MCP_ERA_GATEWAY_MRTR_STATE_KEY": "short-secret"},
        {"MCP_ERA_GATEWAY_MRTR_STATE_KEY": '["a-long-enough-secret-key", "short-secret"]'},
        {"MCP_ERA_GATEWAY_HTTP_TOKENS": '{"alice": "short-secret"'},
    ],
)
def test_a_secret_is_never_echoed(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as refused:
        build(env=env)
    assert "secret" not in str(refused.value)
    assert next(iter(env)) in str(refused.value)


# -- precedence: the command line over the environment over the file ----------------


def build(*args: str, env: dict[str, str] | None = None, toml: Path | None = None) -> Config:
    argv = [*args, *(["--config", str(toml)] if toml else [])]
    return cli._build_config(cli._parser("test").parse_args(argv), ["true"], env or {})


def test_the_command_line_wins_over_the_environment_over_the_file(tmp_path: Path) -> None:
    """Issue #13: "CLI wins over environment over file", one setting at a time."""
    toml = tmp_path / "gw.toml"
    toml.write_text("[upstream]\nmax_sessions = 2\nmax_processes = 5\nrequest_timeout = 7\n")
    env = {
        "MCP_ERA_GATEWAY_UPSTREAM_MAX_SESSIONS": "3",
        "MCP_ERA_GATEWAY_UPSTREAM_MAX_PROCESSES": "6",
    }
    assert build(toml=toml).max_sessions == 2
    from_env = build(toml=toml, env=env)
    assert (from_env.max_sessions, from_env.max_processes, from_env.request_timeout) == (3, 6, 7.0)
    from_cli = build("--max-sessions", "4", toml=toml, env=env)
    assert (from_cli.max_sessions, from_cli.max_processes) == (4, 6)


def test_the_state_key_alias_wins_over_the_file_as_any_variable(tmp_path: Path) -> None:
    toml = tmp_path / "gw.toml"
    toml.write_text(f'[mrtr]\nstate_key = "{"f" * 16}"\n')
    assert build(toml=toml, env={"MCP_ERA_GATEWAY_STATE_KEY": "e" * 16}).state_key == "e" * 16


@pytest.mark.parametrize(
    ("env", "words"),
    [
        (
            {"MCP_ERA_GATEWAY_UPSTREAM_REQUEST_TIMEOUT": "nan"},
            ["[upstream] request_timeout", "(given by MCP_ERA_GATEWAY_UPSTREAM_REQUEST_TIMEOUT)"],
        ),
        (
            {"MCP_ERA_GATEWAY_HTTP_MAX_SESSIONS": "0"},
            ["[http] max_sessions", "MCP_ERA_GATEWAY_HTTP_MAX_SESSIONS"],
        ),
        (
            {"MCP_ERA_GATEWAY_GATEWAY_LISTEN": "nowhere"},
            ["listen", "MCP_ERA_GATEWAY_GATEWAY_LISTEN"],
        ),
        ({"MCP_ERA_GATEWAY_STATE_KEY": "short"}, ["16 bytes", "MCP_ERA_GATEWAY_STATE_KEY"]),
    ],
)
def test_a_value_the_checks_refuse_names_its_variable(
    env: dict[str, str], words: list[str]
) -> None:
    """A value of the right type can still be out of range; the check's
    message names the file's key, and the variable that gave it is added."""
    with pytest.raises(ConfigError) as refused:
        build(env=env)
    for word in words:
        assert word in str(refused.value)


def test_the_file_is_checked_with_the_command_line_not_alone(tmp_path: Path) -> None:
    """Defect found on the way (main refuses it): `forward_authorization =
    true` in the file with `--listen` and `--upstream` on the command line
    was refused ("needs an HTTP front ... and an HTTP upstream"), because the
    file was checked on its own before the options applied. The settings are
    now checked once, merged."""
    toml = tmp_path / "gw.toml"
    toml.write_text("[http]\nforward_authorization = true\n")
    argv = [
        "--config",
        str(toml),
        "--listen",
        "127.0.0.1:8080",
        "--upstream",
        "http://127.0.0.1:9/mcp",
    ]
    cfg = cli._build_config(cli._parser("test").parse_args(argv), [], {})
    assert cfg.http_forward_authorization and cfg.upstream_url == "http://127.0.0.1:9/mcp"
