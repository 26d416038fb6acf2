"""A legacy client (mcp 1.30 `ClientSession`) that calls a tool and answers
the server's push-style requests; prints the outcome as one JSON line.

    .peers/py1/bin/python tests/servers/py1_push_client.py TOOL -- COMMAND [ARG...]
    .peers/py1/bin/python tests/servers/py1_push_client.py TOOL -- http://HOST:PORT/mcp
    .peers/py1/bin/python tests/servers/py1_push_client.py TOOL '{"ms": 1000}' -- COMMAND...

It declares elicitation, sampling and roots, and answers them with
`{"name": "Ada"}`, "sampled" and `file:///work`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.context import RequestContext
from mcp.types import (
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsResult,
    Root,
    TextContent,
)

ASKED: list[str] = []


async def elicit(context: RequestContext[Any, Any], params: ElicitRequestParams) -> ElicitResult:
    ASKED.append("elicitation/create")
    return ElicitResult(action="accept", content={"name": "Ada"})


async def sample(
    context: RequestContext[Any, Any], params: CreateMessageRequestParams
) -> CreateMessageResult:
    ASKED.append("sampling/createMessage")
    return CreateMessageResult(
        role="assistant", content=TextContent(type="text", text="sampled"), model="m"
    )


async def roots(context: RequestContext[Any, Any]) -> ListRootsResult:
    ASKED.append("roots/list")
    return ListRootsResult(roots=[Root(uri="file:///work", name="work")])


def transport(command: list[str]) -> Any:
    if command[0].startswith("http"):
        return streamablehttp_client(command[0])
    return stdio_client(StdioServerParameters(command=command[0], args=command[1:]))


async def run(tool: str, arguments: dict[str, Any], command: list[str]) -> dict[str, Any]:
    async with (
        transport(command) as (read, write, *_),
        ClientSession(
            read,
            write,
            elicitation_callback=elicit,
            sampling_callback=sample,
            list_roots_callback=roots,
        ) as session,
    ):
        init = await session.initialize()
        result = await session.call_tool(tool, arguments)
    text = [c.text for c in result.content if isinstance(c, TextContent)]
    return {
        "protocolVersion": init.protocolVersion,
        "isError": result.isError,
        "text": text,
        "asked": ASKED,
    }


async def bounded(tool: str, arguments: dict[str, Any], command: list[str]) -> dict[str, Any]:
    with anyio.fail_after(60):
        return await run(tool, arguments, command)


def main() -> None:
    args = sys.argv[1:]
    assert "--" in args[1:3], __doc__
    sep = args.index("--")
    tool, arguments, command = args[0], json.loads(args[1]) if sep == 2 else {}, args[sep + 1 :]
    out = anyio.run(bounded, tool, arguments, command)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
