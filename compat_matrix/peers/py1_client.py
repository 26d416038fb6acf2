"""Legacy-era fixture client: `ClientSession` + `stdio_client` from mcp==1.30.0.

    .peers/py1/bin/python compat_matrix/peers/py1_client.py [--feature F] [--timeout S] \
        (-- SERVER... | --url URL | --sse-url URL)

With `--url` it speaks Streamable HTTP (`streamable_http_client`: a legacy
session, `initialize` mints the Mcp-Session-Id, DELETE at the end) instead of
spawning the server. With `--sse-url` it speaks the deprecated HTTP+SSE
transport (`sse_client`): GET URL opens the event stream, whose first
`endpoint` event names where to POST; every response and server request
arrives on that stream.

The "Legacy" client of the compatibility matrix: initialize handshake, then
tools/list, `echo` (our fixtures take `text`, server-everything's takes
`message`) and `add` when the server has it. Against a modern-only server
the handshake fails: the report carries the server's JSON-RPC error.

`--feature notifications` then checks change notifications the legacy way:
`resources/subscribe`, tool calls that change the resource and the tool list,
and `notifications/resources/updated` and `notifications/tools/list_changed`
reaching the session's `message_handler` (stdio; over HTTP the session's GET
stream, which the SDK opens after `initialized`; over HTTP+SSE the event
stream), then `resources/unsubscribe`.

`--feature tasks` calls the task tools instead of echo, as a legacy client
that knows no tasks: `slow_compute {seconds: 2}` must answer "computed
matrix", and `confirm_delete`, whose server asks a yes/no elicitation during
the call (the client declares elicitation and accepts with confirm: true),
must answer "deleted"; `test_tool_with_task`, which asks a name first (the
client answers "Alice"), then works two seconds, must answer "Hello, Alice".
Through the gateway to a modern server offering `io.modelcontextprotocol/tasks`,
the server answers with tasks that the gateway polls, passing the task's
input request on as an elicitation; that server's `test_tool_with_task`
requires the extension (-32021 without it), so its answer shows that the
gateway declared it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from _common import (
    ECHO_TEXT,
    TASKS_STEP,
    Report,
    Trigger,
    echo_arguments,
    first_text,
    leaf_exception,
    parse_args,
    start_watchdog,
)
from _sdk_notify import Inbox, legacy_check
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.context import RequestContext
from mcp.shared.exceptions import McpError
from mcp.shared.message import SessionMessage
from pydantic import AnyUrl

Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]


# mcp 1.30's sse_client gives every HTTP request (the GET that opens the stream,
# each POST) 5 s by default; a gateway on a loaded machine can take longer.
SSE_HTTP_TIMEOUT = 15.0


@asynccontextmanager
async def connect(
    command: list[str], url: str | None, sse_url: str | None = None
) -> AsyncIterator[Streams]:
    """The session's streams: HTTP+SSE to `sse_url`, Streamable HTTP to `url`,
    else a spawned stdio server."""
    if sse_url is not None:
        async with sse_client(sse_url, timeout=SSE_HTTP_TIMEOUT) as (read, write):
            yield read, write
        return
    if url is not None:
        async with streamable_http_client(url) as (read, write, _session_id):
            yield read, write
        return
    # stdio_client passes only a few default variables unless told otherwise;
    # hand the whole environment through (MCP_PEERS_DIR, PATH of the venvs, ...).
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        yield read, write


async def converse(
    session: ClientSession,
    report: Report,
    feature: str = "basic",
    inbox: Inbox | None = None,
    channel: str = "stdio",
) -> None:
    init = await session.initialize()
    report.step(
        "initialize",
        True,
        protocolVersion=init.protocolVersion,
        serverInfo=init.serverInfo.model_dump(exclude_none=True),
    )

    listed = await session.list_tools()
    tools: dict[str, dict[str, Any]] = {
        t.name: t.model_dump(exclude_none=True) for t in listed.tools
    }
    report.step("tools/list", True, tools=sorted(tools))
    if feature == "tasks":
        await check_tasks(session, report, sorted(tools))
        return
    if not report.step("echo tool listed", "echo" in tools):
        return

    result = await session.call_tool("echo", echo_arguments(tools["echo"]))
    content = [block.model_dump() for block in result.content]
    text = first_text(content)
    report.step(
        "tools/call echo", text is not None and ECHO_TEXT in text and not result.isError, text=text
    )

    if "add" in tools:
        result = await session.call_tool("add", {"a": 2, "b": 3})
        structured = result.structuredContent
        text = first_text([block.model_dump() for block in result.content])
        value = structured.get("result") if structured else text
        report.step(
            "tools/call add",
            str(value) == "5" and not result.isError,
            structuredContent=structured,
            text=text,
        )

    if feature == "notifications" and inbox is not None:

        async def resource_uris() -> list[str]:
            return [str(r.uri) for r in (await session.list_resources()).resources]

        async def call(trigger: Trigger) -> tuple[bool, str | None]:
            result = await session.call_tool(trigger.tool, trigger.arguments)
            return not result.isError, first_text([b.model_dump() for b in result.content])

        await legacy_check(
            report,
            inbox,
            sorted(tools),
            resource_uris=resource_uris,
            subscribe=lambda uri: session.subscribe_resource(AnyUrl(uri)),
            unsubscribe=lambda uri: session.unsubscribe_resource(AnyUrl(uri)),
            call=call,
            channel=channel,
        )


# The elicitations the server (or the gateway, for a task's input) asked during the run.
ASKED: list[str] = []


async def elicit(
    context: RequestContext[ClientSession, Any], params: types.ElicitRequestParams
) -> types.ElicitResult:
    """Accept a form elicitation: every boolean field true, any other "Alice"."""
    ASKED.append(params.message)
    schema = getattr(params, "requestedSchema", None) or {}
    fields = schema.get("properties", {})
    content: dict[str, str | int | float | bool | list[str] | None] = {
        name: True if spec.get("type") == "boolean" else "Alice" for name, spec in fields.items()
    }
    return types.ElicitResult(action="accept", content=content)


async def check_tasks(session: ClientSession, report: Report, tools: list[str]) -> None:
    """The tasks check of a legacy client: ordinary answers to slow calls."""
    wanted = ("slow_compute", "confirm_delete", "test_tool_with_task")
    if not report.step(f"{TASKS_STEP}task tools listed", all(t in tools for t in wanted)):
        return
    calls = (
        ("slow_compute", {"seconds": 2, "label": "matrix"}, "computed matrix"),
        ("confirm_delete", {"filename": "matrix.txt"}, "deleted"),
        ("test_tool_with_task", {}, "Hello, Alice"),
    )
    for tool, arguments, expect in calls:
        started = anyio.current_time()
        result = await session.call_tool(tool, arguments)
        text = first_text([block.model_dump() for block in result.content])
        report.step(
            f"{TASKS_STEP}tools/call {tool}",
            text is not None and expect in text and not result.isError,
            text=text,
            seconds=round(anyio.current_time() - started, 2),
        )
    report.step(f"{TASKS_STEP}one elicitation per asking call", len(ASKED) == 2, asked=ASKED)
    report.step(
        f"{TASKS_STEP}path", True, path=f"ordinary results; elicitations asked: {len(ASKED)}"
    )


async def run(
    command: list[str], url: str | None, sse_url: str | None, report: Report, feature: str
) -> None:
    inbox = Inbox()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ServerNotification):
            inbox.add(message.root.model_dump(by_alias=True, mode="json", exclude_none=True))

    async with (
        connect(command, url, sse_url) as (read, write),
        ClientSession(
            read,
            write,
            message_handler=on_message,
            elicitation_callback=elicit if feature == "tasks" else None,
        ) as session,
    ):
        channel = (
            "the HTTP+SSE event stream"
            if sse_url
            else "the session's GET stream"
            if url
            else "stdio"
        )
        await converse(session, report, feature, inbox, channel)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], sse=True)
    report = Report(era="legacy")
    start_watchdog(report, args.timeout)
    try:
        # fail_after cancels the whole run; stdio_client's exit then reaps the server.
        anyio.run(
            _with_deadline,
            args.server,
            args.url,
            args.sse_url,
            report,
            args.timeout,
            args.feature,
        )
    except BaseException as group:
        exc = leaf_exception(group)
        if isinstance(exc, McpError):
            report.step(
                "error", False, code=exc.error.code, message=exc.error.message, data=exc.error.data
            )
            report.fail(f"JSON-RPC error {exc.error.code}: {exc.error.message}")
        elif isinstance(exc, TimeoutError):
            report.fail(f"timeout after {args.timeout:.0f}s")
        else:
            report.fail(f"{type(exc).__name__}: {exc}")
    report.finish()


async def _with_deadline(
    command: list[str],
    url: str | None,
    sse_url: str | None,
    report: Report,
    seconds: float,
    feature: str,
) -> None:
    with anyio.fail_after(seconds):
        await run(command, url, sse_url, report, feature)


if __name__ == "__main__":
    main()
