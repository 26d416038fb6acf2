"""Conformance fixture server on mcp==2.3.0 (MCPServer): every fixture the
official conformance suite's server scenarios call, era-adaptive.

    .peers/py2/bin/python compat_matrix/conformance/py2_fixture_server.py \
        [--http PORT] [--modern-only | --push]

Default: dual-era (the SDK's own behaviour). `--modern-only` answers every
legacy `initialize` with -32022 (stdio: the filter from
compat_matrix/peers/py2_modern_server.py; HTTP: an ASGI filter, plus 405 on
GET/DELETE as the 2026-07-28 transport says). `--http PORT` serves Streamable
HTTP on 127.0.0.1:PORT/mcp instead of stdio.

Server-to-client requests are era-adaptive by hand (`gather`): on the modern
wire they become `InputRequiredResult` with the scenario's fixed keys (the
SDK's `Resolve(...)` markers would name keys `module:qualname`, and the suite
checks `user_name`); in a legacy session they are pushed as real requests.

`--push`: dual-era, but push-style, as the SDK 2.x `everything-server` example
writes its tools: every tool that asks the client pushes a real request on the
session whatever the era. A legacy session gets them as requests; a modern
request has no back-channel, so such a tool fails there (the SDK's "this
transport context has no back-channel for server-initiated requests"). It is
the upstream of issue #10: a legacy client must get through the gateway what it
gets from this server directly.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts.base import Message, UserMessage
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PROTOCOL_VERSION_META_KEY,
    AudioContent,
    Completion,
    CreateMessageResult,
    ElicitResult,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    InputRequest,
    InputRequiredResult,
    ListRootsResult,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    UnsubscribeRequestParams,
)
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, Field, TypeAdapter

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "peers")]
import fixture_data as fx  # noqa: E402

warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Answers = dict[str, dict[str, Any]]

MODERN = "2026-07-28"
NEEDS = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}
RESULT_TYPES: dict[str, type[BaseModel]] = {
    "elicitation/create": ElicitResult,
    "sampling/createMessage": CreateMessageResult,
    "roots/list": ListRootsResult,
}
_requests: TypeAdapter[InputRequest] = TypeAdapter(InputRequest)

# Set by `--push`: tools push their requests whatever the era (see the docstring).
PUSH_STYLE = False

mcp = MCPServer("py2-conformance-fixture", version="2.3.0", instructions="Conformance fixtures.")


def is_modern(ctx: Context) -> bool:
    return is_version_at_least(ctx.protocol_version or "2025-11-25", MODERN)


def declared(ctx: Context, capability: str) -> bool:
    caps = ctx.client_capabilities
    return caps is not None and getattr(caps, capability, None) is not None


def missing_capability(capabilities: set[str]) -> MCPError:
    return MCPError(
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"Client did not declare required capabilities: {', '.join(sorted(capabilities))}",
        data={"requiredCapabilities": {c: {} for c in sorted(capabilities)}},
    )


async def push(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    """Send one server-to-client request in a legacy session; return its result as a dict."""
    result: BaseModel = await ctx.session.send_request(
        _requests.validate_python(request),
        RESULT_TYPES[request["method"]],
        metadata=ServerMessageMetadata(related_request_id=ctx.request_context.request_id),
    )
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def answers_for(ctx: Context, asks: dict[str, dict[str, Any]]) -> Answers:
    """The client's `inputResponses` that answer `asks` with the right result type."""
    found: Answers = {}
    for key, response in (ctx.input_responses or {}).items():
        ask = asks.get(key)
        if ask is not None and isinstance(response, RESULT_TYPES[ask["method"]]):
            found[key] = response.model_dump(by_alias=True, mode="json", exclude_none=True)
    return found


async def gather(
    ctx: Context, asks: dict[str, dict[str, Any]], state: dict[str, Any] | None = None
) -> Answers | InputRequiredResult:
    """Era-adaptive input: answers for every key, or an `InputRequiredResult` for the missing ones.

    Modern: answers come from `inputResponses`; missing ones are (re-)requested,
    with `state` as requestState (the SDK seals it). Legacy: each ask is pushed.
    A modern client lacking a needed capability gets -32021.
    """
    if PUSH_STYLE or not is_modern(ctx):
        return {key: await push(ctx, ask) for key, ask in asks.items()}
    answers = answers_for(ctx, asks)
    missing = {k: v for k, v in asks.items() if k not in answers}
    if not missing:
        return answers
    lacking = {NEEDS[a["method"]] for a in missing.values()} - {
        c for c in NEEDS.values() if declared(ctx, c)
    }
    if lacking:
        raise missing_capability(lacking)
    return InputRequiredResult(
        input_requests={k: _requests.validate_python(v) for k, v in missing.items()},
        request_state=json.dumps(state) if state is not None else None,
    )


