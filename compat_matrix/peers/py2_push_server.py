"""Dual-era fixture server whose tools PUSH their server requests: mcp==2.3.0 MCPServer.

Run with the py2 venv (see README.md):
    .peers/py2/bin/python compat_matrix/peers/py2_push_server.py             # stdio
    .peers/py2/bin/python compat_matrix/peers/py2_push_server.py --http PORT # 127.0.0.1:PORT/mcp

The same server as `py2_modern_server.py --dual` (same tools, resources,
prompts and legacy notifications), except that the four tools that need the
client are written the way the SDK 2.x `everything-server` example writes them:
they push a real request on the session, whatever the era of the call.

    ask_name       ctx.elicit(...)                      elicitation/create (form)
    open_link      ctx.elicit_url(...)                  elicitation/create (url)
    summarize      ctx.session.create_message(...)      sampling/createMessage
    list_my_roots  ctx.session.list_roots()             roots/list
    push           all three in one call (elicit, sample, roots), answered
                   `<name>|<sampled text>|<first root>` (tests/test_real_peers_dual.py)

A legacy session gets those requests as requests and the tool completes. A
modern request has no back-channel, so the SDK refuses to send them and the
call fails with -32600 "Cannot send '<method>': this transport context has no
back-channel for server-initiated requests" (what a modern client sees direct,
and through the gateway, which serves it modern: DESIGN §5.3). mcp 2.x servers
are dual-era by default and this style is common, so a legacy client must get
through the gateway everything it gets from this server directly (issue #10).
"""

from __future__ import annotations

import argparse
from uuid import uuid4

import py2_modern_server as base  # the script's directory is on sys.path
from mcp.server.mcpserver import Context
from mcp_types import SamplingMessage, TextContent

mcp = base.mcp
PUSHED = ("ask_name", "open_link", "summarize", "list_my_roots")
for name in PUSHED:
    mcp.remove_tool(name)


@mcp.tool()
async def ask_name(ctx: Context) -> str:
    """Ask the client for a name (form-mode elicitation, pushed on the session)."""
    answer = await ctx.elicit("What is your name?", base.NameForm)
    if answer.action == "accept":
        return f"Hello, {answer.data.name}"
    return f"Elicitation: {answer.action}"


@mcp.tool()
async def open_link(ctx: Context) -> str:
    """Ask the client to open a URL (URL-mode elicitation, pushed on the session)."""
    elicitation_id = uuid4().hex
    pushed = await ctx.elicit_url(
        "Please open the link to continue.", base.LINK_URL, elicitation_id
    )
    if pushed.action == "accept":
        await ctx.session.send_elicit_complete(elicitation_id, ctx.request_id)
    return f"URL elicitation: {pushed.action}"


@mcp.tool()
async def summarize(text: str, ctx: Context) -> str:
    """Ask the client's LLM to summarize `text` (sampling, pushed on the session)."""
    message = SamplingMessage(
        role="user", content=TextContent(type="text", text=f"Summarize: {text}")
    )
    sampled = await ctx.session.create_message(
        [message], max_tokens=100, related_request_id=ctx.request_id
    )
    content = sampled.content
    return content.text if isinstance(content, TextContent) else str(content)


@mcp.tool()
async def list_my_roots(ctx: Context) -> str:
    """Return the client's root URIs joined by newline (roots/list, pushed on the session)."""
    roots = await ctx.session.list_roots()
    return "\n".join(str(root.uri) for root in roots.roots)


@mcp.tool()
async def push(ctx: Context) -> str:
    """Ask the client for a name, a sample and its roots, one after another."""
    got = await ctx.elicit("Your name?", base.NameForm)
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
    parser.add_argument(
        "--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT/mcp"
    )
    args = parser.parse_args()
    base.enable_legacy_notifications()
    if args.http is not None:
        base.serve_http(args.http, dual=True)
    else:
        mcp.run("stdio")


if __name__ == "__main__":
    main()
