"""MRTR fixture client on `mcp.Client` from mcp==2.3.0 (dual era).

    .peers/py2/bin/python compat_matrix/peers/py2_mrtr_client.py [--mode auto|legacy|2026-07-28] \
        [--feature elicitation-form|elicitation-url|sampling|roots|all|elicitation-url-required] \
        [--elicit-action accept|decline|cancel] [--timeout S] \
        (--url URL | -- SERVER_COMMAND ARGS...)

Registers elicitation, sampling and roots callbacks, so the client declares
those capabilities, then calls the server's tool for each feature and checks
that the result carries the callback's answer. In a legacy session the server
pushes its requests to the callbacks; in a modern one the SDK receives
`input_required` and drives the retries itself through the same callbacks.
A -32042 error (URL elicitation required, legacy servers) is handled the
2025-11-25 way: "open" its links, then retry the call once. `era` in the
report is where the client ended up; each call's step lists the requests the
callbacks saw. `--url URL` connects over Streamable HTTP instead.
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
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
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
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from py2_client import target
from pydantic import FileUrl


class Callbacks:
    """The client's answers; records every request it is asked."""

    def __init__(self, action: str) -> None:
        self.action = action
        self.seen: list[dict[str, Any]] = []

    async def elicit(
        self, context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult:
        url = isinstance(params, ElicitRequestURLParams)
        seen: dict[str, Any] = {"method": "elicitation/create", "mode": "url" if url else "form"}
        if isinstance(params, ElicitRequestURLParams):
            seen |= {"url": params.url, "elicitationId": params.elicitation_id}
        self.seen.append(seen | {"request_id": context.request_id})
        return ElicitResult.model_validate(elicit_answer(self.action, seen["mode"]))

    def url_required(self, data: Any) -> None:
        """A -32042 error's elicitations: the user is sent to each URL; no answer goes back."""
        links = data.get("elicitations", []) if isinstance(data, dict) else []
        for link in links:
            self.seen.append({"method": "-32042", "url": link.get("url")})

    async def sample(
        self, context: ClientRequestContext, params: CreateMessageRequestParams
    ) -> CreateMessageResult:
        self.seen.append({"method": "sampling/createMessage", "request_id": context.request_id})
        return CreateMessageResult(
            role="assistant",
            content=TextContent(type="text", text=SAMPLED_TEXT),
            model="py2-mrtr-client",
            stop_reason="endTurn",
        )

    async def roots(self, context: ClientRequestContext) -> ListRootsResult:
        self.seen.append({"method": "roots/list", "request_id": context.request_id})
        return ListRootsResult(roots=[Root(uri=FileUrl(ROOT_URI), name=ROOT_NAME)])


async def call_tool(
    client: Client, callbacks: Callbacks, tool: str, arguments: dict[str, Any]
) -> CallToolResult:
    """tools/call; on -32042 (URL elicitation required) "open" the links, then retry once."""
    try:
        return await client.call_tool(tool, arguments)
    except MCPError as exc:
        if exc.error.code != URL_ELICITATION_REQUIRED:
            raise
        callbacks.url_required(exc.error.data)
    return await client.call_tool(tool, arguments)


async def converse(client: Client, callbacks: Callbacks, opts: Options, report: Report) -> None:
    version = client.protocol_version
    report.era = "modern" if version in MODERN_PROTOCOL_VERSIONS else "legacy"
    via = "server/discover" if client.session.discover_result is not None else "initialize"
    report.step("connect", True, protocolVersion=version, via=via)

    names = {tool.name for tool in (await client.list_tools()).tools}
    kind = server_kind(names)
    report.step("tools/list", kind != "unknown", server=kind, tools=sorted(names))

    for feature in opts.features:
        call = plan(kind, feature, opts.action)
        if not report.step(f"{feature}: {call.tool} listed", call.tool in names):
            continue
        before = len(callbacks.seen)
        try:
            result = await call_tool(client, callbacks, call.tool, call.arguments)
        except (MCPError, RuntimeError) as exc:  # RuntimeError: rounds exceeded
            error = exc.error.model_dump() if isinstance(exc, MCPError) else str(exc)
            report.step(f"{feature}: {call.tool}", False, error=error)
            continue
        text = all_text([block.model_dump() for block in result.content])
        report.step(
            f"{feature}: {call.tool}",
            result_matches(call, opts.action, text, bool(result.is_error)),
            text=text,
            isError=result.is_error,
            callbacks=callbacks.seen[before:],
        )


async def run(opts: Options, report: Report) -> None:
    callbacks = Callbacks(opts.action)
    with anyio.fail_after(opts.timeout):
        async with Client(
            target(opts.server, opts.url),
            mode=opts.mode,
            elicitation_callback=callbacks.elicit,
            sampling_callback=callbacks.sample,
            list_roots_callback=callbacks.roots,
        ) as client:
            await converse(client, callbacks, opts, report)


def main() -> None:
    opts = parse_args(__doc__.splitlines()[0], modes=True)
    report = Report()
    start_watchdog(report, opts.timeout)
    try:
        anyio.run(run, opts, report)
    except BaseException as group:
        exc = leaf_exception(group)
        if isinstance(exc, MCPError):
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
