"""The per-message path decision (DESIGN §4, §5.1, §5.2, §5.3)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway import era, translate, wire
from gateway.core import routing
from gateway.core.profile import UpstreamProfile

HINT = translate.CacheHint()
META = {
    era.PROTOCOL_VERSION: "2026-07-28",
    era.CLIENT_CAPABILITIES: {"sampling": {}},
    "com.example/trace": "t1",
    "progressToken": 5,
}
LEGACY_INIT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {"tools": {}, "logging": {}, "resources": {"subscribe": True}},
    "serverInfo": {"name": "old", "version": "1"},
    "instructions": "legacy says hi",
}
DISCOVER = {
    "resultType": "complete",
    "supportedVersions": ["2026-07-28"],
    "capabilities": {
        "tools": {},
        "resources": {"subscribe": True, "listChanged": True},
        "extensions": {"io.modelcontextprotocol/tasks": {}},
    },
    "_meta": {era.SERVER_INFO: {"name": "new", "version": "2"}},
    "instructions": "modern says hi",
    "ttlMs": 1000,
    "cacheScope": "public",
}
LEGACY = UpstreamProfile.from_initialize(LEGACY_INIT)
MODERN = UpstreamProfile.from_discover(DISCOVER, "2026-07-28")


def modern(method: str, **params: Any) -> wire.Message:
    return wire.request(1, method, {**params, "_meta": dict(META)})


def session() -> routing.LegacyClientSession:
    return routing.LegacyClientSession(
        "2025-11-25", {"roots": {"listChanged": True}}, {"name": "c", "version": "1"}
    )


def test_modern_to_legacy_strips_protocol_keys_only() -> None:
    d = routing.route_request(modern("tools/call", name="t"), None, LEGACY, HINT)
    assert isinstance(d, routing.Forward) and d.shape is routing.Shape.TO_MODERN
    assert d.params == {"name": "t", "_meta": {"com.example/trace": "t1", "progressToken": 5}}
    assert d.client_capabilities == {"sampling": {}}


def test_modern_to_legacy_drops_the_legacy_task_field_only() -> None:
    """2025-11-25 "Task-augmented requests": `params.task` makes the call a task,
    which no modern client can follow across eras (DESIGN §5.4); 2026-07-28 has
    no such field. Other unknown fields pass (DESIGN §5.1.2)."""
    msg = modern("tools/call", name="t", task={"ttl": 60000}, **{"x-vendor": 1})
    d = routing.route_request(msg, None, LEGACY, HINT)
    assert isinstance(d, routing.Forward)
    assert d.params is not None and "task" not in d.params
    assert d.params["x-vendor"] == 1 and d.params["name"] == "t"
    # A modern server gets the request as sent.
    same = routing.route_request(msg, None, MODERN, HINT)
    assert isinstance(same, routing.Forward) and same.params == msg["params"]


def test_modern_discover_is_answered_from_the_legacy_session() -> None:
    d = routing.route_request(modern("server/discover"), None, LEGACY, HINT)
    assert isinstance(d, routing.Reply)
    result = d.message["result"]
    assert result["supportedVersions"] == list(era.MODERN_VERSIONS)
    assert result["_meta"][era.SERVER_INFO] == {"name": "old", "version": "1"}
    assert result["instructions"] == "legacy says hi"
    assert result["resultType"] == "complete"


@pytest.mark.parametrize("method", sorted(era.REMOVED_IN_MODERN))
def test_removed_methods_are_unknown_to_modern_requests(method: str) -> None:
    # DESIGN §4: a modern initialize/ping/setLevel/subscribe is -32601.
    for profile in (LEGACY, MODERN):
        d = routing.route_request(modern(method), None, profile, HINT)
        assert isinstance(d, routing.Reply)
        assert d.message["error"]["code"] == wire.METHOD_NOT_FOUND


def test_modern_request_validation_happens_at_the_gateway() -> None:
    bad = wire.request(1, "tools/list", {"_meta": {era.PROTOCOL_VERSION: "2026-07-28"}})
    d = routing.route_request(bad, None, MODERN, HINT)
    assert isinstance(d, routing.Reply) and d.message["error"]["code"] == wire.INVALID_PARAMS
    old = wire.request(1, "tools/list", {"_meta": {**META, era.PROTOCOL_VERSION: "2099-01-01"}})
    d = routing.route_request(old, None, LEGACY, HINT)
    assert isinstance(d, routing.Reply)
    assert d.message["error"]["code"] == wire.UNSUPPORTED_PROTOCOL_VERSION
    # Shapes already checked where the message came in: the version still is.
    d = routing.route_request(old, None, LEGACY, HINT, shapes_checked=True)
    assert isinstance(d, routing.Reply)
    assert d.message["error"]["code"] == wire.UNSUPPORTED_PROTOCOL_VERSION
    assert d.message["error"]["data"] == {"supported": ["2026-07-28"], "requested": "2099-01-01"}


def test_modern_to_modern_passes_through_untouched() -> None:
    msg = modern("tools/call", name="t")
    d = routing.route_request(msg, None, MODERN, HINT)
    assert isinstance(d, routing.Forward) and d.shape is routing.Shape.PASS
    assert d.params is msg["params"]


def test_legacy_request_without_session_is_refused_but_ping_works() -> None:
    d = routing.route_request(wire.request(1, "tools/list"), None, MODERN, HINT)
    assert isinstance(d, routing.Reply) and d.message["error"]["code"] == wire.INVALID_REQUEST
    d = routing.route_request(wire.request(2, "ping"), None, MODERN, HINT)
    assert isinstance(d, routing.Reply) and d.message["result"] == {}


def test_initialize_against_modern_server_is_answered_by_the_gateway() -> None:
    init = wire.request(
        1,
        "initialize",
        {
            "protocolVersion": "2025-06-18",
            "capabilities": {"roots": {}},
            "clientInfo": {"name": "c"},
        },
    )
    d = routing.route_request(init, None, MODERN, HINT)
    assert isinstance(d, routing.Reply) and d.opens_session is not None
    result = d.message["result"]
    assert result["protocolVersion"] == "2025-06-18"
    assert result["serverInfo"] == {"name": "new", "version": "2"}
    assert result["instructions"] == "modern says hi"
    # Legacy shape: no extensions, no modern-only result fields.
    assert result["capabilities"] == {
        "tools": {},
        "resources": {"subscribe": True, "listChanged": True},
    }
    assert "resultType" not in result and "ttlMs" not in result


def test_initialize_with_unknown_version_gets_newest_legacy() -> None:
    init = wire.request(1, "initialize", {"protocolVersion": "2099-01-01", "capabilities": {}})
    d = routing.route_request(init, None, MODERN, HINT)
    assert isinstance(d, routing.Reply)
    assert d.message["result"]["protocolVersion"] == era.NEWEST_LEGACY


def test_initialize_never_promises_more_than_the_legacy_upstream() -> None:
    init = wire.request(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})
    d = routing.route_request(init, None, LEGACY, HINT)
    assert isinstance(d, routing.Reply)
    assert d.message["result"]["protocolVersion"] == "2025-06-18"
    assert d.message["result"]["capabilities"] == LEGACY_INIT["capabilities"]


def test_bad_initialize_and_second_initialize() -> None:
    d = routing.route_request(
        wire.request(1, "initialize", {"capabilities": {}}), None, MODERN, HINT
    )
    assert isinstance(d, routing.Reply) and d.message["error"]["code"] == wire.INVALID_PARAMS
    init = wire.request(2, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})
    d = routing.route_request(init, session(), MODERN, HINT)
    assert isinstance(d, routing.Reply) and d.message["error"]["code"] == wire.INVALID_REQUEST


def test_legacy_to_modern_adds_meta_from_the_session() -> None:
    s = session()
    s.log_level = "warning"
    msg = wire.request(1, "tools/call", {"name": "t", "_meta": {"progressToken": "p"}})
    d = routing.route_request(msg, s, MODERN, HINT)
    assert isinstance(d, routing.Forward) and d.shape is routing.Shape.TO_LEGACY
    assert d.params is not None
    assert d.params["_meta"] == {
        "progressToken": "p",
        era.PROTOCOL_VERSION: "2026-07-28",
        era.CLIENT_CAPABILITIES: {"roots": {}},
        era.CLIENT_INFO: {"name": "c", "version": "1"},
        era.LOG_LEVEL: "warning",
    }


def test_legacy_set_level_is_kept_in_the_session() -> None:
    s = session()
    d = routing.route_request(
        wire.request(1, "logging/setLevel", {"level": "error"}), s, MODERN, HINT
    )
    assert isinstance(d, routing.Reply) and d.message["result"] == {}
    assert s.log_level == "error"
    d = routing.route_request(wire.request(1, "logging/setLevel", {"level": "x"}), s, MODERN, HINT)
    assert isinstance(d, routing.Reply) and d.message["error"]["code"] == wire.INVALID_PARAMS


def test_legacy_to_legacy_passes_through() -> None:
    msg = wire.request(1, "resources/subscribe", {"uri": "a://b"})
    d = routing.route_request(msg, session(), LEGACY, HINT)
    assert isinstance(d, routing.Forward) and d.shape is routing.Shape.PASS
    assert d.params == {"uri": "a://b"}


def test_shape_reply_for_each_path() -> None:
    fwd = routing.Forward("resources/read", {}, routing.Shape.TO_MODERN, era.Era.MODERN)
    err = routing.shape_reply(fwd, wire.error_response(9, -32002, "gone"), "c1", LEGACY, HINT)
    assert err == {"jsonrpc": "2.0", "id": "c1", "error": {"code": -32602, "message": "gone"}}
    ok = routing.shape_reply(fwd, wire.result_response(9, {"contents": []}), "c1", LEGACY, HINT)
    assert ok["result"]["resultType"] == "complete" and ok["result"]["ttlMs"] == 0
    back = routing.Forward("tools/list", {}, routing.Shape.TO_LEGACY, era.Era.LEGACY)
    res = routing.shape_reply(
        back, wire.result_response(9, {**DISCOVER, "tools": []}), 3, MODERN, HINT
    )
    assert "resultType" not in res["result"] and "_meta" not in res["result"]
    assert res["id"] == 3


def test_client_notifications() -> None:
    s = session()
    assert (
        routing.route_notification(wire.notification("notifications/initialized"), s, MODERN)
        is None
    )
    assert s.initialized
    roots = wire.notification("notifications/roots/list_changed")
    assert routing.route_notification(roots, s, MODERN) is None  # removed in 2026-07-28
    assert routing.route_notification(roots, s, LEGACY) == roots


def test_unknown_methods_to_a_legacy_server_are_method_not_found() -> None:
    # 2026-07-28 streamable-http "Protocol Version Header": unknown method → -32601;
    # DESIGN §5.4: task methods have no cross-era mapping.
    for method in ("unknown/method", "tasks/get"):
        d = routing.route_request(modern(method), None, LEGACY, HINT)
        assert isinstance(d, routing.Reply) and d.message["error"]["code"] == wire.METHOD_NOT_FOUND
    vendor = routing.route_request(
        modern("com.example/x"), None, LEGACY, HINT, frozenset({"com.example/x"})
    )
    assert isinstance(vendor, routing.Forward)
    # A modern server decides for itself.
    assert isinstance(
        routing.route_request(modern("tasks/get"), None, MODERN, HINT), routing.Forward
    )


@pytest.mark.parametrize(
    "info",
    [{"name": "c"}, {"name": "c", "version": 1}, "c", None],
    ids=["no-version", "version-not-a-string", "not-an-object", "none"],
)
def test_a_malformed_client_info_is_not_forwarded(info: object) -> None:
    """2026-07-28 basic "Per-request protocol fields": clientInfo is an
    optional `Implementation` (a name and a version). Regression: a legacy
    client's clientInfo without a version went in every request's `_meta`,
    and a modern server that validates it refused every call of the session
    with -32602."""
    params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": info}
    d = routing.route_request(wire.request(1, "initialize", params), None, MODERN, HINT)
    assert isinstance(d, routing.Reply) and d.opens_session is not None
    d.opens_session.initialized = True
    call = routing.route_request(
        wire.request(2, "tools/call", {"name": "t"}), d.opens_session, MODERN, HINT
    )
    assert isinstance(call, routing.Forward) and call.params is not None
    assert era.CLIENT_INFO not in call.params["_meta"]
