"""What an upstream server sends, checked before the gateway acts on it.

A server is somebody else's code: it may write garbage, answer with the wrong
shape, nest a value deeper than the gateway can re-encode, or ask its client
for something with params the schema does not allow. Each such message is
refused here, and the refusal says who hears of it: the call it names (a
gateway error with `data.reason = "upstream-malformed"` in place of the
reply), the server (a JSON-RPC error for its bad request), or nobody (a junk
notification is dropped). Everything else the gateway only forwards stays
untouched. Pure: the transports and the service do the telling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from gateway import era, wire

# orjson re-encodes at most 254 levels of nesting (it raises "Recursion limit
# reached" above that), and the gateway wraps a server's values up to 3 levels
# deeper on their way to a client (a server request's params sit at depth 5 of
# an input_required result, at depth 2 of the request). So a message may nest
# 250 levels; no MCP message needs anything close to it.
MAX_DEPTH = 250
# Lines with fewer brackets than this are not checked further: they cannot
# nest deeper than they have brackets.
_FEW_BRACKETS = 32
MALFORMED = "upstream-malformed"


@dataclass(frozen=True, slots=True)
class Refused:
    """A message from the server the gateway will not act on.

    `reason` is for the operator's log line; `to_call` stands in for the reply
    of the call the message names; `to_server` answers the server's request.
    """

    reason: str
    to_call: wire.Message | None = None
    to_server: wire.Message | None = None


def malformed_reply(msg_id: wire.RequestId, why: str) -> wire.Message:
    """The error a call gets in place of a server reply it cannot be given."""
    return wire.gateway_error(
        msg_id, wire.INTERNAL_ERROR, f"Upstream sent a malformed reply: {why}", reason=MALFORMED
    )


def nested_too_deep(value: object) -> bool:
    """Whether `value` nests more than MAX_DEPTH levels: orjson itself tells,
    at its own speed, by encoding it with room for the gateway's wrapping."""
    try:
        orjson.dumps([[[[value]]]])
    except orjson.JSONEncodeError:
        return True
    return False


def may_nest_too_deep(data: bytes | str) -> bool:
    """A cheap test on the raw text, so that most lines skip the exact one:
    a value cannot nest deeper than it has brackets. (find() scans at memchr
    speed; a text-heavy line has few brackets to step over.)"""
    if len(data) <= 2 * MAX_DEPTH:
        return False  # every level takes two bytes
    raw = data.encode() if isinstance(data, str) else data
    found = 0
    for opener in (b"[", b"{"):
        at = raw.find(opener)
        while at >= 0:
            found += 1
            if found > _FEW_BRACKETS:
                return True
            at = raw.find(opener, at + 1)
    return False


def screen_line(data: bytes | str) -> wire.Message | Refused:
    """One framed message from the server: the message, or why it is refused.
    (The path every reply takes: kept to the checks that matter.)"""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return Refused("not JSON")
    return screen_value(value, deep=may_nest_too_deep(data))


_ID_TYPES = (int, str)


def screen_value(value: object, *, deep: bool = True) -> wire.Message | Refused:
    """A decoded value from the server: the message, or why it is refused.

    `deep=False` says the raw text showed it cannot nest past MAX_DEPTH.
    """
    if deep and nested_too_deep(value):
        return _too_deep(value)
    if (
        type(value) is dict
        and type(value.get("result")) is dict
        and value.get("jsonrpc") == "2.0"
        and type(value.get("id")) in _ID_TYPES
        and "error" not in value
        and "method" not in value
    ):
        return value  # a well-formed result, the shape nearly every reply has
    try:
        msg = wire.validate(value)
    except wire.InvalidMessage as exc:
        return _invalid(value, exc)
    if "method" in msg:
        return msg
    msg_id = msg.get("id")
    if not (type(msg_id) is int or type(msg_id) is str or msg_id is None):
        # `true` or `1.0` would find call 1 in a dict: a reply names its call
        # by a string or an integer (or by null when it names none).
        return Refused("reply id is not a string or an integer")
    error = msg.get("error")
    if error is None or type(error["code"]) is int:
        return msg
    why = "error code is not an integer"  # `true` passes for 1 in Python
    if msg_id is None:
        return Refused(why)
    return Refused(why, to_call=malformed_reply(msg_id, why))


def _too_deep(value: object) -> Refused:
    why = f"nested deeper than {MAX_DEPTH} levels"
    if not isinstance(value, dict):
        return Refused(why)
    msg_id = value.get("id")
    if not isinstance(msg_id, str | int) or isinstance(msg_id, bool):
        return Refused(why)
    if "method" in value:
        refusal = wire.error_response(msg_id, wire.INVALID_REQUEST, f"Invalid Request: {why}")
        return Refused(why, to_server=refusal)
    return Refused(why, to_call=malformed_reply(msg_id, why))


def _invalid(value: object, exc: wire.InvalidMessage) -> Refused:
    if not isinstance(value, dict):
        return Refused(exc.reason)
    msg_id = value.get("id")
    if "method" in value:
        # A request the server sent us gets the error JSON-RPC prescribes; a
        # notification has nobody to answer.
        reply = exc.reply if exc.reply is not None and exc.reply.get("id") is not None else None
        return Refused(exc.reason, to_server=reply)
    why = _response_problem(value) or exc.reason
    if isinstance(msg_id, str | int) and not isinstance(msg_id, bool):
        return Refused(why, to_call=malformed_reply(msg_id, why))
    return Refused(why)


