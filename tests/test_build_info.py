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
    """What the gateway reports is what pip installed: the package's
    metadata is built from the same constant."""
    assert build_info.version() == metadata.version(build_info.DISTRIBUTION)
    assert build_info.version() == gateway.__version__


def test_the_project_takes_its_version_from_the_constant() -> None:
    """One place for the version: a release that edits only pyproject.toml
    cannot report another."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    dynamic = pyproject["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "gateway.__version__"}


def test_a_gateway_in_front_of_a_command_loads_no_module_it_does_not_use() -> None:
    """Memory (issue #12: peak RSS): reading the version must not cost every
    gateway the modules importlib.metadata brings (email, csv, zipfile), nor
    a stdio upstream the HTTP back's (h11), nor every start the modules of a
    rare numeric header check (decimal) or of a typo's hint (difflib)."""
    code = (
        "import sys; import gateway.cli, gateway.runtime.http_app, gateway.runtime.stdio_app; "
        "from gateway import build_info; build_info.version(); "
        "print(sorted(m for m in ('importlib.metadata', 'decimal', 'difflib', 'h11') "
        "if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "[]"


def test_python_version_is_the_running_one() -> None:
    assert build_info.python_version() == platform.python_version()
