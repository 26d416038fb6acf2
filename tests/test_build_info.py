"""`--version` and the version in /metrics (issue #13: "`--version`, and the
version in `/metrics` (build info)")."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import gateway
from gateway import build_info

REPO = Path(__file__).resolve().parent.parent


def test_version_prints_the_version_and_exits_0() -> None:
    """Issue #13: `--version`. It answers before reading any configuration, so
    a broken one (here a misspelt variable) does not hide the version."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MCP_ERA_GATEWAY_")}
    environ["MCP_ERA_GATEWAY_NO_SUCH_SETTING"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "--version"],
        check=False,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        env=environ,
        cwd=REPO,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "mcp-era-gateway 0.1.0\n", "")


def test_the_version_is_the_installed_distributions() -> None:
    assert build_info.version(lambda name: {"mcp-era-gateway": "9.9.9"}[name]) == "9.9.9"


def test_without_an_installed_distribution_the_constant_answers() -> None:
    """A checkout run without installing has no distribution metadata."""

    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    assert build_info.version(not_installed) == gateway.__version__


def test_the_constant_is_the_projects_version() -> None:
    """The fallback must not drift from the version the package is built with."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert gateway.__version__ == project["version"]


def test_python_version_is_the_running_one() -> None:
    assert build_info.python_version() == platform.python_version()
