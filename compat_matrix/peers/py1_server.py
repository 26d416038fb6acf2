"""Legacy-era fixture server: FastMCP from the Python SDK mcp==1.30.0.

Run with the py1 venv (see README.md):
    .peers/py1/bin/python compat_matrix/peers/py1_server.py              # stdio
    .peers/py1/bin/python compat_matrix/peers/py1_server.py --http PORT  # Streamable HTTP

`--http PORT` serves Streamable HTTP (2025-11-25 sessions, SSE responses) at
http://127.0.0.1:PORT/mcp instead of stdio; FastMCP's DNS-rebinding guard then
accepts only Host 127.0.0.1 / localhost.

It only speaks the initialize handshake (2024-11-05 … 2025-11-25), so it is the
"Legacy" server of the compatibility matrix. The tool set exercises every
legacy feature the gateway must translate: plain and structured results, tool
errors, cancellation, progress, logging, resources, prompts, and the three
server-to-client pushes (elicitation, sampling, roots) that become MRTR
`input_required` results on the modern side.
"""

from __future__ import annotations

import argparse
from typing import Any
from uuid import uuid4

import anyio
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.session import ServerSession
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp.types import ElicitRequestURLParams, SamplingMessage, TextContent
from pydantic import AnyUrl, BaseModel

# FastMCP finds the context parameter by its (parametrised) Context class.
Ctx = Context[ServerSession, Any, Any]

mcp = FastMCP("py1-fixture", instructions="Legacy fixture server for mcp-era-gateway tests.")


@mcp.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two integers (structured result: {"result": a+b})."""
    return a + b


@mcp.tool()
async def slow(ms: int) -> str:
    """Sleep `ms` milliseconds, then return "done" (cancellation target)."""
    await anyio.sleep(ms / 1000)
    return "done"


@mcp.tool()
async def progress(steps: int, ctx: Ctx) -> str:
    """Report progress once per step (only sent when the request has a progressToken)."""
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i}/{steps}")
        await anyio.sleep(0.01)
    return f"completed {steps} steps"


@mcp.tool()
async def log_levels(ctx: Ctx) -> str:
    """Emit one notifications/message at each of debug, info, warning, error."""
    await ctx.debug("debug message")
    await ctx.info("info message")
    await ctx.warning("warning message")
    await ctx.error("error message")
    return "logged"


@mcp.tool()
def fail() -> str:
    """Always fails: a tool error, i.e. a result with isError=true (not a JSON-RPC error)."""
    raise ToolError("intentional failure")


class NameForm(BaseModel):
    name: str


@mcp.tool()
async def ask_name(ctx: Ctx) -> str:
    """Ask the client for a name with a form-mode elicitation/create push."""
    answer = await ctx.elicit("What is your name?", NameForm)
    if answer.action != "accept":
        return f"No name given ({answer.action})"
    return f"Hello, {answer.data.name}"


# Where `open_link` sends the user; the clients only check that it round-trips.
LINK_URL = "https://example.com/compat/authorize"


@mcp.tool()
async def open_link(ctx: Ctx) -> str:
    """Ask the client to open a URL (URL-mode elicitation/create push, 2025-11-25);
    on accept, also send notifications/elicitation/complete."""
    elicitation_id = uuid4().hex
    answer = await ctx.elicit_url("Please open the link to continue.", LINK_URL, elicitation_id)
    if answer.action == "accept":
        await ctx.session.send_elicit_complete(elicitation_id, related_request_id=ctx.request_id)
    return f"URL elicitation: {answer.action}"


# One stdio session per process, so one flag is enough (server-everything's
# trigger-url-elicitation with errorPath=true does the same per session).
_authorize_pending = False


@mcp.tool()
def authorize() -> str:
    """Fail with -32042 (URL elicitation required, 2025-11-25) on the first call;
    the retry, after the client has opened the link, succeeds."""
    global _authorize_pending  # noqa: PLW0603
    if _authorize_pending:
        _authorize_pending = False
        return "Authorized after URL elicitation"
    _authorize_pending = True
    link = ElicitRequestURLParams(
        message="Authorize at the link, then retry.", url=LINK_URL, elicitationId=uuid4().hex
    )
    raise UrlElicitationRequiredError([link])


@mcp.tool()
async def summarize(text: str, ctx: Ctx) -> str:
    """Ask the client's LLM (sampling/createMessage push) and return its text."""
    result = await ctx.session.create_message(
        messages=[
            SamplingMessage(
                role="user", content=TextContent(type="text", text=f"Summarize: {text}")
            )
        ],
        max_tokens=100,
    )
    content = result.content
    return content.text if isinstance(content, TextContent) else str(content)


