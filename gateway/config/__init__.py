"""Gateway settings: the TOML file, the environment, the command line (the later wins).

`settings` holds the Config dataclass, `checks` what makes a setting valid,
`keys` where each lives in the file, `toml_file` and `environment` the
reading, `layers` the merging."""

from gateway.config.checks import LOG_LEVELS, ConfigError, normalize_listen
from gateway.config.settings import DEFAULT_CLIENT_INFO, Config
from gateway.config.toml_file import load, read, root_from

__all__ = [
    "DEFAULT_CLIENT_INFO",
    "LOG_LEVELS",
    "Config",
    "ConfigError",
    "load",
    "normalize_listen",
    "read",
    "root_from",
]
