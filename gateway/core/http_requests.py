"""What the HTTP front decides about a request from its head and body, with
no I/O (2026-07-28 basic/transports/streamable-http "Sending Messages to the
Server", "Protocol Version Header", "Per-request protocol fields"; 2025-11-25
basic/transports "Listening for Messages from the Server", "Session
Management"): the refusals a head alone earns, and which era a POST speaks.
The headers a modern request must carry are the binding's (http_binding)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from gateway import era, wire


@dataclass(frozen=True, slots=True)
class HeadRefusal:
    """The HTTP status and message a request's head alone earns; `close`:
    its body was not read, so the connection is closed rather than drained."""

    status: int
    message: str
    close: bool = False


@functools.lru_cache(maxsize=64)  # a client sends the same Accept each time
def accepts_json_and_sse(accept: str | None) -> bool:
    """2026-07-28 "Sending Messages" 2: Accept lists both content types."""
    if not accept:
        return False
    kinds = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    return "*/*" in kinds or {"application/json", "text/event-stream"} <= kinds


def post_refusal(headers: Mapping[str, str], max_bytes: int) -> HeadRefusal | None:
    """A POST's refusal before its body is read: an Accept without both
    content types (406), a body that is not JSON (415), a declared length
    over the message limit (413). `headers` has lower-case names."""
    if not accepts_json_and_sse(headers.get("accept")):
        return HeadRefusal(
            406, "Not Acceptable: Accept must list application/json and text/event-stream"
        )
    return body_refusal(headers, max_bytes)


def body_refusal(
    headers: Mapping[str, str], max_bytes: int, assumed_type: str = ""
) -> HeadRefusal | None:
    """A message body's refusal from the head alone: not JSON (415), a
    declared length over the message limit (413). `assumed_type`: the
    content type when the head names none (HTTP+SSE clients may send none)."""
    ctype = headers.get("content-type", assumed_type)
    if ctype.split(";")[0].strip().lower() != "application/json":
        return HeadRefusal(415, "Unsupported Media Type: the body must be application/json")
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        return HeadRefusal(413, f"Payload Too Large: the limit is {max_bytes} bytes", close=True)
    return None


def get_refusal(headers: Mapping[str, str]) -> HeadRefusal | None:
    """A GET's refusal: only a legacy session has a GET stream (2026-07-28
    has no GET endpoint for modern clients), and it must accept SSE."""
    if headers.get("mcp-session-id") is None:
        return HeadRefusal(405, "Method not allowed: use POST (or subscriptions/listen)")
    if "text/event-stream" not in headers.get("accept", ""):
        return HeadRefusal(406, "Not Acceptable: GET needs Accept: text/event-stream")
    return None


def post_is_modern(headers: Mapping[str, str], body_is_modern: bool) -> bool:
    """Which era a POST speaks: legacy when it names a session; else modern
    when its body carries the per-request fields (`body_is_modern`:
    era.is_modern of it), or its MCP-Protocol-Version header names a modern
    version (then a body without them is refused, `missing_request_fields`)."""
    if headers.get("mcp-session-id") is not None:
        return False
    return body_is_modern or headers.get("mcp-protocol-version", "").strip() in era.MODERN_VERSIONS


def missing_request_fields(msg: wire.Message) -> wire.Message:
    """2026-07-28 "Per-request protocol fields": the -32602 (HTTP 400) a
    modern request without them is answered."""
    return wire.error_response(
        msg.get("id"),
        wire.INVALID_PARAMS,
        f"Invalid params: _meta[{era.PROTOCOL_VERSION!r}] and "
        f"_meta[{era.CLIENT_CAPABILITIES!r}] are required",
    )
