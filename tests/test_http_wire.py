"""What the HTTP back makes of each answer an upstream gives, with no I/O
(gateway/backs/http_wire.py): the SSE parser, the session id and version an
`initialize` answer sets up, the refusals that call for a retry or a
fallback, a GET stream's status, a JSON answer's body. The HTTP back's tests
(test_http_back*.py) check the same rules over real HTTP; these pin each
decision down on its own."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import era, wire
from gateway.backs import http_wire
from gateway.core import upstream_checks

META = {
    era.PROTOCOL_VERSION: "2026-07-28",
    era.CLIENT_CAPABILITIES: {},
    era.CLIENT_INFO: {"name": "test", "version": "1"},
}


def modern(method: str, **params: Any) -> wire.Message:
    return wire.request(1, method, {**params, "_meta": META})


def legacy(method: str, **params: Any) -> wire.Message:
    return wire.request(1, method, params)


# -- the SSE parser -----------------------------------------------------------------------


def test_sse_parser_handles_line_endings_comments_priming_and_split_chunks() -> None:
    parser = http_wire.SseParser(max_bytes=1000)
    stream = (
        b'\xef\xbb\xbfid: 1\r\ndata:\r\n\r\n: comment\n\nevent: message\ndata: {"a":\rdata: 1}\n\n'
    )
    events = [e for i in range(len(stream)) for e in parser.feed(stream[i : i + 1])]
    events += parser.close()
    assert [(e.id, e.data) for e in events] == [("1", ""), ("1", '{"a":\n1}')]


def test_sse_parser_drops_oversized_events() -> None:
    parser = http_wire.SseParser(max_bytes=20)
    events = parser.feed(b"data: " + b"x" * 50 + b"\n\ndata: ok\n\n")
    assert [e.data for e in events] == ["ok"] and parser.oversized == 1


# -- what an initialize answer sets up ----------------------------------------------------


def test_the_session_id_comes_with_a_legacy_initialize_only() -> None:
    """2025-11-25 "Session Management": a server "MAY assign a session ID at
    initialization time, by including it in an `MCP-Session-Id` header on the
    HTTP response containing the `InitializeResult`"."""
    initialize = legacy("initialize", protocolVersion="2025-11-25")
    assert http_wire.session_id_from(initialize, "sess-1") == "sess-1"
    assert http_wire.session_id_from(initialize, None) is None
    assert http_wire.session_id_from(legacy("tools/list"), "sess-1") is None
    assert http_wire.session_id_from(modern("initialize"), "sess-1") is None


@pytest.mark.parametrize("header", ["", "a b", "sess\x7f", "séance"])
def test_a_session_id_of_other_than_visible_ascii_is_ignored(header: str) -> None:
    """ "The session ID MUST only contain visible ASCII characters (ranging
    from 0x21 to 0x7E)"."""
    assert http_wire.session_id_from(legacy("initialize"), header) is None


def test_the_negotiated_version_is_the_results_protocol_version() -> None:
    """2025-11-25 "Protocol Version Header": the client sends the version
    negotiated at initialization on every later request."""
    assert http_wire.negotiated_version(wire.result_response(1, {"protocolVersion": "x"})) == "x"
    assert http_wire.negotiated_version(wire.result_response(1, {"protocolVersion": 3})) is None
    assert http_wire.negotiated_version(wire.error_response(1, wire.INTERNAL_ERROR, "no")) is None


# -- refusals that call for something more --------------------------------------------------


def test_only_a_modern_tools_call_refused_with_header_mismatch_is_retried() -> None:
    """2026-07-28 "Client Behavior": on a HeaderMismatch the client "SHOULD
    call `tools/list` to check for changes to the tool's `inputSchema`, then
    retry the original request"."""
    mismatch = wire.error_response(1, wire.HEADER_MISMATCH, "Header mismatch")
    other = wire.error_response(1, wire.INVALID_PARAMS, "Invalid params")
    call = modern("tools/call", name="t", arguments={})
    assert http_wire.asks_header_refresh(call, mismatch)
    assert not http_wire.asks_header_refresh(call, other)
    assert not http_wire.asks_header_refresh(modern("prompts/get", name="p"), mismatch)
    assert not http_wire.asks_header_refresh(legacy("tools/call", name="t"), mismatch)
    assert not http_wire.asks_header_refresh(call, {"jsonrpc": "2.0", "id": 1, "error": "x"})


