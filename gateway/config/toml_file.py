"""Reading the TOML file: each `[table] key` to its setting, its value
checked for type (and coerced: a list to a tuple, an integer to a float
where a number of seconds is meant), then the whole checked as one. The
environment's values go through the same `coerce` (config/environment.py)."""

from __future__ import annotations

import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

from gateway.config.checks import ConfigError, check_root
from gateway.config.keys import KEYS
from gateway.config.settings import Config

TYPES = {f.name: f.type for f in fields(Config)}


def load(path: str | Path | None) -> Config:
    """The file's settings over the defaults, checked as one."""
    values = {name: value for name, (value, _) in read(path).items()}
    cfg = Config(**values).normalized()
    cfg.check()
    return cfg


def read(path: str | Path | None) -> dict[str, tuple[Any, str]]:
    """Each setting the file gives: Config field -> (value, its `[table] key`),
    each value of the right type but not yet checked with the others."""
    if path is None:
        return {}
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from None
    given: dict[str, tuple[Any, str]] = {}
    for table, body in raw.items():
        if not isinstance(body, dict):
            raise ConfigError(f"top-level key {table!r} must be a table")
        for key, value in body.items():
            name = KEYS.get((table, key))
            if name is None:
                raise ConfigError(f"unknown config key [{table}] {key}")
            where = f"[{table}] {key}"
            if name in given:
                raise ConfigError(f"{where} and {given[name][1]} are one setting: give one of them")
            given[name] = (coerce(name, value, where), where)
    return given


def coerce(name: str, value: Any, where: str) -> Any:  # noqa: PLR0912 - one branch per TOML type a setting may hold
    """`value` as the setting `name` holds it, from what TOML (or JSON) gives;
    `where` names the setting in the error."""
    kind = str(TYPES[name])
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false")
        return value
    if name == "passthrough_methods":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} must be a list of strings")
        return frozenset(value)
    if name in (
        "command",
        "replay_tools",
        "http_allowed_hosts",
        "http_allowed_origins",
        "upstream_redirect_origins",
    ):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} must be a list of strings")
        if name == "command" and not value:
            raise ConfigError(f"{where} must not be empty")
        return tuple(value)
    if name == "state_key":
        if isinstance(value, str):
            return value
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} must be a string or a list of strings")
        return tuple(value)
    if name == "static_roots":
        if not isinstance(value, list):
            raise ConfigError(f"{where} must be a list of paths or tables (uri, name)")
        return tuple(root_from(v, where) for v in value)
    if kind.startswith("dict"):
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a table")
        of = {"dict[str, str]": (str, "a string"), "dict[str, int]": (int, "an integer")}
        expected = of.get(kind)
        for key, item in value.items():
            if expected is not None and (
                not isinstance(item, expected[0]) or isinstance(item, bool)
            ):
                raise ConfigError(f"{where}: {key!r} must be {expected[1]}")
        return dict(value)
    if kind == "float" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind in ("str", "str | None") and isinstance(value, str):
        return value
    raise ConfigError(f"{where} has the wrong type ({type(value).__name__}, expected {kind})")


def root_from(value: Any, where: str) -> dict[str, Any]:
    """One configured root (2025-11-25 `Root`): a table with a `file://` uri
    and an optional name, or an absolute path, which becomes its file:// URI
    named after its last component."""
    if isinstance(value, str):
        if value.startswith("file://"):
            root: dict[str, Any] = {"uri": value}
        else:
            path = Path(value).expanduser()
            if not path.is_absolute():
                raise ConfigError(
                    f"{where}: root {value!r} must be an absolute path or a file:// URI"
                )
            root = {"uri": path.as_uri(), "name": path.name or str(path)}
    elif isinstance(value, dict):
        root = dict(value)
    else:
        raise ConfigError(f"{where}: each root is a path or a table (uri, name)")
    check_root(root, where)
    return root