def _response_problem(value: dict[str, Any]) -> str | None:
    """What is wrong with a response, in words a client can act on."""
    if value.get("jsonrpc") != "2.0":
        return 'jsonrpc is not "2.0"'
    if ("result" in value) == ("error" in value):
        return "a response needs exactly one of result and error"
    if "result" in value:
        return "result is not an object"
    error = value["error"]
    if not isinstance(error, dict):
        return "error is not an object"
    if not _is_int(error.get("code")):
        return "error code is not an integer"
    return None


# The start or end of an over-long line that shows it is a reply, and to which
# (integer) id: the gateway's own upstream ids are integers. Python SDKs write
# {"jsonrpc", "id", "result"|"error", ...}; the TypeScript SDK writes
# {"result"|"error": ..., "jsonrpc", "id"}. A nested "id" cannot match the
# tail pattern: it would be followed by more than one closing brace.
_HEAD_WITH_ID = re.compile(
    rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d+)\s*,'
    rb'\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"(?:result|error)"\s*:'
)
_HEAD_OF_REPLY = re.compile(rb'^\s*\{\s*"(?:result|error)"\s*:')
_TAIL_WITH_ID = re.compile(rb',\s*"id"\s*:\s*(-?\d+)\s*\}\s*$')


def oversized(item: wire.Oversized, limit: int) -> Refused:
    """An over-long line: its bytes are gone, but its edges may say which
    call it answered, and then that call fails now rather than time out."""
    why = f"the reply is over the {limit}-byte message limit ({item.size} bytes)"
    head = _HEAD_WITH_ID.match(item.head)
    if head is not None:
        return Refused(why, to_call=malformed_reply(int(head.group(1)), why))
    if _HEAD_OF_REPLY.match(item.head):
        tail = _TAIL_WITH_ID.search(item.tail)
        if tail is not None:
            return Refused(why, to_call=malformed_reply(int(tail.group(1)), why))
    return Refused(f"a message over the {limit}-byte limit ({item.size} bytes)")


# -- server requests and notifications (params per both revisions' schema.json) --


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def server_request_problem(msg: wire.Message) -> wire.Message | None:
    """The -32602 answer to a server request whose params break its schema
    (CreateMessageRequestParams, ElicitRequestParams), or None."""
    method = msg["method"]
    params = msg.get("params")
    why: str | None = None
    if method == "sampling/createMessage":
        if params is None:
            why = "params are required"
        elif not isinstance(params.get("messages"), list):
            why = '"messages" must be an array'
        elif not _is_int(params.get("maxTokens")):
            why = '"maxTokens" must be an integer'
    elif method == "elicitation/create":
        mode = (params or {}).get("mode", "form")
        if params is None:
            why = "params are required"
        elif not isinstance(params.get("message"), str):
            why = '"message" must be a string'
        elif mode == "form":
            if not isinstance(params.get("requestedSchema"), dict):
                why = '"requestedSchema" must be an object'
        elif mode == "url":
            if not isinstance(params.get("url"), str):
                why = '"url" must be a string'
        else:
            why = '"mode" must be "form" or "url"'
    if why is None:
        return None
    return wire.error_response(msg["id"], wire.INVALID_PARAMS, f"Invalid params: {why}")


def notification_problem(msg: wire.Message) -> str | None:
    """Why a server notification the gateway acts on breaks its schema, or None."""
    method = msg["method"]
    params: dict[str, Any] = msg.get("params") or {}
    if method == "notifications/progress":
        if not wire.is_request_id(params.get("progressToken")):
            return "progressToken must be a string or an integer"
        if not _is_number(params.get("progress")):
            return "progress must be a number"
    elif method == "notifications/message":
        if params.get("level") not in era.LOG_LEVELS:
            return f"level must be one of {', '.join(era.LOG_LEVELS)}"
        if "data" not in params:
            return "data is required"
    elif method == "notifications/cancelled":
        if "requestId" in params and not wire.is_request_id(params["requestId"]):
            return "requestId must be a string or an integer"
    elif method == "notifications/resources/updated" and not isinstance(params.get("uri"), str):
        return "uri must be a string"
    return None


# -- results the gateway reads ----------------------------------------------------


def result_type_problem(result: dict[str, Any]) -> str | None:
    """2026-07-28 Result: `resultType` is a string when present."""
    if "resultType" in result and not isinstance(result["resultType"], str):
        return "resultType is not a string"
    return None


def input_required_problem(result: dict[str, Any]) -> str | None:
    """2026-07-28 MRTR: an InputRequiredResult has `inputRequests` (an object)
    or `requestState` (a string), at least one of them."""
    requests = result.get("inputRequests")
    state = result.get("requestState")
    if requests is not None and not isinstance(requests, dict):
        return "inputRequests is not an object"
    if state is not None and not isinstance(state, str):
        return "requestState is not a string"
    if requests is None and state is None:
        return "input_required with neither inputRequests nor requestState"
    return None


def discover_problem(result: dict[str, Any]) -> str | None:
    """Wrong types in a DiscoverResult field the gateway reads."""
    if not isinstance(result.get("capabilities"), dict):
        return "capabilities is not an object"
    supported = result.get("supportedVersions")
    if not isinstance(supported, list) or not all(isinstance(v, str) for v in supported):
        return "supportedVersions is not an array of strings"
    return result_type_problem(result)