@pytest.mark.parametrize("status", [400, 404, 405])
def test_a_refused_legacy_initialize_may_be_an_http_sse_endpoint(status: int) -> None:
    """2025-11-25 "Backwards Compatibility": "If it fails with the following
    HTTP status codes "400 Bad Request", "404 Not Found" or "405 Method Not
    Allowed"", GET the URL and wait for an `endpoint` event."""
    refusal = http_wire.refusal_reply(1, status, b"nope")
    assert http_wire.may_be_http_sse(legacy("initialize"), status, refusal)


def test_no_http_sse_fallback_otherwise() -> None:
    """Other statuses, a failure below HTTP, other methods, a modern
    request, and (2026-07-28 "Backward Compatibility") a modern error body
    all mean the server is no HTTP+SSE endpoint."""
    initialize = legacy("initialize")
    refusal = http_wire.refusal_reply(1, 404, b"nope")
    assert not http_wire.may_be_http_sse(initialize, 401, http_wire.refusal_reply(1, 401, None))
    assert not http_wire.may_be_http_sse(initialize, 500, http_wire.refusal_reply(1, 500, None))
    assert not http_wire.may_be_http_sse(initialize, None, http_wire.failure_reply(1, "down"))
    assert not http_wire.may_be_http_sse(legacy("tools/list"), 404, refusal)
    assert not http_wire.may_be_http_sse(modern("initialize"), 404, refusal)
    code = next(iter(era.MODERN_ERRORS))
    body = orjson.dumps(wire.error_response(None, code, "modern"))
    assert not http_wire.may_be_http_sse(initialize, 400, http_wire.refusal_reply(1, 400, body))


# -- a GET for an event stream ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "ctype", "sent_session", "outcome"),
    [
        (200, "text/event-stream", True, http_wire.STREAM),
        (200, "text/event-stream; charset=utf-8", False, http_wire.STREAM),
        (200, "application/json", True, http_wire.GET_REFUSED),
        (404, "", True, http_wire.SESSION_GONE),
        (404, "", False, http_wire.GET_REFUSED),
        (405, "", True, http_wire.NO_GET_STREAM),
        (400, "", True, http_wire.GET_REFUSED),
        (403, "", True, http_wire.GET_REFUSED),
        (500, "", True, http_wire.GET_AGAIN),
        (503, "text/event-stream", True, http_wire.GET_AGAIN),
        (302, "", True, http_wire.GET_AGAIN),
    ],
)
def test_what_a_get_for_an_event_stream_got(
    status: int, ctype: str, sent_session: bool, outcome: str
) -> None:
    """2025-11-25 "Listening for Messages from the Server": the server "MUST
    either return `Content-Type: text/event-stream` in response to this HTTP
    GET, or else return HTTP 405"; "Session Management": 404 on a session id
    ends the session;
    "Resumability and Redelivery" reopens with the same GET. A 5xx is an
    outage, tried again."""
    assert http_wire.get_outcome(status, ctype, sent_session) == outcome


# -- a JSON answer's body ---------------------------------------------------------------------


def test_a_json_answer_is_its_messages_each_screened() -> None:
    """2025-11-25 "Sending Messages to the Server": the server answers a POST
    with "Content-Type: application/json, to return one JSON object"; a
    batch is read message by message, and a malformed one is refused alone."""
    reply = wire.result_response(1, {})
    note = wire.notification("notifications/message", {"level": "info", "data": "x"})
    body = orjson.dumps([note, reply, {"jsonrpc": "2.0", "id": 1}])
    items = http_wire.json_answer(1, 200, "application/json", body)
    assert isinstance(items, list)
    assert items[:2] == [note, reply]
    assert isinstance(items[2], upstream_checks.Refused)
    assert http_wire.json_answer(1, 200, "application/json", orjson.dumps(reply)) == [reply]


