"""Modern-era fixture server: MCPServer from the Python SDK mcp==2.3.0.

Run with the py2 venv (see README.md):
    .peers/py2/bin/python compat_matrix/peers/py2_modern_server.py          # modern-only
    .peers/py2/bin/python compat_matrix/peers/py2_modern_server.py --dual   # dual-era
    ... py2_modern_server.py [--dual] --http PORT   # Streamable HTTP on 127.0.0.1:PORT/mcp

mcp 2.3.0 is dual-era out of the box and has no modern-only switch. Without
`--dual` this script makes it modern-only, the "Modern" server of the
compatibility matrix: every `initialize` is refused, and the process never
locks itself into the legacy era.

Why a read-stream filter and not a `Server.middleware`: the SDK fixes a stdio
process's era from its first request *before* middleware runs
(`serve_dual_era_loop`). An `initialize` that reaches middleware has already
locked the process legacy (later modern requests then get -32600), and on a
modern-locked process the SDK answers every `initialize` itself with -32022,
so middleware cannot give the modern-`_meta` `initialize` its -32601. Dropping
`initialize` before the era choice gives the intended answers in every order.

Over HTTP the SDK picks the era per POST (from the MCP-Protocol-Version
header), so modern-only is an ASGI filter in front of the SDK's app: a legacy
`initialize` gets HTTP 400 with the same -32022 error, and no legacy session
can ever start (every other legacy POST then lacks a session id: 400).

The tools mirror py1_server.py; elicitation, sampling and roots use the
era-adaptive `Resolve(...)` markers, which answer modern requests with
`resultType: "input_required"` and push real requests to legacy sessions.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import warnings
from collections.abc import Awaitable, Callable, MutableMapping
from importlib.metadata import version
from types import TracebackType
from typing import Annotated, Any, Self
from uuid import uuid4

import anyio
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import Context, Elicit, ListRoots, MCPServer, Resolve, Sample
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import SessionMessage
from mcp_types import (
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PROTOCOL_VERSION_META_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
    CreateMessageResult,
    ElicitRequest,
    ElicitRequestURLParams,
    ElicitResult,
    EmptyResult,
    ErrorData,
    InputRequiredResult,
    JSONRPCError,
    JSONRPCRequest,
    ListRootsResult,
    SamplingMessage,
    SubscribeRequestParams,
    TextContent,
    UnsubscribeRequestParams,
)
from mcp_types.version import is_version_at_least
from pydantic import BaseModel

SUPPORTED_VERSIONS = ["2026-07-28"]

# log_levels uses the logging API on purpose (legacy sessions still get
# notifications/message); keep its deprecation warnings off stderr.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

mcp = MCPServer(
    "py2-fixture",
    version=version("mcp"),
    instructions="Modern fixture server for mcp-era-gateway tests.",
)


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
async def progress(steps: int, ctx: Context) -> str:
    """Report progress once per step (only sent when the request has a progressToken)."""
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i}/{steps}")
        await anyio.sleep(0.01)
    return f"completed {steps} steps"


@mcp.tool()
async def log_levels(ctx: Context) -> str:
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


def _ask_for_name() -> Elicit[NameForm]:
    return Elicit("What is your name?", NameForm)


def _sample_summary(text: str) -> Sample:
    # Takes the tool argument `text` by name; must render identically on every
    # MRTR round, so it depends on nothing but the arguments.
    return Sample(
        [SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarize: {text}"))],
        max_tokens=100,
    )


def _roots() -> ListRoots:
    return ListRoots()


@mcp.tool()
async def ask_name(form: Annotated[NameForm, Resolve(_ask_for_name)]) -> str:
    """Ask the client for a name (form-mode elicitation; MRTR on modern, push on legacy)."""
    return f"Hello, {form.name}"


@mcp.tool()
async def summarize(
    text: str, sampled: Annotated[CreateMessageResult, Resolve(_sample_summary)]
) -> str:
    """Ask the client's LLM to summarize `text` and return the sampled text."""
    content = sampled.content
    return content.text if isinstance(content, TextContent) else str(content)


@mcp.tool()
async def list_my_roots(roots: Annotated[ListRootsResult, Resolve(_roots)]) -> str:
    """Return the client's root URIs joined by newline."""
    return "\n".join(str(root.uri) for root in roots.roots)


# Where `open_link` sends the user; the clients only check that it round-trips.
LINK_URL = "https://example.com/compat/authorize"
LINK_KEY = "open_link"


