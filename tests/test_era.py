"""Classification and `_meta` validation (2026-07-28 basic "_meta",
"Per-request protocol fields"; versioning "Protocol Version Negotiation")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway import era, wire

SPEC = Path("/work/shared/spec")
META = {era.PROTOCOL_VERSION: "2026-07-28", era.CLIENT_CAPABILITIES: {}}


def req(meta: dict[str, Any] | None, method: str = "tools/list") -> wire.Message:
    params: dict[str, Any] = {} if meta is None else {"_meta": meta}
    return wire.request(1, method, params)


def test_modern_iff_protocol_version_in_meta() -> None:
    assert era.is_modern(req(META))
    assert not era.is_modern(req(None))
    assert not era.is_modern(req({"progressToken": 1}))
    assert not era.is_modern(wire.request(1, "initialize", {"protocolVersion": "2025-11-25"}))


def test_missing_client_capabilities_is_invalid_params() -> None:
    err = era.check_modern_meta(req({era.PROTOCOL_VERSION: "2026-07-28"}))
    assert err is not None and err["error"]["code"] == wire.INVALID_PARAMS
    assert "clientCapabilities" in err["error"]["message"]


def test_non_string_version_is_invalid_params() -> None:
    err = era.check_modern_meta(req({era.PROTOCOL_VERSION: 20260728, era.CLIENT_CAPABILITIES: {}}))
    assert err is not None and err["error"]["code"] == wire.INVALID_PARAMS


def test_unsupported_version_lists_supported_and_requested() -> None:
    err = era.check_modern_meta(req({**META, era.PROTOCOL_VERSION: "1900-01-01"}))
    assert err is not None
    assert err["error"]["code"] == wire.UNSUPPORTED_PROTOCOL_VERSION
    assert err["error"]["data"] == {"supported": ["2026-07-28"], "requested": "1900-01-01"}


def test_bad_log_level_and_client_info() -> None:
    assert era.check_modern_meta(req({**META, era.LOG_LEVEL: "loud"})) is not None
    assert era.check_modern_meta(req({**META, era.CLIENT_INFO: "me"})) is not None
    assert era.check_modern_meta(req({**META, era.LOG_LEVEL: "debug"})) is None


def test_legacy_negotiation() -> None:
    assert era.negotiate_legacy("2025-06-18") == "2025-06-18"
    assert era.negotiate_legacy("2024-11-05") == "2024-11-05"
    assert era.negotiate_legacy("2026-07-28") == era.NEWEST_LEGACY
    assert era.negotiate_legacy(None) == era.NEWEST_LEGACY


def test_capability_shapes() -> None:
    legacy = {"roots": {"listChanged": True}, "sampling": {}, "tasks": {"x": {}}, "x-vendor": {}}
    modern = era.client_caps_to_modern(legacy)
    assert modern == {"roots": {}, "sampling": {}, "x-vendor": {}}
    assert era.caps_to_legacy({"extensions": {"a/b": {}}, "elicitation": {}}) == {"elicitation": {}}
    assert era.caps_to_legacy({"extensions": {"a/b": {}}, "tools": {"listChanged": True}}) == {
        "tools": {"listChanged": True}
    }
    assert era.server_caps_to_modern({"tools": {"listChanged": True}, "tasks": {}}) == {
        "tools": {"listChanged": True}
    }


def _error_codes(revision: str) -> set[int]:
    """The error codes a revision's schema.json fixes (`"code": {"const": …}`)."""
    found: set[int] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            code = node.get("code")
            if isinstance(code, dict) and isinstance(code.get("const"), int):
                found.add(code["const"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads((SPEC / revision / "schema.json").read_text()))
    return found


def test_modern_errors_are_the_codes_only_the_modern_schema_has() -> None:
    """2026-07-28 streamable-http "Backward Compatibility": "a recognized
    modern JSON-RPC error" means the peer speaks modern MCP: the codes of
    the range basic "Error Codes" reserves for the specification (-32020 to
    -32099) that 2025-11-25 does not have. One set serves the probe and the
    HTTP back (issue #11 item 3: it was written twice)."""
    reserved = range(-32099, -32019)
    only_modern = {c for c in _error_codes("2026-07-28") if c in reserved} - _error_codes(
        "2025-11-25"
    )
    assert only_modern == era.MODERN_ERRORS == {-32020, -32021, -32022}


def test_client_features_are_those_the_server_requests_need() -> None:
    """2025-11-25 client features: sampling, elicitation and roots, the
    capabilities a server request needs (one list; issue #11 item 3)."""
    assert set(era.CLIENT_FEATURE_METHODS.values()) == era.CLIENT_FEATURES
    assert {"sampling", "elicitation", "roots"} == era.CLIENT_FEATURES
