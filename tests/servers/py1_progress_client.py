"""mcp 1.30's ClientSession over stdio, reading normally, on a server that
floods progress: the flood call, then a plain call; prints the outcome as
one JSON line.

    .peers/py1/bin/python tests/servers/py1_progress_client.py COUNT SIZE -- COMMAND [ARG...]
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import TextContent


async def run(count: int, size: int, command: list[str]) -> dict[str, Any]:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    params = StdioServerParameters(command=command[0], args=command[1:])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        flooded = await session.call_tool(
            "flood",
            {"count": count, "size": size},
            read_timeout_seconds=timedelta(seconds=60),
            progress_callback=on_progress,
        )
        after = await session.call_tool("ping_tool", {}, read_timeout_seconds=timedelta(seconds=10))
    return {
        "flood": [c.text for c in flooded.content if isinstance(c, TextContent)],
        "after": [c.text for c in after.content if isinstance(c, TextContent)],
        "progress_seen": len(seen),
        "in_order": seen == sorted(seen),
    }


def main() -> None:
    count, size, dashes, *command = sys.argv[1:]
    assert dashes == "--" and command, __doc__
    outcome = anyio.run(run, int(count), int(size), command)
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
