"""A legacy client over the deprecated HTTP+SSE transport (mcp 1.30
`mcp.client.sse.sse_client` and `ClientSession`): initialize, list tools,
call `echo`, `progress` (with a progress callback), `ask_name` (answering
the server's elicitation with `{"name": "Ada"}`), and cancel a `slow` call;
prints the outcome as one JSON line.

    .peers/py1/bin/python tests/servers/py1_sse_client.py http://HOST:PORT/sse [--no-elicit]
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.shared.context import RequestContext
from mcp.shared.exceptions import McpError
from mcp.types import ElicitRequestParams, ElicitResult, TextContent

ASKED: list[str] = []


async def elicit(context: RequestContext[Any, Any], params: ElicitRequestParams) -> ElicitResult:
    ASKED.append("elicitation/create")
    return ElicitResult(action="accept", content={"name": "Ada"})


def texts(result: Any) -> list[str]:
    return [c.text for c in result.content if isinstance(c, TextContent)]


async def run(url: str, with_elicit: bool) -> dict[str, Any]:
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    out: dict[str, Any] = {}
    async with (
        sse_client(url, timeout=10, sse_read_timeout=60) as (read, write),
        ClientSession(read, write, elicitation_callback=elicit) as session,
    ):
        init = await session.initialize()
        out["protocolVersion"] = init.protocolVersion
        out["server"] = init.serverInfo.name
        tools = await session.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        out["echo"] = texts(await session.call_tool("echo", {"text": "hi"}))
        done = await session.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
        out["progress"] = {"text": texts(done), "seen": progress}
        if with_elicit:
            out["ask_name"] = texts(await session.call_tool("ask_name", {}))
            out["asked"] = ASKED
        # A call the client gives up on: the SDK sends notifications/cancelled.
        try:
            await session.call_tool(
                "slow", {"ms": 30000}, read_timeout_seconds=timedelta(seconds=0.5)
            )
            out["cancelled"] = "answered"
        except McpError as exc:
            out["cancelled"] = exc.error.message
        # The session still works after the cancellation.
        out["after_cancel"] = texts(await session.call_tool("echo", {"text": "again"}))
    return out


def main() -> None:
    url = sys.argv[1]
    with_elicit = "--no-elicit" not in sys.argv[2:]
    out = anyio.run(run, url, with_elicit)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
