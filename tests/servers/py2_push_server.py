"""A dual-era mcp 2.3 server whose tool asks its client push-style, as most
SDK 2.x servers written before 2026-07-28 do (issue 10).

    .peers/py2/bin/python tests/servers/py2_push_server.py [--http PORT]

Tool `push`: `ctx.elicit(...)`, then `ctx.session.create_message(...)`, then
`ctx.session.list_roots()`, answered `<name>|<sampled text>|<first root>`.
In a legacy session these are server requests on the session; a modern
request has no back-channel for them, so there the call fails.
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import SamplingMessage, TextContent
from pydantic import BaseModel

warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

mcp = MCPServer("py2-push", version="2.3.0")


class Name(BaseModel):
    name: str


@mcp.tool()
async def push(ctx: Context) -> str:
    """Ask the client for a name, a sample and its roots."""
    got = await ctx.elicit("Your name?", Name)
    name = got.data.name if got.action == "accept" else got.action
    sampled = await ctx.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text="hi"))],
        max_tokens=5,
        related_request_id=ctx.request_id,
    )
    text = sampled.content.text if isinstance(sampled.content, TextContent) else "?"
    roots = await ctx.session.list_roots()
    return f"{name}|{text}|{roots.roots[0].uri if roots.roots else '-'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT")
    args = parser.parse_args()
    if args.http is None:
        mcp.run("stdio")
        return
    import uvicorn

    app: Any = mcp.streamable_http_app(host="127.0.0.1")
    log_level: Literal["warning"] = "warning"
    uvicorn.run(app, host="127.0.0.1", port=args.http, log_level=log_level)


if __name__ == "__main__":
    main()
