"""Modern client for the popular servers: mcp==2.3.0 `Client` pinned to 2026-07-28.

    .peers/py2/bin/python compat_matrix/peers/popular_py2_client.py --server S [--dir D] \
        [--timeout S] (--url URL | -- COMMAND ARGS...)

Declares roots (the one root is `--dir`), lists tools and runs the server's
checked calls from `_popular.py`. One JSON report on stdout, as every fixture client.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio
from _common import Report, first_text
from _popular import root_uri, run_client, scenario
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import ListRootsResult, Root
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from py2_client import target
from pydantic import FileUrl

MODERN = "2026-07-28"


async def run(args: argparse.Namespace, report: Report) -> None:
    uri = root_uri(args.dir)

    async def roots(context: ClientRequestContext) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=FileUrl(uri), name="popular")] if uri else [])

    with anyio.fail_after(args.timeout):
        async with Client(
            target(args.command, args.url), mode=MODERN, list_roots_callback=roots
        ) as client:
            version = client.protocol_version
            report.era = "modern" if version in MODERN_PROTOCOL_VERSIONS else "legacy"
            report.step("connect", report.era == "modern", protocolVersion=version)
            listed = await client.list_tools()
            tools = sorted(t.name for t in listed.tools)
            report.step("tools/list", True, tools=tools)

            async def call(tool: str, arguments: dict[str, Any]) -> tuple[bool, str | None]:
                result = await client.call_tool(tool, arguments)
                return result.is_error, first_text([b.model_dump() for b in result.content])

            await scenario(args.server, args.dir, tools, call, report)
            args.done = True


def main() -> None:
    run_client(run, MCPError, anyio.run)


if __name__ == "__main__":
    main()