@mcp.tool()
async def list_my_roots(ctx: Ctx) -> str:
    """Fetch the client's roots (roots/list push); URIs joined by newline."""
    result = await ctx.session.list_roots()
    return "\n".join(str(root.uri) for root in result.roots)


@mcp.resource("notes://index")
def notes_index() -> str:
    """Static resource listing the available notes."""
    return "alpha\nbeta"


@mcp.resource("notes://{name}")
def note(name: str) -> str:
    """Resource template: the body of one note."""
    return _notes.get(name, f"Note {name}")


# -- change notifications (tests/test_real_peers_notifications.py) -------------
# `add_note` changes the body of `notes://{name}` and sends
# notifications/resources/updated when that URI is subscribed; `register_tool`
# adds a tool and sends notifications/tools/list_changed. With `--notify` the
# server also declares `tools.listChanged` and `resources.subscribe` (mcp 1.30's
# low-level server hard-codes `subscribe: false`, so the capabilities are patched).

_notes: dict[str, str] = {}
_subscribed: set[str] = set()


@mcp.tool()
async def add_note(name: str, text: str, ctx: Ctx) -> str:
    """Set the body of notes://{name}; notifies subscribers of that URI."""
    _notes[name] = text
    uri = f"notes://{name}"
    if uri in _subscribed:
        await ctx.session.send_resource_updated(AnyUrl(uri))
        return f"updated {uri} (notified)"
    return f"updated {uri}"


@mcp.tool()
async def register_tool(name: str, ctx: Ctx) -> str:
    """Add a tool `name` (returns "I am <name>") and send tools/list_changed."""

    def added() -> str:
        return f"I am {name}"

    mcp.add_tool(added, name=name, description=f"Tool {name}, added at run time.")
    await ctx.session.send_tool_list_changed()
    return f"registered {name}"


def _enable_notifications() -> None:
    low = mcp._mcp_server  # FastMCP has no public accessor

    @low.subscribe_resource()
    async def _subscribe(uri: AnyUrl) -> None:
        _subscribed.add(str(uri))

    @low.unsubscribe_resource()
    async def _unsubscribe(uri: AnyUrl) -> None:
        _subscribed.discard(str(uri))

    original = low.get_capabilities

    def capabilities(notification_options: Any, experimental: Any) -> Any:
        options = NotificationOptions(tools_changed=True, resources_changed=True)
        caps = original(options, experimental)
        if caps.resources is not None:
            caps.resources.subscribe = True
        return caps

    low.get_capabilities = capabilities  # type: ignore[method-assign]


@mcp.prompt()
def greet(name: str) -> str:
    """A one-message prompt."""
    return f"Please greet {name} warmly."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT/mcp"
    )
    parser.add_argument(
        "--notify",
        action="store_true",
        help="declare tools.listChanged and resources.subscribe (and serve resources/subscribe)",
    )
    args = parser.parse_args()
    if args.notify:
        _enable_notifications()
    if args.http is None:
        mcp.run("stdio")
        return
    mcp.settings.host = "127.0.0.1"
    mcp.settings.port = args.http
    mcp.settings.log_level = "WARNING"
    mcp.run("streamable-http")


if __name__ == "__main__":
    main()
