"""Conformance fixture server on mcp==1.30.0 (FastMCP): the suite's fixtures, legacy era only.

    .peers/py1/bin/python compat_matrix/conformance/py1_fixture_server.py [--http PORT]

Stdio by default; `--http PORT` serves Streamable HTTP (2025-11-25 sessions)
on 127.0.0.1:PORT/mcp with FastMCP's localhost DNS-rebinding protection.

The tools that need the client (sampling, elicitation, roots, including the
`test_input_required_result_*` MRTR fixtures) push real server-to-client
requests, as any legacy server does: in front of this server a gateway must
turn those pushes into `InputRequiredResult` rounds for a modern client. The
MRTR fixtures ask the same questions, in the same order, as the modern
fixtures (py2_fixture_server.py), so the two can be compared through it.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp import types
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.fastmcp.prompts.base import Message, UserMessage
from mcp.shared.message import ServerMessageMetadata
from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fixture_data as fx

RESULT_TYPES: dict[str, type[BaseModel]] = {
    "elicitation/create": types.ElicitResult,
    "sampling/createMessage": types.CreateMessageResult,
    "roots/list": types.ListRootsResult,
}

mcp = FastMCP("py1-conformance-fixture", instructions="Conformance fixtures (legacy).")


async def push(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:  # type: ignore[type-arg]
    """Send one server-to-client request on the call's stream; its result as a dict."""
    result: BaseModel = await ctx.session.send_request(
        types.ServerRequest.model_validate(request),
        RESULT_TYPES[request["method"]],
        metadata=ServerMessageMetadata(related_request_id=ctx.request_context.request_id),
    )
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def declared(ctx: Context, capability: str) -> bool:  # type: ignore[type-arg]
    params = ctx.session.client_params
    return params is not None and getattr(params.capabilities, capability, None) is not None


def embedded(uri: str, body: str, mime: str) -> types.EmbeddedResource:
    contents = types.TextResourceContents(uri=uri, mimeType=mime, text=body)  # type: ignore[arg-type]
    return types.EmbeddedResource(type="resource", resource=contents)


def image() -> types.ImageContent:
    return types.ImageContent(type="image", data=fx.PNG_B64, mimeType="image/png")


# ---- plain content tools -------------------------------------------------


@mcp.tool()
def test_simple_text() -> str:
    """Tests simple text content response."""
    return fx.SIMPLE_TEXT


@mcp.tool()
def test_image_content() -> list[types.ImageContent]:
    """Tests image content response."""
    return [image()]


@mcp.tool()
def test_audio_content() -> list[types.AudioContent]:
    """Tests audio content response."""
    return [types.AudioContent(type="audio", data=fx.WAV_B64, mimeType="audio/wav")]


@mcp.tool()
def test_embedded_resource() -> list[types.EmbeddedResource]:
    """Tests embedded resource content response."""
    return [embedded("test://embedded-resource", fx.EMBEDDED_TEXT, "text/plain")]


@mcp.tool()
def test_multiple_content_types() -> list[
    types.TextContent | types.ImageContent | types.EmbeddedResource
]:
    """Tests response with multiple content types (text, image, resource)."""
    return [
        types.TextContent(type="text", text="Multiple content types test:"),
        image(),
        embedded("test://mixed-content-resource", fx.MIXED_JSON, "application/json"),
    ]


@mcp.tool()
def test_error_handling() -> str:
    """Tests error response handling (a result with isError: true)."""
    raise ToolError(fx.ERROR_TEXT)


@mcp.tool()
async def test_tool_with_logging(ctx: Context) -> str:  # type: ignore[type-arg]
    """Emits three info log messages during execution."""
    for message in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await ctx.info(message)
        await anyio.sleep(0.05)
    return "Tool with logging executed successfully"


