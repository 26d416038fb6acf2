"""Legacy fixture server with the tools the conformance suite's tasks-*
scenarios call (mcp==1.30.0 FastMCP, which has no tasks of its own): behind
the gateway, a modern client that declares `io.modelcontextprotocol/tasks`
gets the gateway's own tasks for the calls that outlast `[tasks] after`
(issue #16; docs/design.md §5.4).

    .peers/py1/bin/python compat_matrix/peers/py1_task_tools.py              # stdio
    .peers/py1/bin/python compat_matrix/peers/py1_task_tools.py --http PORT  # Streamable HTTP

Each tool does what the scenario describes, as a legacy server can: work
that takes time, a tool error, a JSON-RPC error, and elicitations during
the call (pushed on the session; the gateway turns them into the task's
input requests).
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.session import ServerSession
from mcp.shared.exceptions import McpError
from mcp.types import ErrorData
from pydantic import BaseModel

Ctx = Context[ServerSession, Any, Any]
mcp = FastMCP("py1-task-tools", instructions="Legacy fixture for the tasks-* scenarios.")


class Confirm(BaseModel):
    confirm: bool


class Name(BaseModel):
    name: str


@mcp.tool()
def greet(name: str) -> str:
    """Say hello at once."""
    return f"Hello, {name}!"


@mcp.tool()
async def slow_compute(seconds: float = 1, label: str = "") -> str:
    """Sleep `seconds`, then answer."""
    await anyio.sleep(seconds)
    return f"computed {label} after {seconds}s"


@mcp.tool()
async def failing_job() -> str:
    """Fail as a tool (isError) after about a second."""
    await anyio.sleep(1)
    raise ToolError("job failed")


@mcp.tool()
async def protocol_error_job() -> str:
    """Fail with a JSON-RPC error after about a second."""
    await anyio.sleep(1)
    raise McpError(ErrorData(code=-32603, message="boom"))


@mcp.tool()
async def confirm_delete(filename: str, ctx: Ctx) -> str:
    """Ask to confirm (after a second of work), then answer."""
    await anyio.sleep(1)
    answer = await ctx.elicit(f"Delete {filename}?", Confirm)
    confirmed = answer.action == "accept" and answer.data.confirm
    return "deleted" if confirmed else "kept"


@mcp.tool()
async def multi_input(ctx: Ctx) -> str:
    """Ask two questions at once (after a second of work)."""
    await anyio.sleep(1)
    names: dict[str, str] = {}

    async def ask(key: str, question: str) -> None:
        answer = await ctx.elicit(question, Name)
        names[key] = answer.data.name if answer.action == "accept" else answer.action

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask, "first", "First name?")
        tg.start_soon(ask, "second", "Second name?")
    return f"{names['first']} and {names['second']}"


@mcp.tool()
async def test_tool_with_task(ctx: Ctx) -> str:
    """Ask a name at once, then work for two seconds and greet it."""
    answer = await ctx.elicit("Your name?", Name)
    name = answer.data.name if answer.action == "accept" else "nobody"
    await anyio.sleep(2)
    return f"Hello, {name}!"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve on 127.0.0.1:PORT/mcp")
    args = parser.parse_args()
    if args.http is None:
        mcp.run("stdio")
        return
    mcp.settings.host = "127.0.0.1"
    mcp.settings.port = args.http
    mcp.settings.log_level = "WARNING"
    mcp.run("streamable-http")


if __name__ == "__main__":
    main()