@pytest.mark.parametrize(
    ("status", "ctype", "body", "why"),
    [
        (202, "application/json", b"", "HTTP 202 with no reply"),
        (200, "application/json", b"", "HTTP 200 with no reply"),
        (200, "text/plain", b"{}", "unexpected content type text/plain"),
        (200, "", b"{}", "unexpected content type (none)"),
        (200, "application/json", b"{not json", "the HTTP body is not JSON"),
    ],
)
def test_a_json_answer_that_cannot_carry_the_reply_is_malformed(
    status: int, ctype: str, body: bytes, why: str
) -> None:
    """A request is answered with a reply (2025-11-25 "Sending Messages to the
    Server"): a body without one is a malformed reply, under the request's id."""
    answer = http_wire.json_answer(7, status, ctype, body)
    assert isinstance(answer, dict)
    assert answer["id"] == 7 and why in answer["error"]["message"]
    assert answer["error"]["data"]["reason"] == upstream_checks.MALFORMED


# -- redirects (RFC 9110 §15.4; issue #30) -----------------------------------------
URL = "http://127.0.0.1:8000/mcp"


@pytest.mark.parametrize(
    ("method", "status", "location", "to"),
    [
        ("POST", 307, "/mcp/", "http://127.0.0.1:8000/mcp/"),
        ("POST", 308, "real", "http://127.0.0.1:8000/real"),
        ("POST", 307, "http://127.0.0.1:8000/x", "http://127.0.0.1:8000/x"),
        ("POST", 307, "HTTP://127.0.0.1:8000/x", "http://127.0.0.1:8000/x"),
        ("GET", 302, "/mcp/", "http://127.0.0.1:8000/mcp/"),
        ("DELETE", 301, "/mcp/", "http://127.0.0.1:8000/mcp/"),
    ],
)
def test_a_redirect_on_the_requests_own_origin_is_followed(
    method: str, status: int, location: str, to: str
) -> None:
    assert http_wire.redirect(method, URL, status, location, frozenset()) == http_wire.Redirect(to)


@pytest.mark.parametrize("status", [301, 302, 303])
def test_a_redirect_that_would_make_a_post_a_get_is_no_redirect(status: int) -> None:
    assert http_wire.redirect("POST", URL, status, "/mcp/", frozenset()) is None
    assert http_wire.redirect("POST", URL, 200, "/mcp/", frozenset()) is None
    assert http_wire.redirect("POST", URL, 307, None, frozenset()) is None


@pytest.mark.parametrize(
    "location",
    ["http://127.0.0.1:8001/mcp", "https://127.0.0.1:8000/mcp", "http://other/mcp", "//other/mcp"],
)
def test_a_redirect_to_another_origin_is_refused_unless_allowed(location: str) -> None:
    refused = http_wire.redirect("POST", URL, 307, location, frozenset())
    assert refused is not None and refused.url is None
    assert refused.refused is not None and "redirect_origins" in refused.refused
    absolute = "http:" + location if location.startswith("//") else location
    hop = http_wire.redirect("POST", URL, 307, location, frozenset({http_wire.origin_of(absolute)}))
    assert hop is not None and hop.url is not None


@settings(max_examples=300, deadline=None)
@given(location=st.text(max_size=40), status=st.sampled_from([301, 302, 303, 307, 308]))
def test_any_location_is_followed_on_its_origin_or_refused_never_raises(
    location: str, status: int
) -> None:
    hop = http_wire.redirect("POST", URL, status, location, frozenset())
    if hop is None:
        assert status in (301, 302, 303) or not location
    elif hop.url is None:
        assert hop.refused
    else:
        assert http_wire.origin_of(hop.url) == http_wire.origin_of(URL)
