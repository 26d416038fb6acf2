"""Legacy MRTR fixture client: `ClientSession` + `stdio_client` from mcp==1.30.0.

    .peers/py1/bin/python compat_matrix/peers/py1_mrtr_client.py \
        [--feature elicitation-form|elicitation-url|sampling|roots|all|elicitation-url-required] \
        [--elicit-action accept|decline|cancel] [--timeout S] \
        (--url URL | --sse-url URL | -- SERVER_COMMAND ARGS...)

Registers elicitation, sampling and list_roots callbacks, so `initialize`
declares those capabilities, then calls the server's tool for each feature
and checks that the result carries the callback's answer. The server (or the
gateway in front of a modern server) must push `elicitation/create`,
`sampling/createMessage` and `roots/list` requests: a legacy client cannot
handle `input_required`. A -32042 error (URL elicitation required) is handled
the 2025-11-25 way: "open" its links, then retry the call once. Each call's
step lists the requests the callbacks saw. `--url URL` speaks Streamable HTTP to that endpoint (a
legacy session; the server's requests arrive on the POST's SSE stream); `--sse-url URL`
the deprecated HTTP+SSE transport (the server's requests arrive on the GET event stream,
the client's answers go out as POSTs to the endpoint it named).
"""

from __future__ import annotations

from typing import Any

import anyio
from _common import Report, leaf_exception, start_watchdog
from _mrtr_common import (
    ROOT_NAME,
    ROOT_URI,
    SAMPLED_TEXT,
    URL_ELICITATION_REQUIRED,
    Options,
    all_text,
    elicit_answer,
    parse_args,
    plan,
    result_matches,
    server_kind,
)
from mcp import ClientSession
from mcp.shared.context import RequestContext
from mcp.shared.exceptions import McpError
from mcp.types import (
    CallToolResult,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
    ListRootsResult,
    Root,
    TextContent,
)
from py1_client import connect
from pydantic import FileUrl

Ctx = RequestContext[ClientSession, Any]


class Callbacks:
    """The client's answers; records every request it is asked."""

    def __init__(self, action: str) -> None:
        self.action = action
        self.seen: list[dict[str, Any]] = []
        self.done = False  # every check ran; the session is closing

    async def elicit(self, context: Ctx, params: ElicitRequestParams) -> ElicitResult:
        url = isinstance(params, ElicitRequestURLParams)
        seen: dict[str, Any] = {"method": "elicitation/create", "mode": "url" if url else "form"}
        if isinstance(params, ElicitRequestURLParams):
            seen |= {"url": params.url, "elicitationId": params.elicitationId}
        self.seen.append(seen | {"request_id": context.request_id})
        return ElicitResult.model_validate(elicit_answer(self.action, seen["mode"]))

    def url_required(self, data: Any) -> None:
        """A -32042 error's elicitations: the user is sent to each URL; no answer goes back."""
        links = data.get("elicitations", []) if isinstance(data, dict) else []
        for link in links:
            self.seen.append({"method": "-32042", "url": link.get("url")})

    async def sample(self, context: Ctx, params: CreateMessageRequestParams) -> CreateMessageResult:
        self.seen.append({"method": "sampling/createMessage", "request_id": context.request_id})
        return CreateMessageResult(
            role="assistant",
            content=TextContent(type="text", text=SAMPLED_TEXT),
            model="py1-mrtr-client",
            stopReason="endTurn",
        )

    async def roots(self, context: Ctx) -> ListRootsResult:
        self.seen.append({"method": "roots/list", "request_id": context.request_id})
        return ListRootsResult(roots=[Root(uri=FileUrl(ROOT_URI), name=ROOT_NAME)])


async def call_tool(
    session: ClientSession, callbacks: Callbacks, tool: str, arguments: dict[str, Any]
) -> CallToolResult:
    """tools/call; on -32042 (URL elicitation required) "open" the links, then retry once."""
    try:
        return await session.call_tool(tool, arguments)
    except McpError as exc:
        if exc.error.code != URL_ELICITATION_REQUIRED:
            raise
        callbacks.url_required(exc.error.data)
    return await session.call_tool(tool, arguments)


async def converse(
    session: ClientSession, callbacks: Callbacks, opts: Options, report: Report
) -> None:
    init = await session.initialize()
    report.step(
        "initialize",
        True,
        protocolVersion=init.protocolVersion,
        serverInfo=init.serverInfo.model_dump(exclude_none=True),
    )
    names = {tool.name for tool in (await session.list_tools()).tools}
    kind = server_kind(names)
    report.step("tools/list", kind != "unknown", server=kind, tools=sorted(names))

    for feature in opts.features:
        call = plan(kind, feature, opts.action)
        if not report.step(f"{feature}: {call.tool} listed", call.tool in names):
            continue
        before = len(callbacks.seen)
        try:
            result = await call_tool(session, callbacks, call.tool, call.arguments)
        except McpError as exc:
            report.step(f"{feature}: {call.tool}", False, error=exc.error.model_dump())
            continue
        text = all_text([block.model_dump() for block in result.content])
        report.step(
            f"{feature}: {call.tool}",
            result_matches(call, opts.action, text, result.isError),
            text=text,
            isError=result.isError,
            callbacks=callbacks.seen[before:],
        )


async def run(opts: Options, callbacks: Callbacks, report: Report) -> None:
    with anyio.fail_after(opts.timeout):
        async with (
            connect(opts.server, opts.url, opts.sse_url) as (read, write),
            ClientSession(
                read,
                write,
                elicitation_callback=callbacks.elicit,
                sampling_callback=callbacks.sample,
                list_roots_callback=callbacks.roots,
            ) as session,
        ):
            await converse(session, callbacks, opts, report)
            callbacks.done = True


def main() -> None:
    opts = parse_args(__doc__.splitlines()[0], sse=True)
    report = Report(era="legacy")
    callbacks = Callbacks(opts.action)
    start_watchdog(report, opts.timeout)
    try:
        anyio.run(run, opts, callbacks, report)
    except BaseException as group:
        exc = leaf_exception(group)
        if callbacks.done and isinstance(exc, anyio.BrokenResourceError):
            # mcp 1.30 quirk: a server request that arrives while the session closes
            # (server-everything asks for roots 350 ms after `initialized`) is
            # answered on the closed stream, and the error leaves `ClientSession`.
            report.step("server request during shutdown ignored", True, error=repr(exc))
        elif isinstance(exc, McpError):
            report.step(
                "error", False, code=exc.error.code, message=exc.error.message, data=exc.error.data
            )
            report.fail(f"JSON-RPC error {exc.error.code}: {exc.error.message}")
        elif isinstance(exc, TimeoutError):
            report.fail(f"timeout after {opts.timeout:.0f}s")
        else:
            report.fail(f"{type(exc).__name__}: {exc}")
    report.finish()


if __name__ == "__main__":
    main()
