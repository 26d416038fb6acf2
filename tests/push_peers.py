"""The push-style peers of issue 10: the dual-era mcp 2.3 server whose tool
asks its client push-style (compat_matrix/peers/py2_push_server.py), what its
tool answers, and the legacy mcp 1.30 client that calls it
(tests/servers/py1_push_client.py). From tests/test_real_peers_dual.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.http_back_support import PEERS

REPO = Path(__file__).resolve().parent.parent
SERVER = str(REPO / "compat_matrix/peers/py2_push_server.py")
CLIENT = str(REPO / "tests/servers/py1_push_client.py")
PY1, PY2 = str(PEERS / "py1/bin/python"), str(PEERS / "py2/bin/python")
ANSWER = "Ada|sampled|file:///work"
ASKED = ["elicitation/create", "sampling/createMessage", "roots/list"]


def legacy_client(command: list[str], tool: str = "push", arguments: str = "{}") -> dict[str, Any]:
    """Run tests/servers/py1_push_client.py: `tool` called with `arguments`
    over `command` (a server command, or an HTTP URL); its one-line outcome."""
    for peer in (PY1, PY2):
        if not Path(peer).exists():
            pytest.fail(f"peer missing: {peer} (run `bash peers/install.sh`)", pytrace=False)
    done = subprocess.run(
        [PY1, CLIENT, tool, arguments, "--", *command],
        cwd=REPO,
        capture_output=True,
        timeout=120,
        check=False,
    )
    lines = done.stdout.decode().strip().splitlines()
    assert done.returncode == 0 and lines, done.stderr.decode()[-3000:]
    out: dict[str, Any] = json.loads(lines[-1])
    return out
