"""Dual-era fixture client: `mcp.Client` from mcp==2.3.0.

    .peers/py2/bin/python compat_matrix/peers/py2_client.py [--mode auto|legacy|2026-07-28] \
        [--timeout S] -- SERVER_COMMAND ARGS...

The "Dual-era" client of the compatibility matrix. In the default `auto`
mode the SDK probes `server/discover` (10 s probe timeout) and falls back to
`initialize` on any error other than a disjoint -32022; `era` in the report
says where it ended up, read from the negotiated `Client.protocol_version`.
Then tools/list and `echo` (`add` too when present).
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
    echo_arguments,
    first_text,
    leaf_exception,
    start_watchdog,
)
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS


def parse_args() -> tuple[str, float, list[str]]:
    # Same shape as _common.parse_args, plus --mode.
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit(f"usage: {sys.argv[0]} [--mode M] [--timeout S] -- SERVER_COMMAND [ARGS...]")
    cut = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--mode", default="auto", help="Client mode: auto (default), legacy, or a modern version"
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    args = parser.parse_args(argv[:cut])
    if not argv[cut + 1 :]:
        parser.error("missing server command after --")
    return args.mode, args.timeout, argv[cut + 1 :]


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


async def run(mode: str, command: list[str], report: Report, seconds: float) -> None:
    # The whole environment goes through (stdio_client only passes a few by default).
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    with anyio.fail_after(seconds):
        async with Client(params, mode=mode) as client:
            await converse(client, report)


def main() -> None:
    mode, timeout, command = parse_args()
    report = Report()
    start_watchdog(report, timeout)
    try:
        anyio.run(run, mode, command, report, timeout)
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
