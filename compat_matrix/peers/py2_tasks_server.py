"""Modern-only fixture server with the tasks extension (`io.modelcontextprotocol/tasks`,
SEP-2663), on mcp==2.3.0's extension hooks: the SDK ships no tasks, so this
is the project's own minimal implementation, the modern tasks upstream of
the gateway's tests (issue #16).

    .peers/py2/bin/python compat_matrix/peers/py2_tasks_server.py            # stdio
    .peers/py2/bin/python compat_matrix/peers/py2_tasks_server.py --http PORT

Modern-only as py2_modern_server.py is (its filters are reused). Its
discover declares the extension; to a request that declares it too, the
task tools answer with a task (`resultType: "task"`), served by `tasks/get`,
`tasks/update` and `tasks/cancel`; without it they answer at once, except
the `required` ones, which answer -32021. Tools (the names the conformance
suite's tasks-* scenarios call):

- greet {name}: never a task.
- slow_compute {seconds, label}: a task that sleeps, then completes.
- failing_job: required; the tool fails: `completed` with `isError`.
- protocol_error_job: a task that fails with a JSON-RPC error: `failed`.
- confirm_delete {filename}: a task that asks a yes/no elicitation (input
  during the task: `input_required`, answered by `tasks/update`).
- multi_input: a task that asks two questions at once.
- test_tool_with_task: required; an MRTR round first (its name), then a task.
- tasks_cancelled: never a task; how many tasks `tasks/cancel` stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import anyio
import py2_modern_server as modern  # the script's directory is on sys.path
from mcp.server.mcpserver import Extension, MCPServer, MethodBinding, require_client_extension
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams, RequestParams

EXT = "io.modelcontextprotocol/tasks"
TASK_TOOLS = {
    "slow_compute",
    "failing_job",
    "protocol_error_job",
    "confirm_delete",
    "multi_input",
    "test_tool_with_task",
}
REQUIRED = {"failing_job", "test_tool_with_task"}
TTL_MS, POLL_MS = 60_000, 100

TASKS: dict[str, dict[str, Any]] = {}
WAITERS: dict[str, dict[str, asyncio.Future[Any]]] = {}  # task id -> input key -> answer
RUNNING: dict[str, asyncio.Task[None]] = {}
CANCELLED: list[str] = []


def now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class TaskIdParams(RequestParams):
    taskId: str


class UpdateParams(RequestParams):
    taskId: str
    inputResponses: dict[str, Any] = {}  # noqa: RUF012 (pydantic copies a default per instance)


def known(task_id: str) -> dict[str, Any]:
    task = TASKS.get(task_id)
    if task is None:
        raise MCPError(code=-32602, message=f"Task not found: {task_id}")
    return task


async def tasks_get(ctx: Any, params: TaskIdParams) -> dict[str, Any]:
    require_client_extension(ctx, EXT)
    return {"resultType": "complete", **known(params.taskId)}


async def tasks_update(ctx: Any, params: UpdateParams) -> dict[str, Any]:
    require_client_extension(ctx, EXT)
    task = known(params.taskId)
    for key, answer in params.inputResponses.items():  # unknown or answered keys: ignored
        waiter = WAITERS.get(params.taskId, {}).pop(key, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)
            task.get("inputRequests", {}).pop(key, None)
    if task["status"] == "input_required" and not task.get("inputRequests"):
        task.pop("inputRequests", None)
        task.update(status="working", lastUpdatedAt=now())
    return {"resultType": "complete"}


async def tasks_cancel(ctx: Any, params: TaskIdParams) -> dict[str, Any]:
    require_client_extension(ctx, EXT)
    task = known(params.taskId)
    if task["status"] in ("working", "input_required"):
        running = RUNNING.pop(params.taskId, None)
        if running is not None:
            running.cancel()
        task.pop("inputRequests", None)
        task.update(status="cancelled", lastUpdatedAt=now())
        CANCELLED.append(params.taskId)
    return {"resultType": "complete"}


def elicit(message: str, field: str, kind: str = "string") -> dict[str, Any]:
    schema = {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}
    return {
        "method": "elicitation/create",
        "params": {"mode": "form", "message": message, "requestedSchema": schema},
    }


async def ask(task_id: str, requests: dict[str, Any]) -> dict[str, Any]:
    """The task waits in input_required until tasks/update answers every key."""
    task = TASKS[task_id]
    loop = asyncio.get_running_loop()
    waiters = {key: loop.create_future() for key in requests}
    WAITERS.setdefault(task_id, {}).update(waiters)
    task.setdefault("inputRequests", {}).update(requests)
    task.update(status="input_required", lastUpdatedAt=now())
    return {key: await waiter for key, waiter in waiters.items()}


def text_result(text: str) -> dict[str, Any]:
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": {"result": text},
        "isError": False,
    }


class TasksExtension(Extension):
    identifier = EXT

    def methods(self) -> list[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskIdParams, tasks_get),
            MethodBinding("tasks/update", UpdateParams, tasks_update),
            MethodBinding("tasks/cancel", TaskIdParams, tasks_cancel),
        ]

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: Any, call_next: Any
    ) -> Any:
        caps = ctx.session.client_capabilities
        declared = bool(caps and caps.extensions and EXT in caps.extensions)
        if params.name in REQUIRED:
            require_client_extension(ctx, EXT)  # -32021, data.requiredCapabilities
        if params.name not in TASK_TOOLS or not declared:
            return await call_next(ctx)
        gathered = None
        if params.name == "test_tool_with_task":  # an MRTR round first, then the task
            answer = (params.input_responses or {}).get("user_name")
            if answer is None:
                return {
                    "resultType": "input_required",
                    "inputRequests": {"user_name": elicit("Your name?", "name")},
                }
            if hasattr(answer, "model_dump"):
                answer = answer.model_dump(by_alias=True, exclude_none=True)
            gathered = (answer.get("content") or {}).get("name")
        task_id, created = str(uuid.uuid4()), now()
        task: dict[str, Any] = {
            "taskId": task_id,
            "status": "working",
            "createdAt": created,
            "lastUpdatedAt": created,
            "ttlMs": TTL_MS,
            "pollIntervalMs": POLL_MS,
        }
        TASKS[task_id] = task

        async def work() -> dict[str, Any]:
            arguments = params.arguments or {}
            if params.name == "confirm_delete":
                key = f"confirm-{uuid.uuid4().hex[:8]}"
                question = elicit(f"Delete {arguments.get('filename')}?", "confirm", "boolean")
                answers = await ask(task_id, {key: question})
                accepted = answers[key].get("action") == "accept"
                return text_result("deleted" if accepted else "kept")
            if params.name == "multi_input":
                answers = await ask(
                    task_id,
                    {
                        f"a-{uuid.uuid4().hex[:8]}": elicit("First?", "name"),
                        f"b-{uuid.uuid4().hex[:8]}": elicit("Second?", "name"),
                    },
                )
                return text_result(json.dumps(answers, sort_keys=True))
            if params.name == "test_tool_with_task":
                await asyncio.sleep(0.2)
                return text_result(f"Hello, {gathered}!")
            if params.name == "protocol_error_job":
                raise MCPError(code=-32603, message="boom")
            result = await call_next(ctx)
            if hasattr(result, "model_dump"):
                result = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            result.pop("resultType", None)
            return dict(result)

        async def run() -> None:
            try:
                result = await work()
                task.update(status="completed", result=result, lastUpdatedAt=now())
            except MCPError as exc:
                error = {"code": exc.error.code, "message": exc.error.message}
                task.update(status="failed", error=error, lastUpdatedAt=now())
            finally:
                RUNNING.pop(task_id, None)

        RUNNING[task_id] = asyncio.get_running_loop().create_task(run())
        return {"resultType": "task", **task}


mcp = MCPServer("py2-tasks-fixture", extensions=[TasksExtension()])


@mcp.tool()
def greet(name: str) -> str:
    """Say hello (never a task)."""
    return f"Hello, {name}!"


@mcp.tool()
async def slow_compute(seconds: float = 1, label: str = "") -> str:
    """Sleep, then answer (a task when the client declares the extension)."""
    await asyncio.sleep(seconds)
    return f"computed {label} after {seconds}s"


@mcp.tool()
async def failing_job() -> str:
    """A required task tool whose work fails: completed with isError."""
    await asyncio.sleep(0.3)
    raise ValueError("job failed")


@mcp.tool()
async def protocol_error_job() -> str:
    """A task that fails with a JSON-RPC error."""
    return "unreachable"


@mcp.tool()
async def confirm_delete(filename: str) -> str:
    """Asks to confirm during the task."""
    return f"sync path: would delete {filename}"


@mcp.tool()
async def multi_input() -> str:
    """Asks two questions during the task."""
    return "sync path"


@mcp.tool()
async def test_tool_with_task() -> str:
    """An MRTR round, then a task."""
    return "sync path"


@mcp.tool()
def tasks_cancelled() -> str:
    """How many tasks tasks/cancel stopped, and their ids."""
    return json.dumps(CANCELLED)


async def run_stdio() -> None:
    server = mcp._lowlevel_server  # pyright: ignore[reportPrivateUsage]
    async with stdio_server() as (read_stream, write_stream):
        await server.run(
            modern.ModernOnlyReadStream(read_stream, write_stream),
            write_stream,
            server.create_initialization_options(),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT/mcp"
    )
    args = parser.parse_args()
    if args.http is None:
        anyio.run(run_stdio)
        return
    import uvicorn

    app = modern.modern_only_http(mcp.streamable_http_app(host="127.0.0.1"))
    uvicorn.run(app, host="127.0.0.1", port=args.http, log_level="warning")


if __name__ == "__main__":
    main()