def state_of(ctx: Context) -> dict[str, Any]:
    """The (SDK-unsealed) requestState of a modern retry, or {}."""
    try:
        state = json.loads(ctx.request_state or "{}")
    except ValueError:
        return {}
    return state if isinstance(state, dict) else {}


def text(value: str) -> list[TextContent]:
    return [TextContent(type="text", text=value)]


# ---- plain content tools -------------------------------------------------


@mcp.tool()
def test_simple_text() -> str:
    """Tests simple text content response."""
    return fx.SIMPLE_TEXT


@mcp.tool()
def test_image_content() -> list[ImageContent]:
    """Tests image content response."""
    return [ImageContent(type="image", data=fx.PNG_B64, mime_type="image/png")]


@mcp.tool()
def test_audio_content() -> list[AudioContent]:
    """Tests audio content response."""
    return [AudioContent(type="audio", data=fx.WAV_B64, mime_type="audio/wav")]


def embedded(uri: str, body: str, mime: str) -> EmbeddedResource:
    contents = TextResourceContents(uri=uri, mime_type=mime, text=body)
    return EmbeddedResource(type="resource", resource=contents)


@mcp.tool()
def test_embedded_resource() -> list[EmbeddedResource]:
    """Tests embedded resource content response."""
    return [embedded("test://embedded-resource", fx.EMBEDDED_TEXT, "text/plain")]


@mcp.tool()
def test_multiple_content_types() -> list[TextContent | ImageContent | EmbeddedResource]:
    """Tests response with multiple content types (text, image, resource)."""
    return [
        TextContent(type="text", text="Multiple content types test:"),
        ImageContent(type="image", data=fx.PNG_B64, mime_type="image/png"),
        embedded("test://mixed-content-resource", fx.MIXED_JSON, "application/json"),
    ]


@mcp.tool()
def test_error_handling() -> str:
    """Tests error response handling (a result with isError: true)."""
    raise ToolError(fx.ERROR_TEXT)


@mcp.tool()
async def test_tool_with_logging(ctx: Context) -> str:
    """Emits three info log messages (modern: only if the request sets a logLevel)."""
    for message in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await ctx.info(message)
        await anyio.sleep(0.05)
    return "Tool with logging executed successfully"


@mcp.tool()
async def test_tool_with_progress(ctx: Context) -> str:
    """Reports progress 0, 50, 100 of 100 (when the request has a progressToken)."""
    for step in (0, 50, 100):
        await ctx.report_progress(step, 100, f"Completed step {step} of 100")
        await anyio.sleep(0.05)
    return "Progress reported"


@mcp.tool()
async def test_reconnection() -> str:
    """SEP-1699 reconnection target (the stream is not closed here)."""
    await anyio.sleep(0.1)
    return "Reconnection test completed successfully."


@mcp.tool()
async def test_logging_tool(ctx: Context) -> str:
    """Logs once; a modern request without `_meta` logLevel must see no notifications/message."""
    await ctx.info("Diagnostic trace logging activated")
    return "Logging evaluated"


@mcp.tool()
async def test_streaming_elicitation(ctx: Context) -> str:
    """Diagnostic: reports progress; never sends an independent request on the stream."""
    await ctx.report_progress(50, 100)
    return "Streaming complete"


@mcp.tool()
async def test_trigger_tool_change(ctx: Context) -> str:
    """Publishes a tools list-changed event (listen streams; legacy sessions get a notification)."""
    await ctx.notify_tools_changed()
    if not is_modern(ctx):
        await ctx.session.send_tool_list_changed()
    return "Mutation triggered"


@mcp.tool()
async def test_trigger_prompt_change(ctx: Context) -> str:
    """Publishes a prompts list-changed event."""
    await ctx.notify_prompts_changed()
    if not is_modern(ctx):
        await ctx.session.send_prompt_list_changed()
    return "Mutation triggered"


