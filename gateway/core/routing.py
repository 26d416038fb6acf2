"""Which path a downstream message takes, and how the answer comes back.

`route_request` is the whole per-message decision of DESIGN §4-5 for the
request/response traffic: answer locally, or forward with translated params
and a shape that says how to translate the reply. It is a pure function of the
message, the client's legacy session (if any) and the upstream profile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from gateway import era, translate, wire
from gateway.core import legacy_tasks, task_shapes, upstream_checks
from gateway.core.profile import UpstreamProfile


class Shape(Enum):
    PASS = "pass"  # same era both sides
    TO_MODERN = "to_modern"  # legacy server's answer for a modern client
    TO_LEGACY = "to_legacy"  # modern server's answer for a legacy client


@dataclass(slots=True)
class LegacyClientSession:
    """DESIGN §5.2.2: the state a legacy client believes the server holds."""

    version: str
    capabilities: dict[str, Any]
    client_info: dict[str, Any] | None
    initialized: bool = False
    log_level: str | None = None

    def modern_capabilities(self) -> dict[str, Any]:
        return era.client_caps_to_modern(self.capabilities)


@dataclass(frozen=True, slots=True)
class Reply:
    message: wire.Message
    opens_session: LegacyClientSession | None = None


@dataclass(frozen=True, slots=True)
class Forward:
    method: str
    params: dict[str, Any] | None
    shape: Shape
    client_era: era.Era
    # The client capabilities that matter upstream (modern shape) and the log
    # level the request asked for: they pick and tune the upstream session.
    client_capabilities: dict[str, Any] = field(default_factory=dict)
    log_level: str | None = None
    # A legacy client's tools/list of a modern server whose tasks the
    # gateway presents as 2025-11-25 tasks: each tool may run as one.
    task_tools: bool = False


Decision = Reply | Forward


def _method_not_found(msg_id: wire.RequestId, method: str, why: str) -> Reply:
    return Reply(
        wire.error_response(msg_id, wire.METHOD_NOT_FOUND, f"Method not found: {method} ({why})")
    )


def route_request(  # noqa: PLR0911, PLR0912 - the routing table, one return per route
    msg: wire.Message,
    session: LegacyClientSession | None,
    profile: UpstreamProfile,
    discover_cache: translate.CacheHint,
    passthrough: frozenset[str] = frozenset(),
    *,
    shapes_checked: bool = False,
    tasks_for_legacy: bool = False,
    tasks_for_modern: bool = False,
) -> Decision:
    """`passthrough`: extra methods (vendor extensions) a modern client may send
    to a legacy server as they are. `shapes_checked`: the message passed
    `inbound.problem` where it came in, so its `_meta` types need no second look.
    `tasks_for_legacy`: a legacy client's tools/call to a modern server that
    offers the tasks extension declares it, and the gateway polls the task the
    server may answer with (core/legacy_input.py). `tasks_for_modern`: the
    gateway offers modern clients of a legacy server tasks of its own
    (runtime/task_runner.py): discover declares the extension, and the
    tasks/* requests are its."""
    msg_id: wire.RequestId = msg["id"]
    method: str = msg["method"]
    params: dict[str, Any] | None = msg.get("params")
    if era.is_modern(msg):
        if shapes_checked:
            version = msg["params"]["_meta"][era.PROTOCOL_VERSION]
            problem = era.check_modern_version(msg_id, version)
        else:
            problem = era.check_modern_meta(msg)
        if problem is not None:
            return Reply(problem)
        return _route_modern(
            msg, msg_id, method, params, profile, discover_cache, passthrough, tasks_for_modern
        )
    if method == "initialize":
        return _open_session(msg_id, params, session, profile, tasks_for_legacy)
    if method == "ping":
        # 2025-11-25 "Ping": allowed before initialization completes.
        return Reply(wire.result_response(msg_id, {}))
    if session is None:
        return Reply(
            wire.error_response(
                msg_id,
                wire.INVALID_REQUEST,
                "Invalid request: the session is not initialized; send initialize first"
                f" (or, for protocol {era.NEWEST_MODERN}, put the per-request fields in _meta)",
            )
        )
    if method == "logging/setLevel":
        level = (params or {}).get("level")
        if not (isinstance(level, str) and level in era.LOG_RANK):
            return Reply(
                wire.error_response(
                    msg_id,
                    wire.INVALID_PARAMS,
                    f"Invalid params: level must be one of {', '.join(era.LOG_LEVELS)}",
                )
            )
        session.log_level = level
        if profile.era is era.Era.LEGACY:
            # The upstream session is shared; the gateway sets its level and filters per client.
            return Forward(method, params, Shape.PASS, era.Era.LEGACY, log_level=level)
        return Reply(wire.result_response(msg_id, {}))
    caps = session.modern_capabilities()
    if profile.era is era.Era.LEGACY:
        return Forward(method, params, Shape.PASS, era.Era.LEGACY, caps, session.log_level)
    if method in ("resources/subscribe", "resources/unsubscribe"):
        # DESIGN §5.2.6: served by the session's upstream subscriptions/listen.
        resources = profile.capabilities.get("resources")
        if not (isinstance(resources, dict) and resources.get("subscribe")):
            return _method_not_found(msg_id, method, "the server offers no resource subscriptions")
        if not isinstance((params or {}).get("uri"), str):
            return Reply(
                wire.error_response(
                    msg_id, wire.INVALID_PARAMS, "Invalid params: uri must be a string"
                )
            )
        return Forward(method, params, Shape.TO_LEGACY, era.Era.LEGACY, caps, session.log_level)
    if method in era.MODERN_ONLY:
        return _method_not_found(msg_id, method, f"not part of protocol {session.version}")
    declared = caps
    offered = tasks_for_legacy and task_shapes.offered_by(profile.capabilities)
    if offered and method in legacy_tasks.METHODS:
        # The client's own tasks are the gateway's (runtime/legacy_task_runner.py).
        return Forward(method, params, Shape.TO_LEGACY, era.Era.LEGACY, caps, session.log_level)
    if offered and method == "tools/call":
        declared = task_shapes.with_extension(caps)
        params = legacy_tasks.without_task(params)
    upstream_params = translate.add_modern_meta(
        params,
        version=profile.version,
        capabilities=declared,
        client_info=session.client_info,
        log_level=session.log_level,
    )
    return Forward(
        method,
        upstream_params,
        Shape.TO_LEGACY,
        era.Era.LEGACY,
        caps,
        session.log_level,
        task_tools=offered and method == "tools/list",
    )


def _route_modern(
    msg: wire.Message,
    msg_id: wire.RequestId,
    method: str,
    params: dict[str, Any] | None,
    profile: UpstreamProfile,
    discover_cache: translate.CacheHint,
    passthrough: frozenset[str],
    tasks_for_modern: bool = False,
) -> Decision:
    if method in era.REMOVED_IN_MODERN:
        return _method_not_found(msg_id, method, f"removed in protocol {era.NEWEST_MODERN}")
    meta = era.meta_of(msg) or {}
    caps: dict[str, Any] = meta[era.CLIENT_CAPABILITIES]
    level: str | None = meta.get(era.LOG_LEVEL)
    if profile.era is era.Era.MODERN:
        return Forward(method, params, Shape.PASS, era.Era.MODERN, caps, level)
    if method == "server/discover":
        assert profile.initialize is not None
        discovered = translate.discover_from_initialize(
            profile.initialize, era.MODERN_VERSIONS, discover_cache
        )
        if tasks_for_modern:
            discovered["capabilities"] = task_shapes.with_extension(
                discovered.get("capabilities") or {}
            )
        return Reply(wire.result_response(msg_id, discovered))
    if tasks_for_modern and method in task_shapes.TASK_METHODS:
        # The gateway's own tasks (SEP-2663): only for a client that declares
        # the extension on the request ("Task Status Notifications", the
        # capability-negotiation scenarios: -32021 otherwise).
        if not task_shapes.offered_by(caps):
            return Reply(task_shapes.missing_extension(msg_id))
        return Forward(method, params, Shape.TO_MODERN, era.Era.MODERN, caps, level)
    if method not in era.BRIDGED_TO_LEGACY and method not in passthrough:
        # 2026-07-28 streamable-http "Protocol Version Header": an unknown method
        # is -32601 (HTTP 404). A legacy server may say anything about it (mcp
        # 1.x says -32602); the 2025-11-25 tasks/result and tasks/list have no
        # place in the extension (DESIGN §5.4).
        return _method_not_found(msg_id, method, "not served to modern clients of a legacy server")
    return Forward(
        method, translate.params_to_legacy(params), Shape.TO_MODERN, era.Era.MODERN, caps, level
    )


def _open_session(
    msg_id: wire.RequestId,
    params: dict[str, Any] | None,
    session: LegacyClientSession | None,
    profile: UpstreamProfile,
    tasks_for_legacy: bool = False,
) -> Reply:
    if session is not None:
        return Reply(
            wire.error_response(
                msg_id,
                wire.INVALID_REQUEST,
                "Invalid request: the session is already initialized",
            )
        )
    params = params or {}
    requested = params.get("protocolVersion")
    caps = params.get("capabilities")
    info = params.get("clientInfo")
    if not isinstance(requested, str) or not isinstance(caps, dict):
        return Reply(
            wire.error_response(
                msg_id,
                wire.INVALID_PARAMS,
                "Invalid params: initialize needs protocolVersion (string)"
                " and capabilities (object)",
            )
        )
    version = era.negotiate_legacy(requested)
    if profile.era is era.Era.LEGACY:
        # Never promise a newer revision than the upstream session speaks.
        version = min(version, profile.version)
        assert profile.initialize is not None
        result = dict(profile.initialize)
        result["protocolVersion"] = version
    else:
        assert profile.discover is not None
        capabilities = legacy_server_capabilities(profile.capabilities)
        if tasks_for_legacy and task_shapes.offered_by(profile.capabilities):
            # The gateway runs 2025-11-25 tasks for the session on the
            # server's extension (core/legacy_tasks.py).
            capabilities["tasks"] = legacy_tasks.CAPABILITIES
        result = translate.initialize_from_discover(profile.discover, version, capabilities)
    new = LegacyClientSession(
        version=version,
        capabilities=caps,
        client_info=info if is_implementation(info) else None,
    )
    return Reply(wire.result_response(msg_id, result), opens_session=new)


def is_implementation(info: object) -> bool:
    """A clientInfo a modern server accepts (schema `Implementation`: a name
    and a version, both strings). The session forwards only such a one: the
    field is optional per request in 2026-07-28, and a malformed one would
    have the server refuse every call of the session (-32602)."""
    return (
        isinstance(info, dict)
        and isinstance(info.get("name"), str)
        and isinstance(info.get("version"), str)
    )


def legacy_server_capabilities(modern_caps: dict[str, Any]) -> dict[str, Any]:
    """A modern server's capabilities as a legacy client sees them: the same,
    less what the legacy era has no place for. `listChanged` and `subscribe`
    stay: the session's upstream listen delivers them (DESIGN §5.2.6)."""
    return era.caps_to_legacy(modern_caps)


def shape_reply(
    forward: Forward,
    reply: wire.Message,
    client_id: wire.RequestId,
    profile: UpstreamProfile,
    cache: translate.CacheHint | None,
) -> wire.Message:
    """The upstream's answer, in the client's era, under the client's id."""
    if "error" in reply:
        error = reply["error"]
        if forward.shape is Shape.TO_MODERN:
            error = translate.error_to_modern(error)
        return {"jsonrpc": "2.0", "id": client_id, "error": error}
    result = reply["result"]
    if forward.shape is not Shape.PASS:
        # Translating reads resultType; a value the gateway only passes on is
        # the client's to judge.
        problem = upstream_checks.result_type_problem(result)
        if problem is not None:
            return upstream_checks.malformed_reply(client_id, problem)
    if forward.method == "subscriptions/listen":
        result = _listen_closed_under(result, client_id)
    if forward.shape is Shape.TO_MODERN:
        result = translate.result_to_modern(forward.method, result, profile.server_info, cache)
    elif forward.shape is Shape.TO_LEGACY:
        result = translate.result_to_legacy(result)
        if forward.task_tools:
            result = legacy_tasks.tools_may_run_as_tasks(result)
    return {"jsonrpc": "2.0", "id": client_id, "result": result}


def _listen_closed_under(result: Any, client_id: wire.RequestId) -> Any:
    """A listen's closing result names its subscription by the request id
    (2026-07-28 subscriptions "Graceful Closure"): the client's, not ours."""
    meta = result.get("_meta") if isinstance(result, dict) else None
    if not isinstance(meta, dict) or era.SUBSCRIPTION_ID not in meta:
        return result
    return {**result, "_meta": {**meta, era.SUBSCRIPTION_ID: client_id}}


def route_notification(
    msg: wire.Message, session: LegacyClientSession | None, profile: UpstreamProfile
) -> wire.Message | None:
    """A client notification to pass upstream (translated), or None to consume it.

    `notifications/cancelled` never reaches here: it needs the id map.
    """
    method = msg["method"]
    modern_client = session is None
    if method == "notifications/initialized":
        if session is not None:
            session.initialized = True
        return None
    if profile.era is era.Era.MODERN:
        # 2026-07-28 removed roots/list_changed; other client notifications of a
        # legacy session have no modern meaning.
        return msg if modern_client else None
    if modern_client:
        params = translate.strip_modern_meta(msg.get("params"))
        return wire.notification(method, params)
    return msg
