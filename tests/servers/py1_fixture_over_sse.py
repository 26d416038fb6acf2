"""The legacy fixture server (compat_matrix/peers/py1_server.py, mcp 1.30
FastMCP, with its change notifications on) served over the deprecated
HTTP+SSE transport only: `GET /sse` and `POST /messages/`, no Streamable HTTP.
The upstream issue #15 says the gateway must keep detecting.

    .peers/py1/bin/python tests/servers/py1_fixture_over_sse.py PORT
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "compat_matrix" / "peers"))

import py1_server  # type: ignore[import-not-found]  # found through the path above


def main() -> None:
    py1_server._enable_notifications()
    py1_server.mcp.settings.host = "127.0.0.1"
    py1_server.mcp.settings.port = int(sys.argv[1])
    py1_server.mcp.settings.log_level = "WARNING"
    py1_server.mcp.run("sse")


if __name__ == "__main__":
    main()
