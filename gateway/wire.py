"""JSON-RPC 2.0 messages as plain dicts: decoding, validation, builders, framing.

Nothing here does I/O. Messages stay dicts so that unknown fields pass through
untouched; this module only looks at the envelope.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import orjson

Message = dict[str, Any]
RequestId = str | int

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# 2026-07-28 "Error Codes": the range -32020..-32099 belongs to the spec.
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022
# Codes of legacy revisions that a modern peer must never see.
LEGACY_RESOURCE_NOT_FOUND = -32002
URL_ELICITATION_REQUIRED = -32042

# How deep a message may nest (objects and arrays; the message itself is level
# 1). orjson parses up to 1024 levels but encodes at most 254, so a deeper
# message could be read and then neither forwarded nor digested; real MCP
# messages stay far below this (a tool's input schema nests a dozen levels).
MAX_NESTING = 128

# Errors the gateway raises itself carry this in `data.source`, so that a client
# can tell them from errors the upstream server sent (2026-07-28 "Error Codes":
# local errors must not be mistaken for the peer's).
GATEWAY_SOURCE = "mcp-era-gateway"


class Kind(Enum):
    REQUEST = "request"
    NOTIFICATION = "notification"
    RESULT = "result"
    ERROR = "error"


class InvalidMessage(Exception):
    """A decoded value that is not a JSON-RPC 2.0 message.

    `reply` is the error response to send back (None when nothing must be sent,
    e.g. for an invalid response, which has nobody to answer to).
    """

    def __init__(self, reply: Message | None, reason: str) -> None:
        super().__init__(reason)
        self.reply = reply
        self.reason = reason


def is_request_id(value: object) -> bool:
    # JSON-RPC ids are strings or integers, never null; `type() is` also
    # refuses bool (an int subclass) in one test, on a path every message takes.
    kind = type(value)
    return kind is str or kind is int


def error_object(code: int, message: str, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return err


def error_response(msg_id: RequestId | None, code: int, message: str, data: Any = None) -> Message:
    return {"jsonrpc": "2.0", "id": msg_id, "error": error_object(code, message, data)}


def gateway_error(msg_id: RequestId | None, code: int, message: str, **data: Any) -> Message:
    """An error the gateway itself raises, marked as such in `data.source`."""
    return error_response(msg_id, code, message, {"source": GATEWAY_SOURCE, **data})


def result_response(msg_id: RequestId, result: dict[str, Any]) -> Message:
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


def request(msg_id: RequestId, method: str, params: dict[str, Any] | None = None) -> Message:
    msg: Message = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def notification(method: str, params: dict[str, Any] | None = None) -> Message:
    msg: Message = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def kind_of(msg: Message) -> Kind:
    """Classify a message already accepted by `validate`."""
    if "method" in msg:
        return Kind.REQUEST if "id" in msg else Kind.NOTIFICATION
    return Kind.ERROR if "error" in msg else Kind.RESULT


def decode(data: bytes | str) -> Message:
    """Parse one framed message and check its envelope.

    Raises InvalidMessage with the error reply the spec prescribes: -32700 for
    bytes that are not JSON, -32600 for JSON that is not a JSON-RPC message.
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidMessage(
            error_response(None, PARSE_ERROR, f"Parse error: {exc}"), "not JSON"
        ) from None
    check_nesting(value, data)
    return validate(value)


def check_nesting(value: object, raw: bytes | str) -> None:
    """Refuse a decoded value nested deeper than MAX_NESTING (-32600).

    Counting brackets in the raw text runs at C speed and bounds the depth
    from above, so only a message with that many brackets is walked.
    """
    if len(raw) <= 2 * MAX_NESTING:
        return  # each level opens and closes: too short to nest that deep
    if isinstance(raw, str):
        brackets = raw.count("{") + raw.count("[")
    else:
        brackets = raw.count(b"{") + raw.count(b"[")
    if brackets <= MAX_NESTING or not nested_deeper(value, MAX_NESTING):
        return
    msg_id = value.get("id") if isinstance(value, dict) else None
    raise InvalidMessage(
        gateway_error(
            msg_id if is_request_id(msg_id) else None,
            INVALID_REQUEST,
            f"Invalid Request: the message nests deeper than {MAX_NESTING} levels",
            reason="too-deep",
        ),
        "too deep",
    )


