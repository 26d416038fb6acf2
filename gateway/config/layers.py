"""The settings from where the operator gives them, in order of precedence:
the defaults, the TOML file, the environment, the command line (each later
one wins, a setting at a time). The merged settings are checked once, as a
whole: a file that needs a command-line option to make sense (e.g.
`forward_authorization` with `--listen` and `--upstream`) is valid."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.config.checks import ConfigError
from gateway.config.settings import Config

# One layer: Config field -> (value, how the operator gave it: `[table] key`,
# an environment variable, an option).
Layer = Mapping[str, tuple[Any, str]]


@dataclass(frozen=True, slots=True)
class Merged:
    config: Config
    # Config field -> how it was given, for the fields not left at their default.
    sources: dict[str, str]

    def blame(self, exc: ConfigError) -> ConfigError:
        """`exc`, saying which variable or option gave the setting at fault
        when its message (which names the file's key) does not."""
        return blame(exc, self.sources)


def merge(*layers: Layer) -> Merged:
    """The layers merged, the last winning; ConfigError names the setting
    at fault and, unless it was the file's, what gave it."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for layer in layers:
        for name, (value, where) in layer.items():
            values[name] = value
            sources[name] = where
    try:
        cfg = Config(**values).normalized()
        cfg.check()
    except ConfigError as exc:
        raise blame(exc, sources) from None
    return Merged(cfg, sources)


def blame(exc: ConfigError, sources: Mapping[str, str]) -> ConfigError:
    given = [
        sources[name]
        for name in exc.settings
        if name in sources and not sources[name].startswith("[")
    ]
    if not given:
        return exc
    return ConfigError(f"{exc} (given by {', '.join(given)})", settings=exc.settings)