@mcp.tool()
def test_header_param(
    region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})] = "eu",
) -> str:
    """SEP-2243 custom header target: `region` is mirrored in Mcp-Param-Region."""
    return f"region={region}"


@mcp.tool()
def json_schema_2020_12_tool(name: str | None = None, address: dict[str, Any] | None = None) -> str:
    """Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)."""
    return f"JSON Schema 2020-12 tool called with: {json.dumps({'name': name, 'address': address})}"


_schema_tool = mcp._tool_manager.get_tool("json_schema_2020_12_tool")  # pyright: ignore[reportPrivateUsage]
assert _schema_tool is not None
_schema_tool.parameters = fx.JSON_SCHEMA_2020_12


# ---- tools that ask the client (push on legacy, MRTR on modern) ----------


@mcp.tool()
async def test_sampling(prompt: str, ctx: Context) -> str | InputRequiredResult:
    """Tests server-initiated sampling (LLM completion request)."""
    got = await gather(ctx, {"sample": fx.sample(prompt, 100)})
    return (
        got
        if isinstance(got, InputRequiredResult)
        else f"LLM response: {fx.sampled_text(got['sample'])}"
    )


async def elicit_tool(
    ctx: Context, message: str, props: dict[str, Any], required: list[str], prefix: str
) -> str | InputRequiredResult:
    got = await gather(ctx, {"form": fx.form(message, props, required)})
    return (
        got
        if isinstance(got, InputRequiredResult)
        else prefix + fx.elicitation_summary(got["form"])
    )


@mcp.tool()
async def test_elicitation(message: str, ctx: Context) -> str | InputRequiredResult:
    """Tests server-initiated elicitation (user input request)."""
    return await elicit_tool(
        ctx, message, fx.ELICIT_RESPONSE_PROPS, ["response"], "User response: "
    )


@mcp.tool()
async def test_elicitation_sep1034_defaults(ctx: Context) -> str | InputRequiredResult:
    """Tests elicitation with default values per SEP-1034."""
    return await elicit_tool(
        ctx, fx.SEP1034_MESSAGE, fx.SEP1034_PROPS, [], "Elicitation completed: "
    )


@mcp.tool()
async def test_elicitation_sep1330_enums(ctx: Context) -> str | InputRequiredResult:
    """Tests elicitation with enum schema improvements per SEP-1330."""
    return await elicit_tool(
        ctx, fx.SEP1330_MESSAGE, fx.SEP1330_PROPS, [], "Elicitation completed: "
    )


@mcp.tool()
async def test_missing_capability(ctx: Context) -> str | InputRequiredResult:
    """Needs sampling: a modern client that did not declare it gets -32021."""
    got = await gather(ctx, {"sample": fx.sample("Say hello", 10)})
    return got if isinstance(got, InputRequiredResult) else "Success"


@mcp.tool()
async def test_input_required_result_elicitation(ctx: Context) -> str | InputRequiredResult:
    """MRTR: elicitation under key `user_name`, then `Hello, <name>!`."""
    got = await gather(ctx, {"user_name": fx.ASK_NAME})
    return (
        got
        if isinstance(got, InputRequiredResult)
        else f"Hello, {fx.answer_text(got['user_name'], 'name')}!"
    )


@mcp.tool()
async def test_input_required_result_sampling(ctx: Context) -> str | InputRequiredResult:
    """MRTR: sampling under key `capital_question`."""
    got = await gather(ctx, {"capital_question": fx.CAPITAL})
    if isinstance(got, InputRequiredResult):
        return got
    return f"Sampling result: {fx.sampled_text(got['capital_question'])}"


@mcp.tool()
async def test_input_required_result_list_roots(ctx: Context) -> str | InputRequiredResult:
    """MRTR: roots/list under key `client_roots`."""
    got = await gather(ctx, {"client_roots": fx.ROOTS})
    return (
        got
        if isinstance(got, InputRequiredResult)
        else f"Found {fx.root_count(got['client_roots'])} root(s)"
    )


