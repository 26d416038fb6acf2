"""What this gateway is: its version and the Python that runs it; for
--version and /metrics.

The version is `gateway.__version__`, which the package's metadata is built
from (pyproject.toml reads it): asking importlib.metadata would give the same
string and load the email, csv and zipfile modules into every gateway
(~0.6 MB of its memory) to do it."""

from __future__ import annotations

import platform

from gateway import __version__

DISTRIBUTION = "mcp-era-gateway"


def version() -> str:
    return __version__


def python_version() -> str:
    return platform.python_version()