@mcp.tool()
async def test_tool_with_progress(ctx: Context) -> str:  # type: ignore[type-arg]
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
async def test_logging_tool(ctx: Context) -> str:  # type: ignore[type-arg]
    """Logs once (a legacy server logs regardless of any per-request logLevel)."""
    await ctx.info("Diagnostic trace logging activated")
    return "Logging evaluated"


@mcp.tool()
async def test_streaming_elicitation(ctx: Context) -> str:  # type: ignore[type-arg]
    """Diagnostic: reports progress, then completes."""
    await ctx.report_progress(50, 100)
    return "Streaming complete"


@mcp.tool()
async def test_trigger_tool_change(ctx: Context) -> str:  # type: ignore[type-arg]
    """Sends notifications/tools/list_changed."""
    await ctx.session.send_tool_list_changed()
    return "Mutation triggered"


@mcp.tool()
async def test_trigger_prompt_change(ctx: Context) -> str:  # type: ignore[type-arg]
    """Sends notifications/prompts/list_changed."""
    await ctx.session.send_prompt_list_changed()
    return "Mutation triggered"


@mcp.tool()
def test_header_param(
    region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})] = "eu",
) -> str:
    """SEP-2243 custom header target (a legacy server does not validate Mcp-Param headers)."""
    return f"region={region}"


@mcp.tool()
def json_schema_2020_12_tool(name: str | None = None, address: dict[str, Any] | None = None) -> str:
    """Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)."""
    return f"JSON Schema 2020-12 tool called with: {json.dumps({'name': name, 'address': address})}"


_schema_tool = mcp._tool_manager.get_tool("json_schema_2020_12_tool")
assert _schema_tool is not None
_schema_tool.parameters = fx.JSON_SCHEMA_2020_12


# ---- tools that push requests to the client --------------------------------


@mcp.tool()
async def test_sampling(prompt: str, ctx: Context) -> str:  # type: ignore[type-arg]
    """Tests server-initiated sampling (LLM completion request)."""
    return f"LLM response: {fx.sampled_text(await push(ctx, fx.sample(prompt, 100)))}"


@mcp.tool()
async def test_elicitation(message: str, ctx: Context) -> str:  # type: ignore[type-arg]
    """Tests server-initiated elicitation (user input request)."""
    answer = await push(ctx, fx.form(message, fx.ELICIT_RESPONSE_PROPS, ["response"]))
    return "User response: " + fx.elicitation_summary(answer)


@mcp.tool()
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:  # type: ignore[type-arg]
    """Tests elicitation with default values per SEP-1034."""
    answer = await push(ctx, fx.form(fx.SEP1034_MESSAGE, fx.SEP1034_PROPS, []))
    return "Elicitation completed: " + fx.elicitation_summary(answer)


@mcp.tool()
async def test_elicitation_sep1330_enums(ctx: Context) -> str:  # type: ignore[type-arg]
    """Tests elicitation with enum schema improvements per SEP-1330."""
    answer = await push(ctx, fx.form(fx.SEP1330_MESSAGE, fx.SEP1330_PROPS, []))
    return "Elicitation completed: " + fx.elicitation_summary(answer)


@mcp.tool()
async def test_missing_capability(ctx: Context) -> str:  # type: ignore[type-arg]
    """Needs sampling; pushed even to a client that did not declare it (as legacy servers do)."""
    await push(ctx, fx.sample("Say hello", 10))
    return "Success"


@mcp.tool()
async def test_input_required_result_elicitation(ctx: Context) -> str:  # type: ignore[type-arg]
    """MRTR fixture, legacy form: pushes the `user_name` question."""
    return f"Hello, {fx.answer_text(await push(ctx, fx.ASK_NAME), 'name')}!"


@mcp.tool()
async def test_input_required_result_sampling(ctx: Context) -> str:  # type: ignore[type-arg]
    """MRTR fixture, legacy form: pushes the capital question."""
    return f"Sampling result: {fx.sampled_text(await push(ctx, fx.CAPITAL))}"