@mcp.tool()
async def test_input_required_result_request_state(ctx: Context) -> str | InputRequiredResult:
    """MRTR: elicitation plus requestState; the retry must echo it (`state-ok`)."""
    got = await gather(ctx, {"confirm": fx.CONFIRM}, {"kind": "request-state"})
    if isinstance(got, InputRequiredResult):
        return got
    if is_modern(ctx) and state_of(ctx).get("kind") != "request-state":
        raise MCPError(code=-32602, message="requestState missing or not ours")
    return "state-ok: requestState validated"


@mcp.tool()
async def test_input_required_result_multiple_inputs(ctx: Context) -> str | InputRequiredResult:
    """MRTR: elicitation + sampling + roots in one round, with requestState."""
    asks = {"user_name": fx.ASK_NAME, "greeting": fx.GREETING, "client_roots": fx.ROOTS}
    got = await gather(ctx, asks, {"kind": "multiple-inputs"})
    if isinstance(got, InputRequiredResult):
        return got
    name, greeting = fx.answer_text(got["user_name"], "name"), fx.sampled_text(got["greeting"])
    return f"Name: {name}; Greeting: {greeting}; Roots: {fx.root_count(got['client_roots'])}"


@mcp.tool()
async def test_input_required_result_multi_round(ctx: Context) -> str | InputRequiredResult:
    """MRTR: two rounds (`step1` name, then `step2` color), requestState changes per round."""
    state = state_of(ctx) if is_modern(ctx) else {}
    if state.get("round") == 2 and isinstance(state.get("name"), str):
        name = str(state["name"])
    else:
        first = await gather(ctx, {"step1": fx.STEP1}, {"round": 1})
        if isinstance(first, InputRequiredResult):
            return first
        name = fx.answer_text(first["step1"], "name")
    second = await gather(ctx, {"step2": fx.STEP2}, {"round": 2, "name": name})
    if isinstance(second, InputRequiredResult):
        return second
    return f"Multi-round complete for {name} who likes {fx.answer_text(second['step2'], 'color')}"


@mcp.tool()
async def test_input_required_result_tampered_state(ctx: Context) -> str | InputRequiredResult:
    """MRTR: integrity-protected requestState (the SDK seals it; a tampered one is -32602)."""
    got = await gather(ctx, {"confirm": fx.CONFIRM}, {"kind": "tamper-test"})
    if isinstance(got, InputRequiredResult):
        return got
    if is_modern(ctx) and state_of(ctx).get("kind") != "tamper-test":
        raise MCPError(code=-32602, message="requestState integrity check failed")
    return "integrity-ok: state verified"


@mcp.tool()
async def test_input_required_result_capabilities(ctx: Context) -> str | InputRequiredResult:
    """MRTR: asks only for what the client declared (elicitation and/or sampling)."""
    asks: dict[str, dict[str, Any]] = {}
    if declared(ctx, "elicitation"):
        asks["elicit_input"] = fx.CAP_ELICIT
    if declared(ctx, "sampling"):
        asks["sample_input"] = fx.CAP_SAMPLE
    if not asks:
        return "No supported capabilities declared"
    got = await gather(ctx, asks, {"kind": "capabilities-test"})
    return (
        got
        if isinstance(got, InputRequiredResult)
        else f"capabilities-ok: received {','.join(got)}"
    )


# ---- resources -------------------------------------------------------------


@mcp.resource(
    "test://static-text",
    name="static-text",
    description="A static text resource",
    mime_type="text/plain",
)
def static_text() -> str:
    return fx.STATIC_TEXT


@mcp.resource(
    "test://static-binary",
    name="static-binary",
    description="A static binary resource (PNG)",
    mime_type="image/png",
)
def static_binary() -> bytes:
    import base64

    return base64.b64decode(fx.PNG_B64)


@mcp.resource(
    "test://template/{id}/data",
    name="template",
    description="Resource template with a parameter",
    mime_type="application/json",
)
def template_data(id: str) -> str:
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


@mcp.resource(
    "test://watched-resource",
    name="watched-resource",
    description="A subscribable resource",
    mime_type="text/plain",
)
def watched_resource() -> str:
    return fx.WATCHED_TEXT


# ---- prompts ---------------------------------------------------------------


@mcp.prompt()
def test_simple_prompt() -> str:
    """A simple prompt without arguments."""
    return fx.SIMPLE_PROMPT