@mcp.tool()
async def open_link(ctx: Context) -> str | InputRequiredResult:
    """Ask the client to open a URL (URL-mode elicitation; MRTR on modern, push on legacy)."""
    # Resolve(...) markers only do form elicitation, so this tool drives both eras by hand.
    message = "Please open the link to continue."
    if not is_version_at_least(ctx.protocol_version or "2025-11-25", "2026-07-28"):
        elicitation_id = uuid4().hex
        pushed = await ctx.elicit_url(message, LINK_URL, elicitation_id)
        if pushed.action == "accept":
            await ctx.session.send_elicit_complete(elicitation_id, ctx.request_id)
        return f"URL elicitation: {pushed.action}"
    answer = (ctx.input_responses or {}).get(LINK_KEY)
    if isinstance(answer, ElicitResult):
        return f"URL elicitation: {answer.action}"
    elicitation = ctx.client_capabilities.elicitation if ctx.client_capabilities else None
    if elicitation is None or elicitation.url is None:
        raise MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message="Client did not declare the url elicitation capability required by open_link",
            data={"requiredCapabilities": {"elicitation": {"url": {}}}},
        )
    # 2026-07-28 URL mode has no elicitationId: the key alone correlates the retry.
    request = ElicitRequest(params=ElicitRequestURLParams(message=message, url=LINK_URL))
    return InputRequiredResult(input_requests={LINK_KEY: request})


@mcp.resource("notes://index")
def notes_index() -> str:
    """Static resource listing the available notes."""
    return "alpha\nbeta"


@mcp.resource("notes://{name}")
def note(name: str) -> str:
    """Resource template: the body of one note."""
    return _notes.get(name, f"Note {name}")


# -- change notifications (tests/test_real_peers_notifications.py) -------------
# mcp 2.x publishes change events on its subscription bus; they reach
# `subscriptions/listen` streams (modern wire) only. `add_note` changes the body
# of notes://{name} and publishes resources/updated for that URI;
# `register_tool` adds a tool and publishes tools/list_changed.
# With `--dual`, a legacy session gets them the legacy way too (the SDK leaves
# that to the server: `enable_legacy_notifications`): it can
# `resources/subscribe`, `add_note` then sends it resources/updated for a URI it
# subscribed, and `register_tool` sends tools/list_changed to the session that
# called it (stdio, or the session's GET stream over HTTP).

_notes: dict[str, str] = {}
# Legacy sessions' subscribed URIs, by connection (one per stdio process or HTTP session).
_legacy_subscriptions: dict[int, set[str]] = {}


def _legacy_session(ctx: Context) -> bool:
    return not is_version_at_least(ctx.protocol_version or "2025-11-25", "2026-07-28")


def _connection_key(session: Any) -> int:
    return id(session._connection)  # no public accessor; fine for a pinned fixture


@mcp.tool()
async def add_note(name: str, text: str, ctx: Context) -> str:
    """Set the body of notes://{name}; notifies listeners of that URI."""
    _notes[name] = text
    uri = f"notes://{name}"
    await ctx.notify_resource_updated(uri)
    if _legacy_session(ctx) and uri in _legacy_subscriptions.get(_connection_key(ctx.session), ()):
        await ctx.session.send_resource_updated(uri)
    return f"updated {uri}"


@mcp.tool()
async def register_tool(name: str, ctx: Context) -> str:
    """Add a tool `name` (returns "I am <name>") and publish tools/list_changed."""

    def added() -> str:
        return f"I am {name}"

    mcp.add_tool(added, name=name, description=f"Tool {name}, added at run time.")
    await ctx.notify_tools_changed()
    if _legacy_session(ctx) and _legacy_notifications:
        await ctx.session.send_tool_list_changed()
    return f"registered {name}"


_legacy_notifications = False


