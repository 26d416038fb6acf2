"""Shape translation between eras (DESIGN §5.1.2-5.1.4, §5.2.1-5.2.4)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway import era, translate, wire

SERVER = {"name": "s", "version": "1"}
HINT = translate.CacheHint(ttl_ms=5, scope="public")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
# A legacy result never carries the modern-only top-level keys; its `_meta`
# (an object, by the schema) comes from foreign_meta below.
legacy_results = st.dictionaries(
    st.text(max_size=10).filter(lambda k: k not in ("resultType", "ttlMs", "cacheScope", "_meta")),
    json_values,
    max_size=6,
)
foreign_meta = st.dictionaries(
    st.text(max_size=12).filter(lambda k: not k.startswith(era.PREFIX)), json_values, max_size=4
)


@given(legacy_results, foreign_meta, st.sampled_from(sorted(era.CACHEABLE | {"tools/call"})))
def test_legacy_result_survives_modern_and_back(
    result: dict[str, Any], meta: dict[str, Any], method: str
) -> None:
    if meta:
        result = {**result, "_meta": meta}
    modern = translate.result_to_modern(method, result, SERVER, HINT)
    assert modern["resultType"] == "complete"
    assert modern["_meta"][era.SERVER_INFO] == SERVER
    assert translate.result_to_legacy(modern) == result


def test_a_result_meta_that_is_no_object_gives_way_to_the_server_info() -> None:
    """2026-07-28 schema: `_meta` is an object. A legacy server's `"_meta":
    null` (or any non-object) cannot carry serverInfo: a modern client gets a
    `_meta` of the gateway's making, and a legacy client none (found by
    hypothesis: the round trip cannot keep an invalid value)."""
    junks: list[object] = [None, 3, "x", []]
    for junk in junks:
        modern = translate.result_to_modern("tools/call", {"_meta": junk}, SERVER, None)
        assert modern["_meta"] == {era.SERVER_INFO: SERVER}
        assert "_meta" not in translate.result_to_legacy(modern)


def test_cache_hints_only_on_cacheable_methods() -> None:
    assert "ttlMs" not in translate.result_to_modern("tools/call", {}, SERVER, HINT)
    listed = translate.result_to_modern("tools/list", {"tools": []}, SERVER, HINT)
    assert (listed["ttlMs"], listed["cacheScope"]) == (5, "public")
    # A server that already sends hints keeps them.
    own = translate.result_to_modern("tools/list", {"ttlMs": 9}, SERVER, HINT)
    assert own["ttlMs"] == 9


def test_server_own_server_info_is_kept() -> None:
    mine = {"name": "mine", "version": "2"}
    out = translate.result_to_modern("tools/call", {"_meta": {era.SERVER_INFO: mine}}, SERVER, None)
    assert out["_meta"][era.SERVER_INFO] == mine


@given(
    foreign_meta,
    st.dictionaries(st.text(max_size=5).filter(lambda k: k != "_meta"), json_values, max_size=4),
)
def test_strip_keeps_every_foreign_meta_key(meta: dict[str, Any], body: dict[str, Any]) -> None:
    params = {
        **body,
        "_meta": {
            **meta,
            era.PROTOCOL_VERSION: "2026-07-28",
            era.CLIENT_CAPABILITIES: {},
            era.LOG_LEVEL: "info",
        },
    }
    out = translate.strip_modern_meta(params)
    assert out is not None
    assert out.get("_meta", {}) == meta
    assert {k: v for k, v in out.items() if k != "_meta"} == body
    # The caller's dict is not mutated.
    assert era.PROTOCOL_VERSION in params["_meta"]


@given(
    foreign_meta,
    st.dictionaries(st.text(max_size=5).filter(lambda k: k != "_meta"), json_values, max_size=4),
    json_values,
)
def test_params_to_legacy_drops_only_task_and_protocol_keys(
    meta: dict[str, Any], body: dict[str, Any], task: Any
) -> None:
    """A modern request's params for a legacy server: `task` (a task-augmented
    request in 2025-11-25) and the protocol `_meta` keys go, nothing else."""
    params = {**body, "task": task, "_meta": {**meta, era.PROTOCOL_VERSION: "2026-07-28"}}
    out = translate.params_to_legacy(params)
    assert out is not None and "task" not in out
    assert out.get("_meta", {}) == meta
    assert {k: v for k, v in out.items() if k != "_meta"} == {
        k: v for k, v in body.items() if k != "task"
    }
    assert params["task"] == task  # the caller's dict is not mutated


def test_strip_leaves_plain_params_untouched() -> None:
    params = {"name": "x", "_meta": {"progressToken": 3, "traceparent": "00-ab"}}
    assert translate.strip_modern_meta(params) is params
    assert translate.strip_modern_meta(None) is None


def test_add_modern_meta_keeps_client_meta() -> None:
    out = translate.add_modern_meta(
        {"name": "t", "_meta": {"progressToken": "p"}},
        version="2026-07-28",
        capabilities={"sampling": {}},
        client_info={"name": "c", "version": "1"},
        log_level="info",
    )
    assert out["_meta"] == {
        "progressToken": "p",
        era.PROTOCOL_VERSION: "2026-07-28",
        era.CLIENT_CAPABILITIES: {"sampling": {}},
        era.CLIENT_INFO: {"name": "c", "version": "1"},
        era.LOG_LEVEL: "info",
    }


def test_resource_not_found_becomes_invalid_params() -> None:
    err = {"code": wire.LEGACY_RESOURCE_NOT_FOUND, "message": "nope", "data": {"uri": "u"}}
    assert translate.error_to_modern(err) == {**err, "code": wire.INVALID_PARAMS}
    other = {"code": -32000, "message": "x"}
    assert translate.error_to_modern(other) is other


def test_discover_from_initialize_and_back() -> None:
    init = {
        "protocolVersion": "2025-11-25",
        "capabilities": {"tools": {"listChanged": True}, "tasks": {"list": {}}},
        "serverInfo": SERVER,
        "instructions": "hi",
    }
    disc = translate.discover_from_initialize(init, ("2026-07-28",), HINT)
    assert disc == {
        "resultType": "complete",
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {"listChanged": True}},
        "ttlMs": 5,
        "cacheScope": "public",
        "_meta": {era.SERVER_INFO: SERVER},
        "instructions": "hi",
    }
    back = translate.initialize_from_discover(disc, "2025-06-18")
    assert back == {
        "protocolVersion": "2025-06-18",
        "capabilities": {"tools": {"listChanged": True}},
        "serverInfo": SERVER,
        "instructions": "hi",
    }
