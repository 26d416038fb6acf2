"""The one classification of a POST /mcp (core/http_posts.py), which the
HTTP front's every way of answering uses (issue #30, "HTTP front: one pure
classification of a POST"). 2026-07-28 basic/transports/streamable-http
"Sending Messages to the Server"; 2025-11-25 "Session Management"."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from gateway import era, wire
from gateway.core import http_binding
from gateway.core.http_posts import Post, PostKind, classify

META = {
    era.PROTOCOL_VERSION: "2026-07-28",
    era.CLIENT_CAPABILITIES: {},
}
MODERN_HEADERS = {
    "mcp-protocol-version": "2026-07-28",
    "mcp-method": "tools/list",
}


def post(headers: dict[str, str], body: Any) -> Post:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return classify(headers, raw, http_binding.ToolHeaderCache())


def test_a_modern_request_is_a_modern_call() -> None:
    got = post(MODERN_HEADERS, wire.request(1, "tools/list", {"_meta": META}))
    assert got.kind is PostKind.MODERN_CALL and got.modern and got.msg is not None


def test_a_legacy_request_names_its_session() -> None:
    got = post({"mcp-session-id": "s-1"}, wire.request(2, "tools/list", {}))
    assert got.kind is PostKind.LEGACY_CALL and got.session_id == "s-1" and not got.modern


def test_an_initialize_without_a_session_opens_one() -> None:
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c"}}
    assert post({}, wire.request(3, "initialize", params)).kind is PostKind.INITIALIZE


def test_notifications_and_answers_are_deliveries() -> None:
    note = post({"mcp-session-id": "s"}, wire.notification("notifications/initialized"))
    answer = post({"mcp-session-id": "s"}, wire.result_response("gw-1", {}))
    assert note.kind is answer.kind is PostKind.DELIVERY
    assert note.session_id == "s"


def test_framing_comes_before_fields_and_fields_before_headers() -> None:
    """JSON-RPC framing first (-32700), then a field of the wrong shape
    (-32602 naming it), then a modern request's headers against its body."""
    assert post(MODERN_HEADERS, b"{").refusal["error"]["code"] == wire.PARSE_ERROR  # type: ignore[index]
    bad = wire.request(4, "tools/call", {"name": 7, "_meta": META})
    refused = post({"mcp-protocol-version": "2026-07-28", "mcp-method": "nope"}, bad)
    assert refused.kind is PostKind.REFUSED and refused.refusal is not None
    assert refused.refusal["error"]["code"] == wire.INVALID_PARAMS
    assert refused.refusal["id"] == 4
    mismatch = post(
        {"mcp-protocol-version": "2026-07-28", "mcp-method": "prompts/list"},
        wire.request(5, "tools/list", {"_meta": META}),
    )
    assert mismatch.kind is PostKind.REFUSED


def test_a_modern_version_header_without_the_fields_is_refused() -> None:
    got = post(MODERN_HEADERS, wire.request(6, "tools/list", {}))
    assert got.kind is PostKind.REFUSED and got.refusal is not None
    assert got.refusal["error"]["code"] == wire.INVALID_PARAMS


HEADER_NAMES = st.sampled_from(
    ["mcp-session-id", "mcp-protocol-version", "mcp-method", "mcp-name", "accept"]
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
MESSAGES = st.fixed_dictionaries(
    {"jsonrpc": st.sampled_from(["2.0", "1.0"])},
    optional={
        "id": st.integers(-(2**53), 2**53) | st.text(max_size=4) | st.none(),
        "method": st.sampled_from(["tools/list", "tools/call", "initialize", "ping", "x"]),
        "params": st.dictionaries(
            st.sampled_from(["name", "_meta", "arguments", "uri"]), JSON, max_size=3
        ),
        "result": JSON,
        "error": JSON,
    },
)


@given(
    headers=st.dictionaries(HEADER_NAMES, st.text(max_size=12), max_size=4),
    body=MESSAGES.map(orjson.dumps) | st.binary(max_size=64),
)
def test_any_post_is_classified_without_raising(headers: dict[str, str], body: bytes) -> None:
    got = classify(headers, body, http_binding.ToolHeaderCache())
    if got.kind is PostKind.REFUSED:
        assert got.refusal is not None and "error" in got.refusal and got.msg is None
    else:
        assert got.msg is not None and got.refusal is None
    if got.kind in (PostKind.MODERN_CALL, PostKind.LEGACY_CALL, PostKind.INITIALIZE):
        assert got.msg is not None and wire.kind_of(got.msg) is wire.Kind.REQUEST
    if got.kind is PostKind.LEGACY_CALL:
        assert not got.modern
