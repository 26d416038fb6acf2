"""The shapes of the client-message fields the gateway reads or acts on, checked
once where a message comes in, before any logic sees it.

`wire.validate` checks the JSON-RPC envelope; this module checks what is inside
it that the gateway itself uses: the per-request `_meta` keys, progress tokens,
names, URIs, cursors, log levels, the MRTR retry fields, subscription filters,
`initialize` and `notifications/cancelled`. A wrong type is a -32602 naming the
field (2026-07-28 "Per-request protocol fields"; JSON-RPC 2.0 "Invalid params").
What the gateway only forwards (tool arguments, capabilities' contents, unknown
fields and `_meta` keys) is not looked at.

The table follows the `schema.json` of 2026-07-28 and 2025-11-25 (tests check
that it agrees with both). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from gateway import era, wire


class Kind(Enum):
    """A field's JSON shape, as the schemas name it."""

    STRING = "string"
    OBJECT = "object"
    REQUEST_ID = "RequestId"
    PROGRESS_TOKEN = "ProgressToken"
    LOG_LEVEL = "LoggingLevel"
    INPUT_RESPONSES = "InputResponses"
    SUBSCRIPTION_FILTER = "SubscriptionFilter"


# What a client is told a field must be.
_MUST_BE = {
    Kind.STRING: "a string",
    Kind.OBJECT: "an object",
    Kind.REQUEST_ID: "a string or an integer",
    Kind.PROGRESS_TOKEN: "a string or an integer",
    Kind.LOG_LEVEL: "one of " + ", ".join(era.LOG_LEVELS),
    Kind.INPUT_RESPONSES: "an object whose values are objects",
    Kind.SUBSCRIPTION_FILTER: "an object of booleans and a resourceSubscriptions string array",
}


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    kind: Kind
    required: bool = False


_MRTR_RETRY = (Field("inputResponses", Kind.INPUT_RESPONSES), Field("requestState", Kind.STRING))
_PAGINATED = (Field("cursor", Kind.STRING),)

# Request params the gateway reads, by method. A method not listed has no
# param the gateway acts on (beyond `_meta`).
REQUEST_PARAMS: dict[str, tuple[Field, ...]] = {
    "initialize": (
        Field("protocolVersion", Kind.STRING, required=True),
        Field("capabilities", Kind.OBJECT, required=True),
        Field("clientInfo", Kind.OBJECT),
    ),
    "logging/setLevel": (Field("level", Kind.LOG_LEVEL, required=True),),
    "tools/call": (Field("name", Kind.STRING, required=True), *_MRTR_RETRY),
    "prompts/get": (Field("name", Kind.STRING, required=True), *_MRTR_RETRY),
    "resources/read": (Field("uri", Kind.STRING, required=True), *_MRTR_RETRY),
    "resources/subscribe": (Field("uri", Kind.STRING, required=True),),
    "resources/unsubscribe": (Field("uri", Kind.STRING, required=True),),
    "tools/list": _PAGINATED,
    "prompts/list": _PAGINATED,
    "resources/list": _PAGINATED,
    "resources/templates/list": _PAGINATED,
    "subscriptions/listen": (Field("notifications", Kind.SUBSCRIPTION_FILTER),),
}

# Notification params the gateway reads.
NOTIFICATION_PARAMS: dict[str, tuple[Field, ...]] = {
    # 2025-11-25 lets a task cancellation leave requestId out.
    "notifications/cancelled": (Field("requestId", Kind.REQUEST_ID),),
}

# `_meta` keys the gateway reads in any request (RequestParams._meta).
META_ANY_ERA: tuple[Field, ...] = (Field("progressToken", Kind.PROGRESS_TOKEN),)

# `_meta` keys of a modern request (2026-07-28 RequestMetaObject).
META_MODERN: tuple[Field, ...] = (
    Field(era.PROTOCOL_VERSION, Kind.STRING, required=True),
    Field(era.CLIENT_CAPABILITIES, Kind.OBJECT, required=True),
    Field(era.CLIENT_INFO, Kind.OBJECT),
    Field(era.LOG_LEVEL, Kind.LOG_LEVEL),
)

_FILTER_FLAGS = ("toolsListChanged", "promptsListChanged", "resourcesListChanged")


def _is_log_level(value: object) -> bool:
    # A list or an object is unhashable: test the type before the table.
    return isinstance(value, str) and value in era.LOG_RANK


def _is_input_responses(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())


def _is_filter(value: object) -> bool:
    if not isinstance(value, dict):
        return False
    if any(not isinstance(value.get(flag, False), bool) for flag in _FILTER_FLAGS):
        return False
    uris = value.get("resourceSubscriptions", [])
    return isinstance(uris, list) and all(isinstance(u, str) for u in uris)


