"""Dual-era fixture client: `mcp.Client` from mcp==2.3.0.

    .peers/py2/bin/python compat_matrix/peers/py2_client.py [--mode auto|legacy|2026-07-28] \
        [--feature basic|notifications] [--timeout S] (--url URL | -- SERVER_COMMAND ARGS...)

The "Dual-era" client of the compatibility matrix. In the default `auto`
mode the SDK probes `server/discover` (10 s probe timeout) and falls back to
`initialize` on any error other than a disjoint -32022; `era` in the report
says where it ended up, read from the negotiated `Client.protocol_version`.
Then tools/list and `echo` (`add` too when present). With `--url URL` the
`Client` is given the URL and speaks Streamable HTTP (over HTTP the probe is
a modern `server/discover` POST; a legacy server's 4xx makes it fall back).

`--feature notifications` then checks change notifications in the era the
client ended up in. Modern: `Client.listen(tools_list_changed=True,
resource_subscriptions=[uri])` must be acknowledged (the SDK waits for
`notifications/subscriptions/acknowledged`), the trigger tool calls must bring
`ResourceUpdated` and `ToolsListChanged` events on the subscription (the SDK
routes a frame to it by `_meta["io.modelcontextprotocol/subscriptionId"]`; the
copies it also hands `message_handler` show the tag), leaving the `listen`
block cancels it, and no change notification may arrive untagged. Legacy:
`subscribe_resource`, the notifications on `message_handler`, `unsubscribe_resource`.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Any

import anyio
from _common import (
    CHANGE_METHODS,
    DEFAULT_TIMEOUT,
    ECHO_TEXT,
    NOTIFY_STEP,
    NOTIFY_WAIT,
    Report,
    Trigger,
    add_feature_option,
    add_target_option,
    check_target,
    delivery_step,
    echo_arguments,
    first_text,
    leaf_exception,
    notify_plan,
    split_argv,
    start_watchdog,
    tag_of,
)
from _sdk_notify import Inbox, call_step, legacy_check
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import ResourceUpdated, ServerEvent, Subscription, ToolsListChanged
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

# subscribe_resource is deprecated as of 2026-07-28; a legacy session still uses it.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)


def parse_args() -> argparse.Namespace:
    # Same shape as _common.parse_args, plus --mode.
    own, server = split_argv(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--mode", default="auto", help="Client mode: auto (default), legacy, or a modern version"
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    add_feature_option(parser)
    add_target_option(parser)
    args = parser.parse_args(own)
    check_target(parser, args.url, server)
    args.server = server
    return args


def target(command: list[str], url: str | None) -> StdioServerParameters | str:
    """What `Client` connects to: the URL (Streamable HTTP), else the command
    with the whole environment (stdio_client only passes a few by default)."""
    if url is not None:
        return url
    return StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))


async def next_event(
    sub: Subscription, want: type[ServerEvent], seconds: float
) -> ServerEvent | None:
    """The next event of type `want` on the subscription (others are skipped)."""
    with anyio.move_on_after(seconds):
        async for event in sub:
            if isinstance(event, want):
                return event
    return None


async def modern_check(
    client: Client, report: Report, tools: list[str], echo: dict[str, Any], inbox: Inbox
) -> None:
    """The modern check with the SDK's listen() (see the module docstring)."""

    async def call(trigger: Trigger) -> tuple[bool, str | None]:
        result = await client.call_tool(trigger.tool, trigger.arguments)
        return not result.is_error, first_text([b.model_dump() for b in result.content])

    uris: list[str] = []
    if "add_note" not in tools:
        uris = [str(r.uri) for r in (await client.list_resources()).resources]
    plan = notify_plan(tools, uris)
    if not report.step(
        f"{NOTIFY_STEP}trigger tools listed", plan is not None, tools=None if plan else tools
    ):
        return
    assert plan is not None
    since = len(inbox.messages)
    async with client.listen(tools_list_changed=True, resource_subscriptions=[plan.uri]) as sub:
        honored = sub.honored.model_dump(by_alias=True, exclude_none=True)
        listen_id = sub.subscription_id
        report.step(
            f"{NOTIFY_STEP}listen acknowledged", True, subscriptionId=listen_id, honored=honored
        )
        enough = plan.uri in (sub.honored.resource_subscriptions or []) and (
            plan.list_change is None or sub.honored.tools_list_changed is True
        )
        report.step(f"{NOTIFY_STEP}filter honored", enough, honored=honored)
        path = [f"listen id {listen_id!r}", "acknowledged"]
        if not await call_step(report, call, plan.update):
            return
        updated = await next_event(sub, ResourceUpdated, NOTIFY_WAIT)
        report.step(
            f"{NOTIFY_STEP}ResourceUpdated on the subscription",
            isinstance(updated, ResourceUpdated) and updated.uri == plan.uri,
            event=repr(updated),
        )
        path.append(f"resources/updated {plan.uri}")
        if plan.list_change is not None:
            if not await call_step(report, call, plan.list_change):
                return
            changed = await next_event(sub, ToolsListChanged, NOTIFY_WAIT)
            report.step(
                f"{NOTIFY_STEP}ToolsListChanged on the subscription",
                changed is not None,
                event=repr(changed),
            )
            path.append("tools/list_changed")
        else:
            path.append("tools/list_changed: no trigger on this server")
        if plan.stop is not None:
            await call_step(report, call, plan.stop)
    # Leaving the block cancelled the listen; the client goes on working.
    if plan.stop is None:
        await call(plan.update)
    ok, _ = await call(Trigger("echo", echo))
    changes = [m for m in inbox.messages[since:] if m.get("method") in CHANGE_METHODS]
    tags = sorted({repr(tag_of(m)) for m in changes})
    report.step(f"{NOTIFY_STEP}listen cancelled", ok, how="left Client.listen()")
    path.append("cancelled (left the listen block)")
    # message_handler gets a copy of every change notification: all must carry the tag.
    report.step(
        f"{NOTIFY_STEP}every change notification tagged with the listen's id",
        bool(changes) and tags == [repr(listen_id)],
        tags=tags,
        count=len(changes),
    )
    delivery_step(report, "; ".join(path))


