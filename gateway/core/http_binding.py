"""The Streamable HTTP binding's rules, as pure functions (2026-07-28
basic/transports/streamable-http: "Request Metadata", "Custom Headers from
Tool Parameters", "Value Encoding", "Server Validation"; 2025-11-25
basic/transports), written once for both sides: the HTTP back writes the
headers a modern request carries, the HTTP front checks them against the body,
and both read a tool's `x-mcp-header` annotations with the same parser."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway import era, wire
from gateway.core import http_requests

SENTINEL_PREFIX = "=?base64?"
SENTINEL_SUFFIX = "?="
# "Standard Request Headers": the methods whose name or uri travels in Mcp-Name.
# The tasks extension routes its requests by task id the same way (SEP-2663
# "Streamable HTTP: Routing Headers").
NAMED = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
PARAM_PREFIX = "Mcp-Param-"
# RFC 9110 §5.1 field-name token (`1*tchar`): "Schema Extension".
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_PRIMITIVE = frozenset({"string", "integer", "boolean"})
# Schema keywords whose values are instance data, not subschemas: an
# "x-mcp-header" key inside a default value is data, not an annotation.
_DATA_KEYWORDS = frozenset({"default", "examples", "example", "const", "enum"})

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
    # Visible ASCII and tab only: ASCII is printable exactly from 0x20 to 0x7E.
    if not (raw.isascii() and (raw.isprintable() or raw.replace("\t", " ").isprintable())):
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
        # "Server Validation": compare numbers numerically (42.0 == 42), and
        # exactly: through a float, integers past 2**53 that differ compare
        # equal, and the header an intermediary read would not be the body's.
        # decimal only here: most gateways never see a numeric Mcp-Param
        # header, and would carry the module in memory for nothing.
        from decimal import Decimal, InvalidOperation

        try:
            return Decimal(header) == body
        except InvalidOperation:
            return False
    return header == header_text(body)


# -- x-mcp-header annotations ("Schema Extension") -------------------------------
class InvalidAnnotation(ValueError):
    """A tool whose `x-mcp-header` annotations break the spec's constraints."""


@dataclass(frozen=True, slots=True)
class HeaderParam:
    """One annotated argument: where it is in `arguments`, and its header name."""

    path: tuple[str, ...]
    name: str

    @property
    def header(self) -> str:
        return PARAM_PREFIX + self.name


def tool_header_params(tool: Mapping[str, Any]) -> tuple[HeaderParam, ...]:
    """The annotated arguments of a tool definition; InvalidAnnotation if any
    annotation breaks "Schema Extension" (a client must then exclude the tool
    from tools/list; a server expects no headers for it)."""
    found: list[HeaderParam] = []
    _walk(tool.get("inputSchema"), (), True, found)
    seen: set[str] = set()
    for param in found:
        key = param.name.lower()
        if key in seen:
            raise InvalidAnnotation(f"x-mcp-header {param.name!r} is used twice")
        seen.add(key)
    return tuple(found)


def _walk(node: object, path: tuple[str, ...], reachable: bool, out: list[HeaderParam]) -> None:
    """Collect annotations; `reachable` says the path from the root is made of
    `properties` keys only ("statically reachable")."""
    if isinstance(node, list):
        for item in node:
            _walk(item, path, False, out)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key == "x-mcp-header":
            out.append(_annotation(node, value, path, reachable))
        elif key == "properties" and isinstance(value, dict):
            for name, sub in value.items():
                _walk(sub, (*path, str(name)), reachable, out)
        elif key not in _DATA_KEYWORDS:
            _walk(value, path, False, out)


def _annotation(
    schema: dict[str, Any], name: object, path: tuple[str, ...], reachable: bool
) -> HeaderParam:
    where = "/".join(path) or "the schema root"
    if not reachable or not path:
        raise InvalidAnnotation(f"x-mcp-header at {where} is not statically reachable")
    if not isinstance(name, str) or not _TOKEN.fullmatch(name):
        raise InvalidAnnotation(f"x-mcp-header {name!r} at {where} is not an HTTP token")
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    # A schema without "type" cannot be shown to break the rule: accept it.
    if any(k != "null" and k not in _PRIMITIVE for k in kinds):
        raise InvalidAnnotation(f"x-mcp-header {name!r} at {where} is on a {kind!r} property")
    return HeaderParam(path, name)


def value_at(arguments: object, path: tuple[str, ...]) -> object:
    """The argument at an annotated path, None where there is none."""
    value = arguments
    for step in path:
        value = value.get(step) if isinstance(value, dict) else None
    return value


# -- the client side: the headers a modern request carries ------------------------
def _safe_token_value(value: object) -> str | None:
    """A value for a header the spec gives no encoding (version, method)."""
    if isinstance(value, str) and value and all("!" <= ch <= "~" for ch in value):
        return value
    return None


def param_headers(params: tuple[HeaderParam, ...], arguments: object) -> dict[str, str]:
    """The `Mcp-Param-*` headers of one call ("Client Behavior" 3-5): a value
    absent or null at the annotated path means no header."""
    headers: dict[str, str] = {}
    for param in params:
        text = header_text(value_at(arguments, param.path))
        if text is not None:
            headers[param.header] = encode_value(text)
    return headers


