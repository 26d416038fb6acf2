"""What this gateway is: its version (the installed distribution's, else the
constant in gateway/__init__.py, for a checkout run without installing) and
the Python that runs it; for --version and /metrics."""

from __future__ import annotations

import platform
from collections.abc import Callable
from importlib import metadata

from gateway import __version__

DISTRIBUTION = "mcp-era-gateway"


def version(lookup: Callable[[str], str] = metadata.version) -> str:
    try:
        return lookup(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return __version__


def python_version() -> str:
    return platform.python_version()
