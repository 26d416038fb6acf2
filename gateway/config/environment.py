"""Every setting from the environment, the form containers use: `[table] key`
is `MCP_ERA_GATEWAY_<TABLE>_<KEY>` in upper case (`[http] max_sessions` ->
`MCP_ERA_GATEWAY_HTTP_MAX_SESSIONS`), one variable for each entry of
`keys.KEYS`, so a new key has its variable without a line here.

A value is read by its setting's type: an integer as decimal digits; a number
of seconds as a float (`1.5`, `30`); a boolean as true/false, 1/0 or yes/no
(any case); a string as it is. A list or a table is JSON
(`["python", "server.py"]`, `{"alice": "token"}`), checked as the same key in
the file. `[mrtr] state_key` is a JSON list when it starts with `[`, else one
key. Values are never echoed in an error where they may be a secret.

A variable with the prefix that names no setting is refused: a misspelt one
must not pass silently."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.config.checks import ConfigError
from gateway.config.keys import KEYS
from gateway.config.toml_file import TYPES, coerce

PREFIX = "MCP_ERA_GATEWAY_"
# The older name of MCP_ERA_GATEWAY_MRTR_STATE_KEY, still read; both at once
# is refused, as two spellings of one key in the file are.
ALIASES = {PREFIX + "STATE_KEY": ("mrtr", "state_key")}
# Variables with the prefix that the gateway reads for something other than
# a setting (none today); anything else with the prefix is a mistake.
OTHER_VARIABLES: frozenset[str] = frozenset()

_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})
_INTEGER = re.compile(r"[+-]?[0-9]+")
_SCALARS = frozenset({"bool", "int", "float", "str"})


def variable(table: str, key: str) -> str:
    """The environment variable of `[table] key`."""
    return f"{PREFIX}{table}_{key}".upper()


VARIABLES: dict[str, tuple[str, str]] = {
    **{variable(table, key): (table, key) for table, key in KEYS},
    **ALIASES,
}


def from_environ(env: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    """Each setting the environment gives: Config field -> (value, the
    variable that gave it), each value of the right type but not yet checked
    with the others. ConfigError names the variable at fault."""
    given: dict[str, tuple[Any, str]] = {}
    for var in sorted(name for name in env if name.startswith(PREFIX)):
        if var in OTHER_VARIABLES:
            continue
        spelled = VARIABLES.get(var)
        if spelled is None:
            raise ConfigError(_unknown(var))
        name = KEYS[spelled]
        if name in given:
            raise ConfigError(f"{given[name][1]} and {var} are one setting: give one of them")
        given[name] = (_value(name, env[var], var), var)
    return given


def _unknown(var: str) -> str:
    import difflib  # for this message only: not carried by every running gateway

    near = difflib.get_close_matches(var, VARIABLES, n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    return f"unknown environment variable {var}: no setting has that name{hint}"


def _value(name: str, text: str, var: str) -> Any:
    # An optional setting is given or not: unset is its absence.
    kind = str(TYPES[name]).removesuffix(" | None")
    if name == "state_key":
        return coerce(name, _json(text, var) if text.lstrip().startswith("[") else text, var)
    if kind not in _SCALARS:
        return coerce(name, _json(text, var), var)
    if kind == "bool":
        word = text.strip().lower()
        if word not in _TRUE | _FALSE:
            raise ConfigError(f"{var} must be true or false (or 1/0, yes/no), not {text!r}")
        return word in _TRUE
    if kind == "int":
        if not _INTEGER.fullmatch(text.strip()):
            raise ConfigError(f"{var} must be an integer, not {text!r}")
        return int(text)
    if kind == "float":
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{var} must be a number, not {text!r}") from None
    return text


def _json(text: str, var: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        # The message says where JSON broke; the value may be a secret.
        raise ConfigError(f"{var} must be JSON here (a list or an object): {exc}") from None
