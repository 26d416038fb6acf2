"""A legacy client using the 2025-11-25 experimental tasks itself (mcp 1.30
`ClientSession.experimental`): through the gateway to a modern server with
the tasks extension (issue #16: "the gateway presents 2025-11-25 tasks ... on
top of the modern extension"). Prints one JSON line.

    .peers/py1/bin/python tests/servers/py1_legacy_tasks_client.py -- COMMAND [ARG...]
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.context import RequestContext
from mcp.shared.exceptions import McpError
from mcp.types import CallToolResult, ElicitRequestParams, ElicitResult, TextContent


async def elicit(context: RequestContext[Any, Any], params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="accept", content={"confirm": True})


def texts(result: Any) -> list[str]:
    return [c.text for c in result.content if isinstance(c, TextContent)]


async def run(command: list[str]) -> None:
    server = StdioServerParameters(command=command[0], args=command[1:])
    out: dict[str, Any] = {}
    async with (
        stdio_client(server) as (read, write),
        ClientSession(read, write, elicitation_callback=elicit) as session,
    ):
        init = await session.initialize()
        out["tasks_capability"] = init.capabilities.model_dump(exclude_none=True).get("tasks")
        tools = await session.list_tools()
        support = {t.name: t.execution.taskSupport if t.execution else None for t in tools.tools}
        out["task_support"] = support.get("slow_compute")
        tasks = session.experimental
        created = await tasks.call_tool_as_task("slow_compute", {"seconds": 1, "label": "t"})
        task_id = created.task.taskId
        out["created"] = created.task.status
        statuses = [status.status async for status in tasks.poll_task(task_id)]
        out["statuses"] = sorted(set(statuses))
        result = await tasks.get_task_result(task_id, CallToolResult)
        out["result"] = texts(result)
        confirm = await tasks.call_tool_as_task("confirm_delete", {"filename": "a.txt"})
        out["confirm"] = texts(await tasks.get_task_result(confirm.task.taskId, CallToolResult))
        stuck = await tasks.call_tool_as_task("slow_compute", {"seconds": 60})
        cancelled = await tasks.cancel_task(stuck.task.taskId)
        out["cancelled"] = cancelled.status
        stopped: list[str] = []
        with anyio.move_on_after(10):
            while not stopped:  # the server's own task is cancelled shortly after
                listed_upstream = await session.call_tool("tasks_cancelled", {})
                stopped = json.loads(texts(listed_upstream)[0])
                if not stopped:
                    await anyio.sleep(0.1)
        out["cancelled_upstream"] = len(stopped)
        listed = await tasks.list_tasks()
        out["listed"] = sorted(t.status for t in listed.tasks)
        try:
            await tasks.get_task("no-such-task")
            out["unknown"] = "found"
        except McpError as exc:
            out["unknown"] = exc.error.code
        out["plain"] = texts(await session.call_tool("greet", {"name": "Ada"}))
        print(json.dumps(out), flush=True)


def main() -> None:
    args = sys.argv[1:]
    anyio.run(run, args[args.index("--") + 1 :])


if __name__ == "__main__":
    main()
