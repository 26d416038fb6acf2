"""Pure translations between the eras' message shapes.

Every function copies only what it changes (shallow copies of the touched
containers) and leaves every other field and `_meta` key exactly as received.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway import era, wire

_MODERN_RESULT_KEYS = ("resultType", "ttlMs", "cacheScope")


@dataclass(frozen=True, slots=True)
class CacheHint:
    ttl_ms: int = 0
    scope: str = "private"


def strip_modern_meta(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """Drop the `io.modelcontextprotocol/*` request keys a legacy server does not know.

    DESIGN §5.1.2: `progressToken`, trace context and every foreign key stay.
    """
    if params is None:
        return None
    meta = params.get("_meta")
    if not isinstance(meta, dict) or not any(k.startswith(era.PREFIX) for k in meta):
        return params
    kept = {k: v for k, v in meta.items() if not k.startswith(era.PREFIX)}
    out = dict(params)
    if kept:
        out["_meta"] = kept
    else:
        del out["_meta"]
    return out


def params_to_legacy(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """A modern request's params as a legacy server should read them.

    The `io.modelcontextprotocol/*` keys go (strip_modern_meta), and so does
    `task`: 2026-07-28 has no such field, but in 2025-11-25 it turns the call
    into a task ("Task-augmented requests", basic/utilities/tasks), whose
    CreateTaskResult and tasks/* polling a modern client cannot read (the
    gateway runs tasks of its own for such clients instead, DESIGN §5.4).
    Everything else stays.
    """
    out = strip_modern_meta(params)
    if out is not None and "task" in out:
        out = {k: v for k, v in out.items() if k != "task"}
    return out


def add_modern_meta(
    params: dict[str, Any] | None,
    *,
    version: str,
    capabilities: dict[str, Any],
    client_info: dict[str, Any] | None,
    log_level: str | None,
) -> dict[str, Any]:
    """DESIGN §5.2.3: give a legacy session's request the per-request fields."""
    out = dict(params) if params else {}
    meta = dict(out.get("_meta") or {})
    meta[era.PROTOCOL_VERSION] = version
    meta[era.CLIENT_CAPABILITIES] = capabilities
    if client_info is not None:
        meta[era.CLIENT_INFO] = client_info
    if log_level is not None:
        meta[era.LOG_LEVEL] = log_level
    out["_meta"] = meta
    return out


def result_to_modern(
    method: str,
    result: dict[str, Any],
    server_info: dict[str, Any] | None,
    cache: CacheHint | None,
) -> dict[str, Any]:
    """DESIGN §5.1.3: a legacy result in modern shape.

    `resultType` defaults to "complete"; serverInfo goes into `_meta` unless the
    server put its own there; cacheable methods get hints the server did not give.
    """
    out = dict(result)
    out.setdefault("resultType", "complete")
    if server_info is not None:
        meta = out.get("_meta")
        if not isinstance(meta, dict):
            out["_meta"] = {era.SERVER_INFO: server_info}
        elif era.SERVER_INFO not in meta:
            out["_meta"] = {**meta, era.SERVER_INFO: server_info}
    if cache is not None and method in era.CACHEABLE and out["resultType"] == "complete":
        out.setdefault("ttlMs", cache.ttl_ms)
        out.setdefault("cacheScope", cache.scope)
    return out


def result_to_legacy(result: dict[str, Any]) -> dict[str, Any]:
    """DESIGN §5.2.4: drop the modern-only result fields a legacy client never saw."""
    out = {k: v for k, v in result.items() if k not in _MODERN_RESULT_KEYS}
    meta = out.get("_meta")
    if isinstance(meta, dict) and era.SERVER_INFO in meta:
        rest = {k: v for k, v in meta.items() if k != era.SERVER_INFO}
        if rest:
            out["_meta"] = rest
        else:
            del out["_meta"]
    return out


def error_to_modern(error: dict[str, Any]) -> dict[str, Any]:
    """2026-07-28 "Error Codes": resource-not-found is -32602 now, never -32002."""
    if error.get("code") == wire.LEGACY_RESOURCE_NOT_FOUND:
        return {**error, "code": wire.INVALID_PARAMS}
    return error


def discover_from_initialize(
    init: dict[str, Any], versions: tuple[str, ...], cache: CacheHint
) -> dict[str, Any]:
    """DESIGN §5.1.4: a DiscoverResult for a legacy server, from its InitializeResult."""
    out: dict[str, Any] = {
        "resultType": "complete",
        "supportedVersions": list(versions),
        "capabilities": era.server_caps_to_modern(init.get("capabilities") or {}),
        "ttlMs": cache.ttl_ms,
        "cacheScope": cache.scope,
    }
    meta = dict(init["_meta"]) if isinstance(init.get("_meta"), dict) else {}
    if isinstance(init.get("serverInfo"), dict):
        meta[era.SERVER_INFO] = init["serverInfo"]
    if meta:
        out["_meta"] = meta
    if isinstance(init.get("instructions"), str):
        out["instructions"] = init["instructions"]
    return out


def initialize_from_discover(
    discover: dict[str, Any], version: str, capabilities: dict[str, Any] | None = None
) -> dict[str, Any]:
    """DESIGN §5.2.1: an InitializeResult for a legacy client, from a DiscoverResult."""
    meta = discover.get("_meta")
    server_info = meta.get(era.SERVER_INFO) if isinstance(meta, dict) else None
    caps = capabilities
    if caps is None:
        caps = era.caps_to_legacy(discover.get("capabilities") or {})
    out: dict[str, Any] = {
        "protocolVersion": version,
        "capabilities": caps,
        "serverInfo": server_info
        if isinstance(server_info, dict)
        else {
            "name": "unknown-modern-server",
            "version": "0",
        },
    }
    if isinstance(discover.get("instructions"), str):
        out["instructions"] = discover["instructions"]
    return out
