"""Protocol eras: the version registry, the reserved `_meta` keys, and the rules
that tell a modern message from a legacy one. Pure data and functions."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from gateway import wire

# Newest first. 2026-07-28 "Versioning and Compatibility", "Terminology".
MODERN_VERSIONS: tuple[str, ...] = ("2026-07-28",)
LEGACY_VERSIONS: tuple[str, ...] = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
NEWEST_LEGACY = LEGACY_VERSIONS[0]
NEWEST_MODERN = MODERN_VERSIONS[0]

PREFIX = "io.modelcontextprotocol/"
PROTOCOL_VERSION = PREFIX + "protocolVersion"
CLIENT_INFO = PREFIX + "clientInfo"
CLIENT_CAPABILITIES = PREFIX + "clientCapabilities"
LOG_LEVEL = PREFIX + "logLevel"
SERVER_INFO = PREFIX + "serverInfo"
SUBSCRIPTION_ID = PREFIX + "subscriptionId"

# 2025-11-25 "Logging": RFC 5424 severities, least severe first.
LOG_LEVELS: tuple[str, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)
LOG_RANK = {name: rank for rank, name in enumerate(LOG_LEVELS)}

# Methods a modern server no longer has (2026-07-28 "Key Changes" 2, 4, 5).
REMOVED_IN_MODERN = frozenset(
    {"initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"}
)
# Methods a legacy server never had.
MODERN_ONLY = frozenset({"server/discover", "subscriptions/listen"})
# What a modern client may ask a legacy server through the gateway
# (server/discover the gateway answers itself).
BRIDGED_TO_LEGACY = frozenset(
    {
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "subscriptions/listen",
        "completion/complete",
    }
)
# 2026-07-28 "Caching": results that must carry ttlMs / cacheScope.
CACHEABLE = frozenset(
    {
        "server/discover",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "resources/read",
    }
)
# 2026-07-28 "MRTR", "Supported Requests".
MRTR_METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})
# Server-to-client requests of the legacy era that MRTR replaces.
CLIENT_FEATURE_METHODS = {
    "sampling/createMessage": "sampling",
    "elicitation/create": "elicitation",
    "roots/list": "roots",
}
# The client capabilities those requests need: the features that make a
# modern client's call an MRTR call, and key a legacy upstream session.
CLIENT_FEATURES = frozenset(CLIENT_FEATURE_METHODS.values())
# Errors only a modern peer sends (2026-07-28 "Error Codes"; over HTTP,
# streamable-http "Backward Compatibility": a "recognized modern JSON-RPC
# error" means the server speaks modern MCP).
MODERN_ERRORS = frozenset(
    {
        wire.HEADER_MISMATCH,
        wire.MISSING_REQUIRED_CLIENT_CAPABILITY,
        wire.UNSUPPORTED_PROTOCOL_VERSION,
    }
)

# Every method either revision's schema.json names (requests and
# notifications); tests/test_http_edge.py checks it against both schemas. The
# only method names the gateway lets into a metric label.
SPEC_METHODS = frozenset(
    {
        "completion/complete",
        "elicitation/create",
        "initialize",
        "logging/setLevel",
        "notifications/cancelled",
        "notifications/elicitation/complete",
        "notifications/initialized",
        "notifications/message",
        "notifications/progress",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
        "notifications/roots/list_changed",
        "notifications/subscriptions/acknowledged",
        "notifications/tasks/status",
        "notifications/tools/list_changed",
        "ping",
        "prompts/get",
        "prompts/list",
        "resources/list",
        "resources/read",
        "resources/subscribe",
        "resources/templates/list",
        "resources/unsubscribe",
        "roots/list",
        "sampling/createMessage",
        "server/discover",
        "subscriptions/listen",
        "tasks/cancel",
        "tasks/get",
        "tasks/list",
        "tasks/result",
        "tools/call",
        "tools/list",
    }
)


class Era(StrEnum):
    MODERN = "modern"
    LEGACY = "legacy"


def meta_of(msg: wire.Message) -> dict[str, Any] | None:
    params = msg.get("params")
    if isinstance(params, dict):
        meta = params.get("_meta")
        if isinstance(meta, dict):
            return meta
    return None


def is_modern(msg: wire.Message) -> bool:
    """DESIGN §4: a request is modern iff its `_meta` names a protocol version."""
    meta = meta_of(msg)
    return meta is not None and PROTOCOL_VERSION in meta


def check_modern_meta(
    msg: wire.Message, supported: tuple[str, ...] = MODERN_VERSIONS
) -> wire.Message | None:
    """The error to answer a modern request with, or None if its `_meta` is sound.

    2026-07-28 "Per-request protocol fields": a missing required field is
    -32602; "Protocol Version Negotiation": an unsupported version is -32022.
    """
    meta = meta_of(msg) or {}
    msg_id = msg.get("id")
    version = meta.get(PROTOCOL_VERSION)
    if not isinstance(version, str):
        return wire.error_response(
            msg_id,
            wire.INVALID_PARAMS,
            f"Invalid params: _meta[{PROTOCOL_VERSION!r}] must be a string",
        )
    if CLIENT_CAPABILITIES not in meta:
        return wire.error_response(
            msg_id,
            wire.INVALID_PARAMS,
            f"Invalid params: _meta[{CLIENT_CAPABILITIES!r}] is required",
        )
    if not isinstance(meta[CLIENT_CAPABILITIES], dict):
        return wire.error_response(
            msg_id,
            wire.INVALID_PARAMS,
            f"Invalid params: _meta[{CLIENT_CAPABILITIES!r}] must be an object",
        )
    info = meta.get(CLIENT_INFO)
    if info is not None and not isinstance(info, dict):
        return wire.error_response(
            msg_id, wire.INVALID_PARAMS, f"Invalid params: _meta[{CLIENT_INFO!r}] must be an object"
        )
    level = meta.get(LOG_LEVEL)
    # A list or an object is unhashable: test the type before the table.
    if level is not None and not (isinstance(level, str) and level in LOG_RANK):
        return wire.error_response(
            msg_id,
            wire.INVALID_PARAMS,
            f"Invalid params: _meta[{LOG_LEVEL!r}] must be one of {', '.join(LOG_LEVELS)}",
        )
    return check_modern_version(msg_id, version, supported)


def check_modern_version(
    msg_id: wire.RequestId | None, version: str, supported: tuple[str, ...] = MODERN_VERSIONS
) -> wire.Message | None:
    """2026-07-28 "Protocol Version Negotiation": -32022 for a version we do
    not speak (the rest of `check_modern_meta`, for a request whose `_meta`
    shapes were already checked where it came in)."""
    if version not in supported:
        return wire.error_response(
            msg_id,
            wire.UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
            {"supported": list(supported), "requested": version},
        )
    return None


def negotiate_legacy(requested: object) -> str:
    """2025-11-25 "Version Negotiation": the client's version if we speak it, else our newest."""
    if isinstance(requested, str) and requested in LEGACY_VERSIONS:
        return requested
    return NEWEST_LEGACY


def legacy_at_least(version: str, floor: str) -> bool:
    # Version strings are ISO dates, so they order lexically.
    return version >= floor


# Capability shapes. The eras differ in a few keys only: modern drops
# `roots.listChanged` (no roots notifications any more) and `tasks` (now an
# extension, `extensions[io.modelcontextprotocol/tasks]`); legacy has no `extensions`.


def client_caps_to_modern(caps: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in caps.items() if k != "tasks"}
    roots = out.get("roots")
    if isinstance(roots, dict) and "listChanged" in roots:
        out["roots"] = {k: v for k, v in roots.items() if k != "listChanged"}
    return out


def server_caps_to_modern(caps: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in caps.items() if k != "tasks"}


def caps_to_legacy(caps: dict[str, Any]) -> dict[str, Any]:
    """A client's or a server's capabilities for a legacy peer: the one
    difference is the same both ways (no `extensions`)."""
    return {k: v for k, v in caps.items() if k != "extensions"}