@mcp.tool()
async def test_input_required_result_list_roots(ctx: Context) -> str:  # type: ignore[type-arg]
    """MRTR fixture, legacy form: pushes roots/list."""
    return f"Found {fx.root_count(await push(ctx, fx.ROOTS))} root(s)"


@mcp.tool()
async def test_input_required_result_request_state(ctx: Context) -> str:  # type: ignore[type-arg]
    """MRTR fixture, legacy form: one confirmation (the gateway supplies requestState)."""
    await push(ctx, fx.CONFIRM)
    return "state-ok: requestState validated"


@mcp.tool()
async def test_input_required_result_multiple_inputs(ctx: Context) -> str:  # type: ignore[type-arg]
    """MRTR fixture, legacy form: elicitation, sampling and roots, one after another."""
    name = fx.answer_text(await push(ctx, fx.ASK_NAME), "name")
    greeting = fx.sampled_text(await push(ctx, fx.GREETING))
    roots = fx.root_count(await push(ctx, fx.ROOTS))
    return f"Name: {name}; Greeting: {greeting}; Roots: {roots}"


@mcp.tool()
async def test_input_required_result_multi_round(ctx: Context) -> str:  # type: ignore[type-arg]
    """MRTR fixture, legacy form: step 1 then step 2."""
    name = fx.answer_text(await push(ctx, fx.STEP1), "name")
    color = fx.answer_text(await push(ctx, fx.STEP2), "color")
    return f"Multi-round complete for {name} who likes {color}"


@mcp.tool()
async def test_input_required_result_tampered_state(ctx: Context) -> str:  # type: ignore[type-arg]
    """MRTR fixture, legacy form: one confirmation (integrity is the gateway's requestState)."""
    await push(ctx, fx.CONFIRM)
    return "integrity-ok: state verified"


@mcp.tool()
async def test_input_required_result_capabilities(ctx: Context) -> str:  # type: ignore[type-arg]
    """MRTR fixture, legacy form: asks only for what the client declared."""
    received = []
    if declared(ctx, "elicitation"):
        await push(ctx, fx.CAP_ELICIT)
        received.append("elicit_input")
    if declared(ctx, "sampling"):
        await push(ctx, fx.CAP_SAMPLE)
        received.append("sample_input")
    return (
        f"capabilities-ok: received {','.join(received)}"
        if received
        else "No supported capabilities declared"
    )


# ---- resources, prompts, legacy-only methods ----------------------------------


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
    return [UserMessage(image()), UserMessage("Please analyze the image above.")]


@mcp.prompt()
async def test_input_required_result_prompt(ctx: Context) -> list[Message]:  # type: ignore[type-arg]
    """MRTR fixture, legacy form: pushes the `user_context` question during prompts/get."""
    context = fx.answer_text(await push(ctx, fx.ASK_CONTEXT), "context")
    return [UserMessage(f"Prompt with context: {context}")]


@mcp.completion()  # type: ignore[no-untyped-call,untyped-decorator]
async def complete(ref: Any, argument: Any, context: Any) -> types.Completion:
    return types.Completion(values=[], total=0, hasMore=False)


_low = mcp._mcp_server


@_low.subscribe_resource()  # type: ignore[no-untyped-call,untyped-decorator]
async def subscribe(uri: Any) -> None:
    return None


@_low.unsubscribe_resource()  # type: ignore[no-untyped-call,untyped-decorator]
async def unsubscribe(uri: Any) -> None:
    return None


@_low.set_logging_level()  # type: ignore[no-untyped-call,untyped-decorator]
async def set_level(level: Any) -> None:
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT/mcp"
    )
    args = parser.parse_args()
    if args.http is None:
        mcp.run("stdio")
        return
    mcp.settings.port = args.http
    mcp.settings.log_level = "WARNING"
    mcp.run("streamable-http")


if __name__ == "__main__":
    main()