_CHECKS: dict[Kind, Callable[[object], bool]] = {
    Kind.REQUEST_ID: wire.is_request_id,
    Kind.PROGRESS_TOKEN: wire.is_request_id,
    Kind.LOG_LEVEL: _is_log_level,
    Kind.INPUT_RESPONSES: _is_input_responses,
    Kind.SUBSCRIPTION_FILTER: _is_filter,
}
# Kinds that are one JSON type: an isinstance test, no call (the hot path).
_TYPES: dict[Kind, type] = {Kind.STRING: str, Kind.OBJECT: dict}

# A field as the checks use it: name, JSON type or check, required, path, why.
_Compiled = tuple[str, type | None, Callable[[object], bool] | None, bool, str, str]


def _path(where: str, name: str) -> str:
    if "/" in name:
        return f"{where}[{name!r}]"
    return f"{where}.{name}"


def _compile(fields: tuple[Field, ...], where: str) -> tuple[_Compiled, ...]:
    return tuple(
        (
            f.name,
            _TYPES.get(f.kind),
            _CHECKS.get(f.kind),
            f.required,
            _path(where, f.name),
            f"must be {_MUST_BE[f.kind]}",
        )
        for f in fields
    )


_REQUESTS = {method: _compile(fields, "params") for method, fields in REQUEST_PARAMS.items()}
_NOTIFICATIONS = {
    method: _compile(fields, "params") for method, fields in NOTIFICATION_PARAMS.items()
}
_META_ANY_ERA = _compile(META_ANY_ERA, "params._meta")
_META_MODERN = _compile(META_MODERN, "params._meta")
_ABSENT = object()


def _first_wrong(values: dict[str, Any], fields: tuple[_Compiled, ...]) -> tuple[str, str] | None:
    """(field path, what is wrong) for the first field of the wrong shape."""
    for name, json_type, check, required, path, must_be in fields:
        value = values.get(name, _ABSENT)
        if value is _ABSENT:
            if required:
                return path, "is required"
        elif json_type is not None:
            if not isinstance(value, json_type):
                return path, must_be
        elif check is not None and not check(value):
            return path, must_be
    return None


def problem(msg: wire.Message) -> tuple[str, str] | None:
    """(field path, what is wrong) for a client request or notification that
    `wire.validate` accepted, or None when every field the gateway reads has
    its schema's shape."""
    params = msg.get("params")
    if params is None:
        params = {}
    is_request = "id" in msg
    method = msg["method"]
    meta = params.get("_meta")
    modern = meta is not None and _PV in meta
    fields = (_REQUESTS if is_request else _NOTIFICATIONS).get(method)
    # A modern initialize, ping, setLevel or subscribe is -32601 whatever its
    # params (DESIGN §4), so their legacy params are not this layer's business.
    if fields is not None and not (modern and method in era.REMOVED_IN_MODERN):
        wrong = _first_wrong(params, fields)
        if wrong is not None:
            return wrong
    if meta is None:
        return None
    # `wire.validate` made sure `_meta` is an object.
    if is_request:
        token = meta.get("progressToken", _ABSENT)
        if token is not _ABSENT and not wire.is_request_id(token):
            return _TOKEN_WRONG
    if modern:
        return _modern_meta_problem(meta)
    return None


def _modern_meta_problem(meta: dict[str, Any]) -> tuple[str, str] | None:
    """META_MODERN, written out: every modern request passes here, and this
    is half the cost of the table loop (tests hold it to the table)."""
    get = meta.get
    if not isinstance(get(_PV), str):
        return _META_WRONG[_PV]
    capabilities = get(_CC, _ABSENT)
    if capabilities is _ABSENT:
        return _META_PATH[_CC], "is required"
    if not isinstance(capabilities, dict):
        return _META_WRONG[_CC]
    info = get(_CI, _ABSENT)
    if info is not _ABSENT and not isinstance(info, dict):
        return _META_WRONG[_CI]
    level = get(_LL, _ABSENT)
    if level is not _ABSENT and not _is_log_level(level):
        return _META_WRONG[_LL]
    return None


_PV, _CC, _CI, _LL = era.PROTOCOL_VERSION, era.CLIENT_CAPABILITIES, era.CLIENT_INFO, era.LOG_LEVEL
_TOKEN_WRONG = _META_ANY_ERA[0][4], _META_ANY_ERA[0][5]
_META_PATH = {name: path for name, _, _, _, path, _ in _META_MODERN}
_META_WRONG = {name: (path, must_be) for name, _, _, _, path, must_be in _META_MODERN}


def error_for(msg: wire.Message) -> wire.Message | None:
    """The -32602 answer for a client request with a field of the wrong
    shape, or None when it is sound (or a notification: see `problem`)."""
    wrong = problem(msg)
    if wrong is None or "id" not in msg:
        return None
    path, what = wrong
    return invalid_params(msg["id"], path, what)


def invalid_params(msg_id: wire.RequestId, path: str, what: str) -> wire.Message:
    return wire.gateway_error(
        msg_id,
        wire.INVALID_PARAMS,
        f"Invalid params: {path} {what}",
        reason="invalid-params",
        field=path,
    )
