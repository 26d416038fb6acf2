"""FastMCP's proxy (PyPI fastmcp, `fastmcp.server.create_proxy`, what
`FastMCP.as_proxy` became) as the bench runs it, under the fastmcp venv of
bench/install_proxies.sh. Any front to any back:

    fastmcp_proxy.py --port P -- CMD ARGS...   # HTTP front (/mcp) → stdio server
    fastmcp_proxy.py --port P --url URL        # HTTP front → Streamable HTTP server
    fastmcp_proxy.py --url URL                 # stdio front → Streamable HTTP server

What `fastmcp run mcp.json --transport http` / `fastmcp run URL` do, plus a
`GET /readyz` route so the bench knows when the HTTP front serves, and
`--mode auto` (below). Otherwise the proxy's defaults: a fresh backend session
per client request (the stdio server process is kept alive between them).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def main(argv: list[str]) -> None:
    # Installed in the fastmcp venv only, not beside the gateway.
    from fastmcp.client.transports import StdioTransport  # type: ignore[import-not-found]
    from fastmcp.server import create_proxy  # type: ignore[import-not-found]
    from starlette.requests import Request  # type: ignore[import-not-found]
    from starlette.responses import PlainTextResponse  # type: ignore[import-not-found]

    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, help="serve Streamable HTTP on 127.0.0.1:PORT/mcp")
    p.add_argument("--url", help="the Streamable HTTP server to proxy")
    # auto: the backend probes server/discover and falls back to initialize, so a
    # client of either era reaches a server of either era; the default (None)
    # mirrors the client's era to the backend, which fails across eras.
    p.add_argument("--mode", default="auto")
    p.add_argument("command", nargs="*", help="the stdio server to proxy")
    args = p.parse_args(argv)
    target: Any = args.url or StdioTransport(args.command[0], args.command[1:])
    proxy = create_proxy(target, name="bench", mode=args.mode)
    if args.port is None:
        proxy.run(transport="stdio", show_banner=False, log_level="WARNING")
        return

    @proxy.custom_route("/readyz", methods=["GET"])  # type: ignore[untyped-decorator]
    async def ready(_: Request) -> Any:
        return PlainTextResponse("ok")

    proxy.run(
        transport="http", host="127.0.0.1", port=args.port, show_banner=False, log_level="WARNING"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
