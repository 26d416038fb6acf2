"""What a user does first with a server in a real client (mcp 1.30): connect,
list the tools, add a note and find it; prints the outcome as one JSON line.

    .peers/py1/bin/python tests/servers/py1_readme_client.py -- COMMAND [ARG...]
    .peers/py1/bin/python tests/servers/py1_readme_client.py -- http://HOST:PORT/mcp

A command is launched the way a desktop client launches its servers (the SDK's
stdio client, with this process's PATH); a URL is reached with the SDK's
`streamablehttp_client`, as a client of the HTTP sidecar.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.types import TextContent


def transport(command: list[str]) -> Any:
    if command[0].startswith("http"):
        return streamablehttp_client(command[0])
    return stdio_client(StdioServerParameters(command=command[0], args=command[1:]))


async def run(command: list[str]) -> dict[str, Any]:
    async with (
        transport(command) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        tools = await session.list_tools()
        added = await session.call_tool("add_note", {"name": "hour", "text": "first hour"})
        found = await session.call_tool("search_notes", {"query": "first hour"})
    return {
        "protocolVersion": init.protocolVersion,
        "serverInfo": init.serverInfo.name,
        "tools": sorted(t.name for t in tools.tools),
        "errors": [added.isError, found.isError],
        "found": [c.text for c in found.content if isinstance(c, TextContent)],
    }


async def bounded(command: list[str]) -> dict[str, Any]:
    with anyio.fail_after(60):
        return await run(command)


def main() -> None:
    args = sys.argv[1:]
    assert args[:1] == ["--"] and args[1:], __doc__
    print(json.dumps(anyio.run(bounded, args[1:])), flush=True)


if __name__ == "__main__":
    main()
