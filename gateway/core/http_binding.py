"""The Streamable HTTP binding's rules, as pure functions (2026-07-28
basic/transports/streamable-http: "Request Metadata", "Value Encoding",
"Server Validation"; 2025-11-25 basic/transports)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from gateway import era, wire

SENTINEL_PREFIX = "=?base64?"
SENTINEL_SUFFIX = "?="
# "Request Metadata": the methods whose name or uri travels in Mcp-Name.
NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

# The HTTP status of a modern JSON error response ("Protocol Version Header",
# "Server Validation", "Per-request protocol fields").
_STATUS = {
    wire.PARSE_ERROR: 400,
    wire.INVALID_REQUEST: 400,
    wire.INVALID_PARAMS: 400,
    wire.HEADER_MISMATCH: 400,
    wire.MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    wire.UNSUPPORTED_PROTOCOL_VERSION: 400,
    wire.METHOD_NOT_FOUND: 404,
}


UNAUTHORIZED_REASON = "upstream-unauthorized"


def auth_refusal(reply: wire.Message) -> tuple[int, str | None] | None:
    """(status, WWW-Authenticate) when `reply` is the upstream refusing the
    credential it was sent (HTTP 401/403), else None. With the client's own
    Authorization forwarded, that refusal is the client's to see, challenge
    and all, so an OAuth client can find its authorization server."""
    error = reply.get("error")
    data = error.get("data") if isinstance(error, dict) else None
    if not isinstance(data, dict) or data.get("source") != wire.GATEWAY_SOURCE:
        return None
    status = data.get("status")
    if data.get("reason") != UNAUTHORIZED_REASON or status not in (401, 403):
        return None
    challenge = data.get("wwwAuthenticate")
    return status, challenge if isinstance(challenge, str) else None


def status_for(reply: wire.Message) -> int:
    error = reply.get("error")
    if isinstance(error, dict):
        return _STATUS.get(error.get("code"), 200)  # type: ignore[arg-type]
    return 200


def _safe(value: str) -> bool:
    # Visible ASCII, space and tab, no leading/trailing whitespace.
    return (
        all(c == "\t" or 0x20 <= ord(c) <= 0x7E for c in value)
        and value == value.strip(" \t")
        and not (value.startswith(SENTINEL_PREFIX) and value.endswith(SENTINEL_SUFFIX))
    )


def encode_value(value: str) -> str:
    """A header value for `value`: plain when safe, else the base64 sentinel."""
    if _safe(value):
        return value
    return SENTINEL_PREFIX + base64.b64encode(value.encode()).decode() + SENTINEL_SUFFIX


def decode_value(raw: str) -> str | None:
    """The value a header carries; None if it is malformed."""
    raw = raw.strip(" \t")
    if raw.startswith(SENTINEL_PREFIX) and raw.endswith(SENTINEL_SUFFIX):
        body = raw[len(SENTINEL_PREFIX) : -len(SENTINEL_SUFFIX)]
        try:
            return base64.b64decode(body, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
    if not all(c == "\t" or 0x20 <= ord(c) <= 0x7E for c in raw):
        return None
    return raw


def header_text(value: object) -> str | None:
    """An argument's header form ("Type conversion"), or None for no header."""
    if value is None:
        return None
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        # An integer the JSON decoder saw as 42.0 travels as "42".
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return value
    return None  # not a primitive: the annotation cannot apply


def _same(header: str, body: Any) -> bool:
    if isinstance(body, int | float) and not isinstance(body, bool):
        # "Server Validation": compare integers numerically (42.0 == 42).
        try:
            return float(header) == float(body)
        except ValueError:
            return False
    return header == header_text(body)


def param_headers(tool: Mapping[str, Any]) -> dict[str, str]:
    """`Mcp-Param-*` names (lower case) → argument names, from a tool's
    `x-mcp-header` annotations."""
    schema = tool.get("inputSchema")
    props = schema.get("properties") if isinstance(schema, dict) else None
    out: dict[str, str] = {}
    if isinstance(props, dict):
        for prop, spec in props.items():
            name = spec.get("x-mcp-header") if isinstance(spec, dict) else None
            if isinstance(name, str) and name:
                out[f"mcp-param-{name.lower()}"] = prop
    return out


def mismatch(msg_id: wire.RequestId | None, why: str) -> wire.Message:
    return wire.error_response(msg_id, wire.HEADER_MISMATCH, f"Header mismatch: {why}")


def check_modern_headers(
    headers: Mapping[str, str],
    msg: wire.Message,
    tool_params: Mapping[str, str] | None = None,
) -> wire.Message | None:
    """The -32020 answer for a modern POST whose headers disagree with its
    body, or None. `headers` has lower-case names; `tool_params` maps the
    called tool's Mcp-Param-* headers to argument names, when known."""
    msg_id = msg.get("id")
    meta = era.meta_of(msg) or {}
    version = headers.get("mcp-protocol-version")
    if version is None:
        return mismatch(msg_id, "the MCP-Protocol-Version header is required")
    if version.strip() != meta.get(era.PROTOCOL_VERSION):
        return mismatch(msg_id, f"MCP-Protocol-Version {version!r} does not match _meta")
    method = headers.get("mcp-method")
    if method is None:
        return mismatch(msg_id, "the Mcp-Method header is required")
    if method.strip() != msg.get("method"):
        return mismatch(msg_id, f"Mcp-Method {method!r} does not match the body's method")
    params = msg.get("params") or {}
    field = NAMED.get(msg["method"])
    if field is not None:
        raw = headers.get("mcp-name")
        if raw is None:
            return mismatch(msg_id, "the Mcp-Name header is required for " + msg["method"])
        name = decode_value(raw)
        if name is None or name != params.get(field):
            return mismatch(msg_id, f"Mcp-Name does not match the body's {field}")
    if msg["method"] == "tools/call" and tool_params:
        args = params.get("arguments") or {}
        for header, prop in tool_params.items():
            expected = header_text(args.get(prop)) if isinstance(args, dict) else None
            raw = headers.get(header)
            if expected is None:
                continue
            if raw is None:
                return mismatch(msg_id, f"the {header} header is required (argument {prop!r})")
            value = decode_value(raw)
            if value is None:
                return mismatch(msg_id, f"the {header} header has invalid characters")
            if not _same(value, args.get(prop)):
                return mismatch(msg_id, f"the {header} header does not match argument {prop!r}")
    return None


def accepts_json_and_sse(accept: str | None) -> bool:
    """2026-07-28 "Sending Messages" 2: Accept lists both content types."""
    if not accept:
        return False
    kinds = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    return "*/*" in kinds or {"application/json", "text/event-stream"} <= kinds
