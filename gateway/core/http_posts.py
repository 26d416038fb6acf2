"""What a `POST /mcp` whose head passed (http_requests.post_refusal) is, from
its body: the one classification the HTTP front makes of every POST, whichever
way it then answers it (2026-07-28 basic/transports/streamable-http "Sending
Messages to the Server"; 2025-11-25 basic/transports "Session Management").
Pure: the session a legacy POST names is looked up by the front."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import NamedTuple

from gateway import era, inbound, wire
from gateway.core import http_binding, http_requests


class PostKind(enum.Enum):
    # A 400 whose JSON-RPC body is `refusal`.
    REFUSED = "refused"
    # A modern client's request: no session (2026-07-28).
    MODERN_CALL = "modern-call"
    # A legacy client's request on the session it names.
    LEGACY_CALL = "legacy-call"
    # A legacy client's initialize, with no session yet.
    INITIALIZE = "initialize"
    # A notification, or a client's answer to a server request: 202.
    DELIVERY = "delivery"


class Post(NamedTuple):
    """(A tuple: one is made for every POST.)"""

    kind: PostKind
    msg: wire.Message | None = None
    # The era it speaks (http_requests.post_is_modern).
    modern: bool = False
    session_id: str | None = None
    refusal: wire.Message | None = None


def classify(headers: Mapping[str, str], body: bytes, tools: http_binding.ToolHeaderCache) -> Post:
    """`headers`: lower-case names. Every check that reads the body is here,
    in the order the spec's errors take precedence: JSON-RPC framing, then the
    fields a request's handling reads (-32602 before anything reads a
    progress token or a name), then a modern request's per-request fields and
    the headers that must match its body."""
    try:
        msg = wire.decode(body)
    except wire.InvalidMessage as exc:
        refusal = exc.reply or wire.error_response(None, wire.INVALID_REQUEST, exc.reason)
        return Post(PostKind.REFUSED, refusal=refusal)
    kind = wire.kind_of(msg)
    if kind is wire.Kind.REQUEST or kind is wire.Kind.NOTIFICATION:
        wrong = inbound.problem(msg)
        if wrong is not None:
            msg_id = msg.get("id") if kind is wire.Kind.REQUEST else None
            refusal = wire.gateway_error(
                msg_id,
                wire.INVALID_PARAMS,
                f"Invalid params: {wrong[0]} {wrong[1]}",
                field=wrong[0],
            )
            return Post(PostKind.REFUSED, refusal=refusal)
    session_id = headers.get("mcp-session-id")
    # Once (three rules below ask), and only where it matters: a POST that
    # names a session is legacy whatever its body says.
    body_is_modern = session_id is None and era.is_modern(msg)
    modern = http_requests.post_is_modern(headers, body_is_modern)
    if kind is not wire.Kind.REQUEST:
        return Post(PostKind.DELIVERY, msg, modern, session_id)
    if modern:
        problem = http_binding.modern_request_refusal(headers, msg, tools, body_is_modern)
        if problem is not None:
            return Post(PostKind.REFUSED, refusal=problem)
        return Post(PostKind.MODERN_CALL, msg, True)
    if session_id is None and msg["method"] == "initialize":
        return Post(PostKind.INITIALIZE, msg)
    return Post(PostKind.LEGACY_CALL, msg, False, session_id)