@mcp.prompt()
def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
    """A prompt with required arguments."""
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@mcp.prompt()
def test_prompt_with_embedded_resource(resourceUri: str) -> list[Message]:
    """A prompt that includes an embedded resource."""
    return [
        UserMessage(embedded(resourceUri, fx.EMBEDDED_PROMPT_TEXT, "text/plain")),
        UserMessage("Please process the embedded resource above."),
    ]


@mcp.prompt()
def test_prompt_with_image() -> list[Message]:
    """A prompt that includes image content."""
    return [
        UserMessage(ImageContent(type="image", data=fx.PNG_B64, mime_type="image/png")),
        UserMessage("Please analyze the image above."),
    ]


@mcp.prompt()
async def test_input_required_result_prompt(ctx: Context) -> list[Message] | InputRequiredResult:
    """MRTR on prompts/get: elicits `user_context` first."""
    got = await gather(ctx, {"user_context": fx.ASK_CONTEXT})
    if isinstance(got, InputRequiredResult):
        return got
    return [UserMessage(f"Prompt with context: {fx.answer_text(got['user_context'], 'context')}")]


# ---- legacy-only methods and completion ------------------------------------


@mcp.completion()  # type: ignore[no-untyped-call,untyped-decorator]
async def complete(ref: Any, argument: Any, context: Any) -> Completion:
    return Completion(values=[], total=0, has_more=False)


async def _subscribe(
    ctx: Any, params: SubscribeRequestParams | UnsubscribeRequestParams
) -> EmptyResult:
    return EmptyResult()


async def _set_level(ctx: Any, params: SetLevelRequestParams) -> EmptyResult:
    return EmptyResult()


_low = mcp._lowlevel_server  # pyright: ignore[reportPrivateUsage]
_low.add_request_handler("resources/subscribe", SubscribeRequestParams, _subscribe)
_low.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, _subscribe)
_low.add_request_handler("logging/setLevel", SetLevelRequestParams, _set_level)


# ---- transports --------------------------------------------------------------


def modern_only_http(
    app: Callable[[Scope, Receive, Send], Awaitable[None]],
) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """ASGI filter: legacy `initialize` → 400 + -32022, GET/DELETE → 405; the rest passes."""
    from mcp_types import JSONRPCRequest
    from py2_modern_server import initialize_rejection

    async def reply(send: Send, status: int, body: bytes) -> None:
        headers = [(b"content-type", b"application/json")] if body else []
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def filtered(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        if scope["method"] in ("GET", "DELETE"):
            return await reply(send, 405, b"")
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
        meta = ((body.get("params") or {}).get("_meta") or {}) if isinstance(body, dict) else {}
        if (
            isinstance(body, dict)
            and body.get("method") == "initialize"
            and PROTOCOL_VERSION_META_KEY not in meta
        ):
            error = initialize_rejection(JSONRPCRequest.model_validate(body))
            return await reply(
                send, 400, error.model_dump_json(by_alias=True, exclude_none=True).encode()
            )
        replayed = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": raw, "more_body": False}

        return await app(scope, replay, send)

    return filtered


async def run_stdio_modern_only() -> None:
    from mcp.server.stdio import stdio_server
    from py2_modern_server import ModernOnlyReadStream

    async with stdio_server() as (read_stream, write_stream):
        await _low.run(
            ModernOnlyReadStream(read_stream, write_stream),
            write_stream,
            _low.create_initialization_options(),
        )


def serve_http(port: int, modern_only: bool) -> None:
    import uvicorn

    app: Any = mcp.streamable_http_app(host="127.0.0.1")
    if modern_only:
        app = modern_only_http(app)
    log_level: Literal["warning"] = "warning"
    uvicorn.run(app, host="127.0.0.1", port=port, log_level=log_level)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT/mcp"
    )
    era = parser.add_mutually_exclusive_group()
    era.add_argument("--modern-only", action="store_true", help="refuse legacy initialize (-32022)")
    era.add_argument(
        "--push",
        action="store_true",
        help="push-style tools: push server requests in every era (the everything-server style)",
    )
    args = parser.parse_args()
    global PUSH_STYLE  # noqa: PLW0603
    PUSH_STYLE = args.push
    if args.http is not None:
        serve_http(args.http, args.modern_only)
    elif args.modern_only:
        anyio.run(run_stdio_modern_only)
    else:
        mcp.run("stdio")


if __name__ == "__main__":
    main()