def nested_deeper(value: object, limit: int) -> bool:
    """Whether objects and arrays in `value` nest more than `limit` levels."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:  # ends when every container was visited, or at the first too deep
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        for child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    return False


def validate(value: object) -> Message:
    if isinstance(value, list):
        # JSON-RPC batches were removed from MCP in 2025-06-18 and never came back.
        raise InvalidMessage(
            error_response(None, INVALID_REQUEST, "Invalid Request: batches are not supported"),
            "batch",
        )
    if not isinstance(value, dict):
        raise InvalidMessage(
            error_response(None, INVALID_REQUEST, "Invalid Request: not a JSON object"),
            "not an object",
        )
    msg_id = value.get("id")
    has_id = "id" in value
    answer_id = msg_id if is_request_id(msg_id) else None
    if value.get("jsonrpc") != "2.0":
        raise InvalidMessage(
            error_response(answer_id, INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"'),
            "bad jsonrpc",
        )
    if "method" in value:
        if not isinstance(value["method"], str):
            raise InvalidMessage(
                error_response(
                    answer_id, INVALID_REQUEST, 'Invalid Request: "method" must be a string'
                ),
                "bad method",
            )
        if has_id and not is_request_id(msg_id):
            raise InvalidMessage(
                error_response(
                    None, INVALID_REQUEST, 'Invalid Request: "id" must be a string or an integer'
                ),
                "bad id",
            )
        params = value.get("params")
        if "params" in value and not isinstance(params, dict):
            # MCP params are always objects (by-name); a positional array is no MCP message.
            if has_id:
                raise InvalidMessage(
                    error_response(
                        msg_id, INVALID_PARAMS, 'Invalid params: "params" must be an object'
                    ),
                    "bad params",
                )
            raise InvalidMessage(None, "notification with non-object params")
        if params is not None and "_meta" in params and not isinstance(params["_meta"], dict):
            if has_id:
                raise InvalidMessage(
                    error_response(
                        msg_id, INVALID_PARAMS, 'Invalid params: "_meta" must be an object'
                    ),
                    "bad _meta",
                )
            raise InvalidMessage(None, "notification with non-object _meta")
        return value
    # A response: never answered, whatever is wrong with it.
    if "result" in value and "error" not in value:
        if not isinstance(value["result"], dict) or not has_id:
            raise InvalidMessage(None, "malformed result")
        return value
    if "error" in value and "result" not in value:
        err = value["error"]
        if not isinstance(err, dict) or not isinstance(err.get("code"), int):
            raise InvalidMessage(None, "malformed error")
        return value
    raise InvalidMessage(
        error_response(answer_id, INVALID_REQUEST, "Invalid Request: no method, result or error"),
        "not a message",
    )


def encode(msg: Message) -> bytes:
    """One newline-terminated line (stdio framing: no embedded newlines)."""
    return orjson.dumps(msg) + b"\n"


# How much of an over-long line's start and end is kept: enough to see
# whose reply it was, never the line.
OVERSIZED_EDGE = 256


@dataclass(frozen=True, slots=True)
class Oversized:
    """A line longer than the limit; its bytes were discarded, not buffered,
    all but its first and last OVERSIZED_EDGE bytes."""

    size: int
    head: bytes = field(default=b"", compare=False)
    tail: bytes = field(default=b"", compare=False)


class LineSplitter:
    """Split a byte stream into newline-delimited lines with a size bound.

    A line over `max_bytes` is skipped as it streams past (only the count is
    kept), so a hostile peer cannot make us buffer an unbounded line.
    """

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._buf = bytearray()
        self._discarding = False
        self._discarded = 0
        self._head = b""
        self._tail = b""

    def feed(self, data: bytes) -> list[bytes | Oversized]:
        out: list[bytes | Oversized] = []
        start = 0
        nl = data.find(b"\n")
        while nl >= 0:
            if self._discarding:
                tail = (self._tail + data[start:nl])[-OVERSIZED_EDGE:]
                out.append(Oversized(self._discarded + nl - start, self._head, tail))
                self._discarding = False
                self._discarded = 0
            else:
                chunk = data[start:nl]
                if len(self._buf) + len(chunk) > self._max:
                    head = (bytes(self._buf[:OVERSIZED_EDGE]) + chunk[:OVERSIZED_EDGE])[
                        :OVERSIZED_EDGE
                    ]
                    tail = (bytes(self._buf[-OVERSIZED_EDGE:]) + chunk)[-OVERSIZED_EDGE:]
                    out.append(Oversized(len(self._buf) + len(chunk), head, tail))
                else:
                    line = bytes(self._buf) + chunk if self._buf else chunk
                    line = line.rstrip(b"\r")
                    if line.strip():
                        out.append(line)
                self._buf.clear()
            start = nl + 1
            nl = data.find(b"\n", start)
        self._take(data[start:], out)
        return out

    def _take(self, rest: bytes, out: list[bytes | Oversized]) -> None:
        if self._discarding:
            self._discarded += len(rest)
            self._tail = (self._tail + rest)[-OVERSIZED_EDGE:]
            return
        if len(self._buf) + len(rest) > self._max:
            self._discarding = True
            self._discarded = len(self._buf) + len(rest)
            self._head = (bytes(self._buf[:OVERSIZED_EDGE]) + rest[:OVERSIZED_EDGE])[
                :OVERSIZED_EDGE
            ]
            self._tail = (bytes(self._buf[-OVERSIZED_EDGE:]) + rest)[-OVERSIZED_EDGE:]
            self._buf.clear()
            return
        self._buf += rest

    def close(self) -> list[bytes | Oversized]:
        """End of stream: a final unterminated line still counts."""
        out: list[bytes | Oversized] = []
        if self._discarding:
            out.append(Oversized(self._discarded, self._head, self._tail))
        elif self._buf.strip():
            out.append(bytes(self._buf).rstrip(b"\r"))
        self._buf.clear()
        self._discarding = False
        return out