def modern_headers(
    msg: wire.Message, params_of: Mapping[str, tuple[HeaderParam, ...]]
) -> dict[str, str]:
    """MCP-Protocol-Version, Mcp-Method, Mcp-Name and Mcp-Param-* of a modern
    request; `params_of` maps tool names to their annotated arguments."""
    meta = era.meta_of(msg) or {}
    headers: dict[str, str] = {}
    version = _safe_token_value(meta.get(era.PROTOCOL_VERSION))
    if version is not None:
        headers["MCP-Protocol-Version"] = version
    method = msg.get("method")
    safe_method = _safe_token_value(method)
    if safe_method is not None:
        headers["Mcp-Method"] = safe_method
    raw = msg.get("params")
    params: dict[str, Any] = raw if isinstance(raw, dict) else {}
    source = NAMED.get(method) if isinstance(method, str) else None
    if source is not None and isinstance(params.get(source), str):
        headers["Mcp-Name"] = encode_value(params[source])
    if method == "tools/call" and isinstance(params.get("name"), str):
        headers.update(param_headers(params_of.get(params["name"], ()), params.get("arguments")))
    return headers


# -- the server side: do the headers agree with the body? -------------------------


def mismatch(msg_id: wire.RequestId | None, why: str) -> wire.Message:
    return wire.error_response(msg_id, wire.HEADER_MISMATCH, f"Header mismatch: {why}")


def check_modern_headers(  # noqa: PLR0911 - each header's check answers on its own
    headers: Mapping[str, str],
    msg: wire.Message,
    tool_params: tuple[HeaderParam, ...] | None = None,
) -> wire.Message | None:
    """The -32020 answer for a modern POST whose headers disagree with its
    body, or None. `headers` has lower-case names; `tool_params` are the
    called tool's annotated arguments, when known."""
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
        args = params.get("arguments")
        for param in tool_params:
            header = param.header.lower()
            prop = "/".join(param.path)
            body = value_at(args, param.path)
            raw = headers.get(header)
            if header_text(body) is None:
                # No value (absent, null, not a primitive): a client sends no
                # header, and one that does names a value the body does not
                # carry, which is what "Server Validation" exists to refuse.
                if raw is not None:
                    return mismatch(msg_id, f"the {header} header names no argument {prop!r}")
                continue
            if raw is None:
                return mismatch(msg_id, f"the {header} header is required (argument {prop!r})")
            value = decode_value(raw)
            if value is None:
                return mismatch(msg_id, f"the {header} header has invalid characters")
            if not _same(value, body):
                return mismatch(msg_id, f"the {header} header does not match argument {prop!r}")
    return None


class ToolHeaderCache:
    """The x-mcp-header parameters of each tool, learnt from tools/list
    results: the front validates the Mcp-Param-* headers of later calls with
    them, the back writes them."""

    def __init__(self) -> None:
        self._tools: dict[str, tuple[HeaderParam, ...]] = {}

    def params(self, name: str) -> tuple[HeaderParam, ...] | None:
        return self._tools.get(name)

    def known(self) -> dict[str, tuple[HeaderParam, ...]]:
        return dict(self._tools)

    @property
    def by_name(self) -> Mapping[str, tuple[HeaderParam, ...]]:
        """The table itself (no copy), for `modern_headers`."""
        return self._tools

    def observe(self, reply: dict[str, Any]) -> None:
        result = reply.get("result")
        tools = result.get("tools") if isinstance(result, dict) else None
        if isinstance(tools, list):
            self.take(tools)

    def take(self, tools: list[Any]) -> tuple[list[Any], list[tuple[str, str]]]:
        """Learn the annotated arguments of listed tools. A tool whose
        annotations are invalid is forgotten and left out: a client excludes
        it from tools/list ("Schema Extension"), so no header of a call to it
        is one either side knows. Returns the tools kept and, for each one
        left out, its name and why."""
        kept: list[Any] = []
        excluded: list[tuple[str, str]] = []
        for tool in tools:
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                kept.append(tool)
                continue
            try:
                self._tools[tool["name"]] = tool_header_params(tool)
            except InvalidAnnotation as exc:
                self._tools.pop(tool["name"], None)
                excluded.append((tool["name"], str(exc)))
                continue
            kept.append(tool)
        return kept, excluded


def modern_request_refusal(
    headers: Mapping[str, str], msg: dict[str, Any], tools: ToolHeaderCache, body_is_modern: bool
) -> dict[str, Any] | None:
    """The 400 answer to a modern request over HTTP, or None: its `_meta`
    without the per-request fields (2026-07-28 "Per-request protocol
    fields"; `body_is_modern`: era.is_modern of it), or headers that do not
    match its body (check_modern_headers)."""
    if not body_is_modern:
        return http_requests.missing_request_fields(msg)
    name = (msg.get("params") or {}).get("name")
    return check_modern_headers(headers, msg, tools.params(name) if isinstance(name, str) else None)
