"""Dual-era fixture client: `mcp.Client` from mcp==2.3.0.

    .peers/py2/bin/python compat_matrix/peers/py2_client.py [--mode auto|legacy|2026-07-28] \
        [--timeout S] (--url URL | -- SERVER_COMMAND ARGS...)

The "Dual-era" client of the compatibility matrix. In the default `auto`
mode the SDK probes `server/discover` (10 s probe timeout) and falls back to
`initialize` on any error other than a disjoint -32022; `era` in the report
says where it ended up, read from the negotiated `Client.protocol_version`.
Then tools/list and `echo` (`add` too when present). With `--url URL` the
`Client` is given the URL and speaks Streamable HTTP (over HTTP the probe is
a modern `server/discover` POST; a legacy server's 4xx makes it fall back).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import anyio
from _common import (
    DEFAULT_TIMEOUT,
    ECHO_TEXT,
    Report,
    add_target_option,
    check_target,
    echo_arguments,
    first_text,
    leaf_exception,
    split_argv,
    start_watchdog,
)
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS


def parse_args() -> argparse.Namespace:
    # Same shape as _common.parse_args, plus --mode.
    own, server = split_argv(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--mode", default="auto", help="Client mode: auto (default), legacy, or a modern version"
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    add_target_option(parser)
    args = parser.parse_args(own)
    check_target(parser, args.url, server)
    args.server = server
    return args


def target(command: list[str], url: str | None) -> StdioServerParameters | str:
    """What `Client` connects to: the URL (Streamable HTTP), else the command
    with the whole environment (stdio_client only passes a few by default)."""
    if url is not None:
        return url
    return StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))


async def converse(client: Client, report: Report) -> None:
    version = client.protocol_version
    report.era = "modern" if version in MODERN_PROTOCOL_VERSIONS else "legacy"
    session = client.session
    report.step(
        "connect",
        True,
        protocolVersion=version,
        via="server/discover" if session.discover_result is not None else "initialize",
        serverInfo=client.server_info.model_dump(exclude_none=True) if client.server_info else None,
    )

    listed = await client.list_tools()
    tools: dict[str, dict[str, Any]] = {
        t.name: t.model_dump(by_alias=True, exclude_none=True) for t in listed.tools
    }
    report.step("tools/list", True, tools=sorted(tools))
    if not report.step("echo tool listed", "echo" in tools):
        return

    result = await client.call_tool("echo", echo_arguments(tools["echo"]))
    text = first_text([block.model_dump() for block in result.content])
    report.step(
        "tools/call echo", text is not None and ECHO_TEXT in text and not result.is_error, text=text
    )

    if "add" in tools:
        result = await client.call_tool("add", {"a": 2, "b": 3})
        structured = result.structured_content
        text = first_text([block.model_dump() for block in result.content])
        value = structured.get("result") if structured else text
        report.step(
            "tools/call add",
            str(value) == "5" and not result.is_error,
            structuredContent=structured,
            text=text,
        )


async def run(args: argparse.Namespace, report: Report) -> None:
    with anyio.fail_after(args.timeout):
        async with Client(target(args.server, args.url), mode=args.mode) as client:
            await converse(client, report)


def main() -> None:
    args = parse_args()
    timeout = args.timeout
    report = Report()
    start_watchdog(report, timeout)
    try:
        anyio.run(run, args, report)
    except BaseException as group:
        exc = leaf_exception(group)
        if isinstance(exc, MCPError):
            report.step(
                "error", False, code=exc.error.code, message=exc.error.message, data=exc.error.data
            )
            report.fail(f"JSON-RPC error {exc.error.code}: {exc.error.message}")
        elif isinstance(exc, TimeoutError):
            report.fail(f"timeout after {timeout:.0f}s")
        else:
            report.fail(f"{type(exc).__name__}: {exc}")
    report.finish()


if __name__ == "__main__":
    main()
