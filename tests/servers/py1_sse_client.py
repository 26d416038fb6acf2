"""A legacy client over the deprecated HTTP+SSE transport (mcp 1.30
`mcp.client.sse.sse_client` and `ClientSession`): initialize, list tools,
call `echo`, `progress` (with a progress callback), `ask_name` (answering
the server's elicitation with `{"name": "Ada"}`), `summarize` (answering its
sampling request), `list_my_roots` (answering roots/list), subscribe to
`notes://sse` and wait for its `notifications/resources/updated` after
`add_note`, set the log level to warning and call `log_levels`, and cancel
a `slow` call; prints the outcome as one JSON line.

    .peers/py1/bin/python tests/servers/py1_sse_client.py http://HOST:PORT/sse
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
from mcp.shared.session import RequestResponder
from mcp.types import (
    ClientResult,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsResult,
    Root,
    ServerNotification,
    ServerRequest,
    TextContent,
)
from pydantic import AnyUrl, FileUrl

ASKED: list[str] = []
ROOT = "file:///srv/sse-root"


async def elicit(context: RequestContext[Any, Any], params: ElicitRequestParams) -> ElicitResult:
    ASKED.append("elicitation/create")
    return ElicitResult(action="accept", content={"name": "Ada"})


async def sample(
    context: RequestContext[Any, Any], params: CreateMessageRequestParams
) -> CreateMessageResult:
    ASKED.append("sampling/createMessage")
    asked = params.messages[0].content
    text = asked.text if isinstance(asked, TextContent) else "?"
    return CreateMessageResult(
        role="assistant",
        content=TextContent(type="text", text=f"sampled({text})"),
        model="sse-test-model",
    )


async def roots(context: RequestContext[Any, Any]) -> ListRootsResult:
    ASKED.append("roots/list")
    return ListRootsResult(roots=[Root(uri=FileUrl(ROOT), name="sse")])


def texts(result: Any) -> list[str]:
    return [c.text for c in result.content if isinstance(c, TextContent)]


class Updates:
    """The resources/updated and log notifications the session hands over."""

    def __init__(self) -> None:
        self.uris: list[str] = []
        self.levels: list[str] = []
        self.arrived = anyio.Event()

    async def handle(
        self,
        message: RequestResponder[ServerRequest, ClientResult] | ServerNotification | Exception,
    ) -> None:
        if isinstance(message, ServerNotification):
            root = message.root
            if root.method == "notifications/resources/updated":
                self.uris.append(str(root.params.uri))
                self.arrived.set()
            elif root.method == "notifications/message":
                self.levels.append(root.params.level)


async def run(url: str) -> dict[str, Any]:
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    updates = Updates()
    out: dict[str, Any] = {}
    async with (
        sse_client(url, timeout=10, sse_read_timeout=60) as (read, write),
        ClientSession(
            read,
            write,
            elicitation_callback=elicit,
            sampling_callback=sample,
            list_roots_callback=roots,
            message_handler=updates.handle,
        ) as session,
    ):
        init = await session.initialize()
        out["protocolVersion"] = init.protocolVersion
        out["server"] = init.serverInfo.name
        tools = await session.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        out["echo"] = texts(await session.call_tool("echo", {"text": "hi"}))
        done = await session.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
        out["progress"] = {"text": texts(done), "seen": progress}
        out["ask_name"] = texts(await session.call_tool("ask_name", {}))
        out["summarize"] = texts(await session.call_tool("summarize", {"text": "abc"}))
        out["roots"] = texts(await session.call_tool("list_my_roots", {}))
        out["asked"] = ASKED
        # A resource subscription: the update comes on the SSE stream.
        await session.subscribe_resource(AnyUrl("notes://sse"))
        await session.call_tool("add_note", {"name": "sse", "text": "one"})
        with anyio.move_on_after(10):
            await updates.arrived.wait()
        out["updated"] = updates.uris
        # Logging: the level the client sets holds for what reaches it.
        await session.set_logging_level("warning")
        out["log_levels"] = texts(await session.call_tool("log_levels", {}))
        out["logged"] = updates.levels
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
    out = anyio.run(run, sys.argv[1])
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
