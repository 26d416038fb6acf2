"""A legacy client (mcp 1.30 `ClientSession`, no tasks of its own) calling
the task tools of compat_matrix/peers/py2_tasks_server.py through the
gateway (issue #16: the gateway polls a modern server's task and answers the
call); prints the outcome as one JSON line.

    .peers/py1/bin/python tests/servers/py1_task_client.py -- COMMAND [ARG...]
    .peers/py1/bin/python tests/servers/py1_task_client.py -- http://HOST:PORT/mcp

It declares elicitation and answers a boolean question with true and any
other with the name "Alice".
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
from mcp.shared.exceptions import McpError
from mcp.types import ElicitRequestParams, ElicitResult, TextContent

ASKED: list[str] = []


async def elicit(context: RequestContext[Any, Any], params: ElicitRequestParams) -> ElicitResult:
    ASKED.append(params.message)
    schema = getattr(params, "requestedSchema", {}) or {}
    fields = schema.get("properties", {})
    content: dict[str, Any] = {
        name: True if spec.get("type") == "boolean" else "Alice" for name, spec in fields.items()
    }
    return ElicitResult(action="accept", content=content)


def transport(command: list[str]) -> Any:
    if command[0].startswith("http"):
        return streamablehttp_client(command[0])
    return stdio_client(StdioServerParameters(command=command[0], args=command[1:]))


def texts(result: Any) -> list[str]:
    return [c.text for c in result.content if isinstance(c, TextContent)]


async def run(command: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with (
        transport(command) as streams,
        ClientSession(streams[0], streams[1], elicitation_callback=elicit) as session,
    ):
        await session.initialize()
        out["greet"] = texts(await session.call_tool("greet", {"name": "Ada"}))
        out["slow"] = texts(await session.call_tool("slow_compute", {"seconds": 0.5, "label": "x"}))
        out["confirm"] = texts(await session.call_tool("confirm_delete", {"filename": "a.txt"}))
        multi = await session.call_tool("multi_input", {})
        out["multi"] = json.loads(texts(multi)[0])
        failing = await session.call_tool("failing_job", {})
        out["failing"] = {"isError": failing.isError, "text": texts(failing)}
        try:
            await session.call_tool("protocol_error_job", {})
            out["protocol_error"] = "answered"
        except McpError as exc:
            out["protocol_error"] = {"code": exc.error.code, "message": exc.error.message}
        out["with_task"] = texts(await session.call_tool("test_tool_with_task", {}))
        out["asked"] = ASKED
        # Printed before the session closes: what the server sends after
        # that is not this client's business.
        print(json.dumps(out), flush=True)
    return out


def main() -> None:
    args = sys.argv[1:]
    command = args[args.index("--") + 1 :]
    anyio.run(run, command)


if __name__ == "__main__":
    main()
