"""Legacy fixture server with its own 2025-11-25 tasks: mcp==1.30.0's
low-level `Server` with the experimental tasks API (FastMCP has none).

    .peers/py1/bin/python compat_matrix/peers/py1_tasks_server.py   # stdio

Tools: `slow` may run as a task (`taskSupport: "optional"`): it answers
"slow done" as a task and "slow done (sync)" called plainly; `ask` must run
as a task (`"required"`) and elicits a name during it (the request comes
inside the blocking `tasks/result`); `plain` has no task support. The
gateway uses these tasks for modern clients (issue #16, docs/design.md §5.4).
"""

from __future__ import annotations

import warnings
from typing import Any

import anyio
from mcp import types
from mcp.server.experimental.task_context import ServerTaskContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

warnings.simplefilter("ignore", DeprecationWarning)  # the experimental tasks API says it is

server = Server("py1-tasks-fixture")
server.experimental.enable_tasks()  # tasks/get, tasks/result, tasks/list, tasks/cancel

SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
TOOLS = [
    types.Tool(
        name="slow",
        description="a second of work",
        inputSchema=SCHEMA,
        execution=types.ToolExecution(taskSupport="optional"),
    ),
    types.Tool(
        name="ask",
        description="asks a name during the task",
        inputSchema=SCHEMA,
        execution=types.ToolExecution(taskSupport="required"),
    ),
    types.Tool(name="plain", description="no task support", inputSchema=SCHEMA),
]


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    return TOOLS


def text(value: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=value)])


@server.call_tool()
async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
    ctx = server.request_context
    tool = next(t for t in TOOLS if t.name == name)
    ctx.experimental.validate_for_tool(tool)  # a mode mismatch is refused
    if name == "plain":
        return [types.TextContent(type="text", text="plain done")]
    if name == "slow":
        if not ctx.experimental.is_task:
            await anyio.sleep(1.0)
            return [types.TextContent(type="text", text="slow done (sync)")]

        async def slow(task: ServerTaskContext) -> types.CallToolResult:
            await task.update_status("halfway")
            await anyio.sleep(1.0)
            return text("slow done")

        return await ctx.experimental.run_task(slow)

    async def ask(task: ServerTaskContext) -> types.CallToolResult:
        schema = {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        }
        answer = await task.elicit(message="Your name?", requestedSchema=schema)
        who = (answer.content or {}).get("name")
        return text(f"hello {who}")

    return await ctx.experimental.run_task(ask)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
