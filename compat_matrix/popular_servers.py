"""The popular servers' rows: each reference server people install, and the SDK
fixtures whose era is known by construction, with the command that starts it
and the versions peers/install.sh installed (`servers`), what that install
must have made (`missing`), and the client eras and transports each server is
reached with through the gateway."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent

CLIENTS = {"modern": "popular_py2_client.py", "legacy": "popular_py1_client.py"}
CLIENT_VENVS = {"modern": "py2", "legacy": "py1"}
TRANSPORTS = ("stdio", "http")


@dataclass(frozen=True)
class Server:
    """A server to probe, and (with a scenario) to call through the gateway."""

    name: str
    label: str  # package and pinned version, as installed
    era: str  # what `probe` must print
    argv: Callable[[Path, Path], list[str]]  # (peers dir, case dir) -> command
    scenario: str | None = None  # compat_matrix/peers/_popular.py server; None: probe only
    env: Callable[[Path], dict[str, str]] = field(default=lambda _case: {})


def _node_bin(name: str) -> Callable[[Path, Path], list[str]]:
    return lambda peers, _case: [str(peers / "node" / "node_modules" / ".bin" / name)]


def _node_version(peers: Path, package: str) -> str:
    manifest = peers / "node" / "node_modules" / "@modelcontextprotocol" / package / "package.json"
    try:
        return str(json.loads(manifest.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return "?"


def _pip_version(peers: Path, venv: str, dist: str) -> str:
    for meta in (peers / venv).glob(f"lib/python*/site-packages/{dist}-*.dist-info"):
        return meta.name.removeprefix(f"{dist}-").removesuffix(".dist-info")
    return "?"


def servers(peers: Path) -> list[Server]:
    """Every row, with the versions actually installed in `peers`."""
    py2 = str(peers / "py2" / "bin" / "python")
    fixture = str(HERE / "peers" / "py2_modern_server.py")
    ts2 = str(HERE / "peers" / "ts2_modern_server.mjs")
    time_argv = ["--local-timezone", "UTC"]
    return [
        Server(
            "filesystem",
            f"@modelcontextprotocol/server-filesystem {_node_version(peers, 'server-filesystem')}",
            "legacy",
            lambda p, case: [*_node_bin("mcp-server-filesystem")(p, case), str(case)],
            "filesystem",
        ),
        Server(
            "memory",
            f"@modelcontextprotocol/server-memory {_node_version(peers, 'server-memory')}",
            "legacy",
            _node_bin("mcp-server-memory"),
            "memory",
            env=lambda case: {"MEMORY_FILE_PATH": str(case / "memory.jsonl")},
        ),
        Server(
            "everything",
            f"@modelcontextprotocol/server-everything {_node_version(peers, 'server-everything')}",
            "legacy",
            lambda p, case: [*_node_bin("mcp-server-everything")(p, case), "stdio"],
            "everything",
        ),
        Server(
            "time-legacy",
            f"mcp-server-time {_pip_version(peers, 'time1', 'mcp_server_time')} "
            f"(mcp {_pip_version(peers, 'time1', 'mcp')})",
            "legacy",
            lambda p, _case: [str(p / "time1" / "bin" / "mcp-server-time"), *time_argv],
            "time",
        ),
        Server(
            "time-dual",
            f"mcp-server-time {_pip_version(peers, 'time2', 'mcp_server_time')} "
            f"(mcp {_pip_version(peers, 'time2', 'mcp')})",
            "dual",
            lambda p, _case: [str(p / "time2" / "bin" / "mcp-server-time"), *time_argv],
            "time",
        ),
        Server(
            "py2-dual",
            f"mcp {_pip_version(peers, 'py2', 'mcp')} fixture server, --dual",
            "dual",
            lambda _p, _case: [py2, fixture, "--dual"],
        ),
        Server(
            "py2-modern",
            f"mcp {_pip_version(peers, 'py2', 'mcp')} fixture server, initialize rejected",
            "modern",
            lambda _p, _case: [py2, fixture],
        ),
        Server(
            "ts2-modern",
            f"@modelcontextprotocol/server {_node_version(peers, 'server')} fixture, "
            "legacy:'reject'",
            "modern",
            lambda _p, _case: ["node", ts2],
        ),
    ]


def missing(peers: Path) -> list[str]:
    """What peers/install.sh should have created for these rows (empty when usable)."""
    needed = [
        peers / "py1" / "bin" / "python",
        peers / "py2" / "bin" / "python",
        peers / "time1" / "bin" / "mcp-server-time",
        peers / "time2" / "bin" / "mcp-server-time",
        *(
            peers / "node" / "node_modules" / ".bin" / f"mcp-server-{name}"
            for name in ("filesystem", "memory", "everything")
        ),
    ]
    return [str(p) for p in needed if not p.exists()]
