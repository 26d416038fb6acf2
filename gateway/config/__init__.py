"""Gateway settings: TOML file, then command-line overrides (the CLI wins).

`settings` holds the Config dataclass, `checks` what makes a setting valid,
`keys` where each lives in the file, `toml_file` the reading."""

from gateway.config.checks import LOG_LEVELS, ConfigError, normalize_listen
from gateway.config.settings import DEFAULT_CLIENT_INFO, Config
from gateway.config.toml_file import load, root_from

__all__ = [
    "DEFAULT_CLIENT_INFO",
    "LOG_LEVELS",
    "Config",
    "ConfigError",
    "load",
    "normalize_listen",
    "root_from",
]
