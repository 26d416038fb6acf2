"""Legacy client for the popular servers: mcp==1.30.0 `ClientSession`.

    .peers/py1/bin/python compat_matrix/peers/popular_py1_client.py --server S [--dir D] \
        [--timeout S] (--url URL | -- COMMAND ARGS...)

Declares roots (the one root is `--dir`), initializes, lists tools and runs the
server's checked calls from `_popular.py`. One JSON report on stdout.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio
from _common import Report, first_text
from _popular import root_uri, run_client, scenario
from mcp import ClientSession
from mcp.shared.context import RequestContext
from mcp.shared.exceptions import McpError
from mcp.types import ListRootsResult, Root
from py1_client import connect
from pydantic import FileUrl


async def run(args: argparse.Namespace, report: Report) -> None:
    uri = root_uri(args.dir)

    async def roots(context: RequestContext[ClientSession, Any]) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=FileUrl(uri), name="popular")] if uri else [])

    with anyio.fail_after(args.timeout):
        async with (
            connect(args.command, args.url) as (read, write),
            ClientSession(read, write, list_roots_callback=roots) as session,
        ):
            init = await session.initialize()
            report.era = "legacy"
            report.step("initialize", True, protocolVersion=init.protocolVersion)
            listed = await session.list_tools()
            tools = sorted(t.name for t in listed.tools)
            report.step("tools/list", True, tools=tools)

            async def call(tool: str, arguments: dict[str, Any]) -> tuple[bool, str | None]:
                result = await session.call_tool(tool, arguments)
                return bool(result.isError), first_text([b.model_dump() for b in result.content])

            await scenario(args.server, args.dir, tools, call, report)
            args.done = True


def main() -> None:
    run_client(run, McpError, anyio.run)


if __name__ == "__main__":
    main()