async def converse(
    client: Client,
    report: Report,
    feature: str = "basic",
    inbox: Inbox | None = None,
    channel: str = "stdio",
) -> None:
    version = client.protocol_version
    report.era = "modern" if version in MODERN_PROTOCOL_VERSIONS else "legacy"
    session = client.session
    report.step(
        "connect",
        True,
        protocolVersion=version,
        via="server/discover" if session.discover_result is not None else "initialize",
        serverInfo=client.server_info.model_dump(exclude_none=True) if client.server_info else None,
    )

    listed = await client.list_tools()
    tools: dict[str, dict[str, Any]] = {
        t.name: t.model_dump(by_alias=True, exclude_none=True) for t in listed.tools
    }
    report.step("tools/list", True, tools=sorted(tools))
    if not report.step("echo tool listed", "echo" in tools):
        return

    result = await client.call_tool("echo", echo_arguments(tools["echo"]))
    text = first_text([block.model_dump() for block in result.content])
    report.step(
        "tools/call echo", text is not None and ECHO_TEXT in text and not result.is_error, text=text
    )

    if "add" in tools:
        result = await client.call_tool("add", {"a": 2, "b": 3})
        structured = result.structured_content
        text = first_text([block.model_dump() for block in result.content])
        value = structured.get("result") if structured else text
        report.step(
            "tools/call add",
            str(value) == "5" and not result.is_error,
            structuredContent=structured,
            text=text,
        )

    if feature != "notifications" or inbox is None:
        return
    if report.era == "modern":
        await modern_check(client, report, sorted(tools), echo_arguments(tools["echo"]), inbox)
        return

    async def resource_uris() -> list[str]:
        return [str(r.uri) for r in (await client.list_resources()).resources]

    async def call(trigger: Trigger) -> tuple[bool, str | None]:
        result = await client.call_tool(trigger.tool, trigger.arguments)
        return not result.is_error, first_text([b.model_dump() for b in result.content])

    await legacy_check(
        report,
        inbox,
        sorted(tools),
        resource_uris=resource_uris,
        subscribe=client.subscribe_resource,
        unsubscribe=client.unsubscribe_resource,
        call=call,
        channel=channel,
    )


async def run(args: argparse.Namespace, report: Report) -> None:
    inbox = Inbox()

    async def on_message(message: Any) -> None:
        if not isinstance(message, Exception):
            dumped = message.model_dump(by_alias=True, mode="json", exclude_none=True)
            inbox.add(dumped)

    with anyio.fail_after(args.timeout):
        async with Client(
            target(args.server, args.url), mode=args.mode, message_handler=on_message
        ) as client:
            channel = "the session's GET stream" if args.url else "stdio"
            await converse(client, report, args.feature, inbox, channel)


def main() -> None:
    args = parse_args()
    timeout = args.timeout
    report = Report()
    start_watchdog(report, timeout)
    try:
        anyio.run(run, args, report)
    except BaseException as group:
        exc = leaf_exception(group)
        if isinstance(exc, MCPError):
            report.step(
                "error", False, code=exc.error.code, message=exc.error.message, data=exc.error.data
            )
            report.fail(f"JSON-RPC error {exc.error.code}: {exc.error.message}")
        elif isinstance(exc, TimeoutError):
            report.fail(f"timeout after {timeout:.0f}s")
        else:
            report.fail(f"{type(exc).__name__}: {exc}")
    report.finish()


if __name__ == "__main__":
    main()