def enable_legacy_notifications() -> None:
    """Serve `resources/subscribe` / `unsubscribe` to legacy sessions and declare
    `tools.listChanged`, `resources.listChanged` and `resources.subscribe` in
    their `initialize` answer (the modern capabilities do not change: there they
    follow from `subscriptions/listen`)."""
    global _legacy_notifications  # noqa: PLW0603
    _legacy_notifications = True
    server = mcp._lowlevel_server  # pyright: ignore[reportPrivateUsage]

    async def subscribe(ctx: Any, params: SubscribeRequestParams) -> EmptyResult:
        _legacy_subscriptions.setdefault(_connection_key(ctx.session), set()).add(str(params.uri))
        return EmptyResult()

    async def unsubscribe(ctx: Any, params: UnsubscribeRequestParams) -> EmptyResult:
        _legacy_subscriptions.get(_connection_key(ctx.session), set()).discard(str(params.uri))
        return EmptyResult()

    server.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
    server.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)
    original = server.create_initialization_options

    def initialization_options(
        notification_options: NotificationOptions | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        options = notification_options or NotificationOptions(
            tools_changed=True, resources_changed=True
        )
        return original(options, *args, **kwargs)

    server.create_initialization_options = initialization_options  # type: ignore[method-assign]


@mcp.prompt()
def greet(name: str) -> str:
    """A one-message prompt."""
    return f"Please greet {name} warmly."


def initialize_rejection(request: JSONRPCRequest) -> JSONRPCError:
    """The answer a modern-only server gives to `initialize`.

    Legacy `initialize` → -32022 naming the supported versions (the spec says a
    modern-only server SHOULD, since legacy clients can only show this text).
    `initialize` carrying modern `_meta` → -32601: on the modern wire it is
    simply an unknown method (what the conformance suite checks).
    """
    params: dict[str, Any] = request.params or {}
    meta = params.get("_meta")
    if isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta:
        error = ErrorData(code=METHOD_NOT_FOUND, message="Method not found", data="initialize")
    else:
        requested = params.get("protocolVersion")
        error = ErrorData(
            code=UNSUPPORTED_PROTOCOL_VERSION,
            message=(
                f"Unsupported protocol version {requested!r}: this server supports only "
                f"{', '.join(SUPPORTED_VERSIONS)} (no initialize handshake)"
            ),
            data={"supported": SUPPORTED_VERSIONS, "requested": requested},
        )
    return JSONRPCError(jsonrpc="2.0", id=request.id, error=error)


class ModernOnlyReadStream:
    """Read stream that answers `initialize` itself and passes everything else on.

    Duck-types the SDK's `ReadStream` (and its `last_context`, which the SDK
    reads to run handlers in the sender's contextvars).
    """

    def __init__(
        self,
        inner: ReadStream[SessionMessage | Exception],
        write: WriteStream[SessionMessage],
    ) -> None:
        self._inner = inner
        self._write = write

    @property
    def last_context(self) -> contextvars.Context | None:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        while True:
            item = await self._inner.receive()
            message = item.message if isinstance(item, SessionMessage) else None
            if isinstance(message, JSONRPCRequest) and message.method == "initialize":
                await self._write.send(SessionMessage(initialize_rejection(message)))
                continue
            return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


async def run_modern_only() -> None:
    # Same as MCPServer.run_stdio_async, with the filter in front. There is no
    # public accessor for the low-level server; fine for a pinned fixture.
    server = mcp._lowlevel_server  # pyright: ignore[reportPrivateUsage]
    async with stdio_server() as (read_stream, write_stream):
        await server.run(
            ModernOnlyReadStream(read_stream, write_stream),
            write_stream,
            server.create_initialization_options(),
        )


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def modern_only_http(app: App) -> App:
    """ASGI filter: a legacy `initialize` POST gets HTTP 400 and the -32022 error of
    `initialize_rejection`; everything else reaches the SDK's app unchanged."""

    async def reply(send: Send, status: int, body: bytes) -> None:
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def filtered(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("method") == "initialize":
            meta = (body.get("params") or {}).get("_meta") or {}
            if PROTOCOL_VERSION_META_KEY not in meta:
                error = initialize_rejection(JSONRPCRequest.model_validate(body))
                dumped = error.model_dump_json(by_alias=True, exclude_none=True)
                await reply(send, 400, dumped.encode())
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": raw, "more_body": False}

        await app(scope, replay, send)

    return filtered


def serve_http(port: int, dual: bool) -> None:
    import uvicorn

    app: App = mcp.streamable_http_app(host="127.0.0.1")
    if not dual:
        app = modern_only_http(app)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dual", action="store_true", help="serve both eras (the SDK's default behaviour)"
    )
    parser.add_argument(
        "--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT/mcp"
    )
    args = parser.parse_args()
    if args.dual:
        enable_legacy_notifications()
    if args.http is not None:
        serve_http(args.http, args.dual)
    elif args.dual:
        mcp.run("stdio")
    else:
        anyio.run(run_modern_only)


if __name__ == "__main__":
    main()
