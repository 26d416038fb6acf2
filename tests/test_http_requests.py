"""What the HTTP front decides from a request's head and body, with no I/O
(gateway/core/http_requests.py). The front's tests (test_http_front*.py)
check the same answers over HTTP; these pin each rule down on its own."""

from __future__ import annotations

from typing import Any

import pytest

from gateway import era, wire
from gateway.core import http_requests

META = {
    era.PROTOCOL_VERSION: "2026-07-28",
    era.CLIENT_CAPABILITIES: {},
    era.CLIENT_INFO: {"name": "test", "version": "1"},
}
JSON_POST = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def modern(method: str, **params: Any) -> wire.Message:
    return wire.request(1, method, {**params, "_meta": META})


@pytest.mark.parametrize(
    "accept",
    [
        "application/json, text/event-stream",
        "text/event-stream;q=0.9, Application/JSON",
        "*/*",
    ],
)
def test_a_post_accepting_both_content_types_passes(accept: str) -> None:
    """2026-07-28 "Sending Messages" 2: "The client MUST include an `Accept`
    header listing both `application/json` and `text/event-stream`"."""
    assert http_requests.accepts_json_and_sse(accept)
    assert http_requests.post_refusal({**JSON_POST, "accept": accept}, 1024) is None


@pytest.mark.parametrize("accept", [None, "", "application/json", "text/event-stream", "text/*"])
def test_a_post_not_accepting_both_is_406(accept: str | None) -> None:
    headers = {k: v for k, v in JSON_POST.items() if k != "accept"}
    if accept is not None:
        headers["accept"] = accept
    refusal = http_requests.post_refusal(headers, 1024)
    assert refusal is not None and refusal.status == 406 and not refusal.close


@pytest.mark.parametrize("ctype", [None, "text/plain", "application/jsonx"])
def test_a_post_body_that_is_not_json_is_415(ctype: str | None) -> None:
    """Sending Messages 4: the body is a JSON-RPC message."""
    headers = {k: v for k, v in JSON_POST.items() if k != "content-type"}
    if ctype is not None:
        headers["content-type"] = ctype
    refusal = http_requests.post_refusal(headers, 1024)
    assert refusal is not None and refusal.status == 415
    assert (
        http_requests.post_refusal({**JSON_POST, "content-type": "Application/JSON; x"}, 9) is None
    )


def test_a_declared_length_over_the_limit_is_413_and_closes() -> None:
    """README "Configuration", `[gateway] max_message_bytes`: "messages over
    this size are refused ... without being buffered"; the body unread, the
    connection is closed rather than drained."""
    refusal = http_requests.post_refusal({**JSON_POST, "content-length": "1025"}, 1024)
    assert refusal == http_requests.HeadRefusal(
        413, "Payload Too Large: the limit is 1024 bytes", close=True
    )
    assert http_requests.post_refusal({**JSON_POST, "content-length": "1024"}, 1024) is None
    assert http_requests.post_refusal({**JSON_POST, "content-length": "-5"}, 1024) is None


def test_only_a_legacy_session_has_a_get_stream() -> None:
    """2026-07-28 "Earlier Streamable HTTP Revisions": "HTTP GET or DELETE to
    the MCP endpoint: respond with `405 Method Not Allowed`"; 2025-11-25
    "Listening for Messages from the Server": the client "MUST include an
    `Accept` header, listing `text/event-stream`"."""
    assert http_requests.get_refusal({"accept": "text/event-stream"}) == (
        http_requests.HeadRefusal(405, "Method not allowed: use POST (or subscriptions/listen)")
    )
    refusal = http_requests.get_refusal({"mcp-session-id": "s", "accept": "application/json"})
    assert refusal is not None and refusal.status == 406
    assert http_requests.get_refusal({"mcp-session-id": "s", "accept": "text/event-stream"}) is None


def test_which_era_a_post_speaks() -> None:
    """A session id makes it legacy (2025-11-25 "Session Management"); else
    the per-request fields, or a modern MCP-Protocol-Version header (2026-07-28
    "Protocol Version Header"), make it modern."""
    legacy = era.is_modern(wire.request(1, "tools/list", {}))
    body = era.is_modern(modern("tools/list"))
    assert http_requests.post_is_modern({}, body)
    assert http_requests.post_is_modern({"mcp-protocol-version": " 2026-07-28 "}, legacy)
    assert not http_requests.post_is_modern({"mcp-protocol-version": "2025-11-25"}, legacy)
    assert not http_requests.post_is_modern({}, legacy)
    assert not http_requests.post_is_modern({"mcp-session-id": "s"}, body)


def test_a_modern_request_without_the_per_request_fields_is_invalid_params() -> None:
    """2026-07-28 basic "Per-request protocol fields": "fields marked as
    required MUST be included on every request"; -32602 under the request's id."""
    error = http_requests.missing_request_fields(wire.request(4, "tools/list", {}))
    assert error["id"] == 4
    assert error["error"]["code"] == wire.INVALID_PARAMS
    assert era.PROTOCOL_VERSION in error["error"]["message"]
