"""W3C trace context in MCP messages, and what a span says about a request
and its reply. Pure: the runtime's tracing (runtime/tracing.py) does the
spans; this decides what the messages carry and mean.

2026-07-28 basic/index, "OpenTelemetry trace context": the `_meta` keys
`traceparent`, `tracestate` and `baggage` are reserved for trace context
propagation, and "when present, their values MUST follow W3C Trace Context".
2025-11-25 reserves nothing for it, but its `_meta` takes any key, and the
OpenTelemetry MCP conventions put the same keys in `params._meta` whatever
the revision: so both eras carry them the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gateway import wire
from gateway.core import mrtr_shapes

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
# W3C Trace Context §3.3: at most 32 list members; vendors should propagate at
# least 512 characters. Beyond this bound a tracestate is dropped, not cut.
MAX_TRACESTATE = 4096

# §3.2: version "00", then a lower-case hex trace id, parent id and flags.
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
# tracestate is printable ASCII (§3.3.1: keys and values are in 0x20-0x7E).
_TRACESTATE = re.compile(r"[\x20-\x7e]*")

# What a span records as the request's outcome.
OK = "ok"
ERROR = "error"
TOOL_ERROR = "tool_error"
INPUT_REQUIRED = "input_required"
CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class TraceParent:
    trace_id: int
    span_id: int
    flags: int

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 0x01)


def parse_traceparent(value: object) -> TraceParent | None:
    """The parent a valid `traceparent` names, or None for anything else (a
    malformed one starts a new trace, W3C §4.3: never an error)."""
    if not isinstance(value, str):
        return None
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return None
    trace_id, span_id = int(match[1], 16), int(match[2], 16)
    if trace_id == 0 or span_id == 0:  # §3.2.2.3-4: all zeros is invalid
        return None
    return TraceParent(trace_id, span_id, int(match[3], 16))


def format_traceparent(trace_id: int, span_id: int, flags: int) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"


def valid_tracestate(value: object) -> str | None:
    """A `tracestate` to pass on as it is: a string of printable ASCII within
    MAX_TRACESTATE; anything else is dropped."""
    if isinstance(value, str) and len(value) <= MAX_TRACESTATE and _TRACESTATE.fullmatch(value):
        return value
    return None


@dataclass(frozen=True, slots=True)
class ClientContext:
    """The trace context a client's request carries, if valid."""

    parent: TraceParent
    tracestate: str | None


def client_context(msg: wire.Message) -> ClientContext | None:
    """The client's parent from the request's `params._meta`; None when it
    has none or a malformed one (then its tracestate means nothing either,
    W3C §3.3: "if the vendor failed to parse traceparent, it MUST NOT attempt
    to parse tracestate")."""
    params = msg.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return None
    parent = parse_traceparent(meta.get(TRACEPARENT))
    if parent is None:
        return None
    return ClientContext(parent, valid_tracestate(meta.get(TRACESTATE)))


def with_trace_context(
    params: dict[str, Any] | None, traceparent: str, tracestate: str | None
) -> dict[str, Any]:
    """`params` with the gateway's own span as the parent in `_meta`: the
    client's `traceparent` and `tracestate` replaced, every other param and
    `_meta` key (`baggage` too) as it was. Copies; never changes `params`."""
    out = dict(params or {})
    old = out.get("_meta")
    meta = dict(old) if isinstance(old, dict) else {}
    meta[TRACEPARENT] = traceparent
    if tracestate is None:
        meta.pop(TRACESTATE, None)
    else:
        meta[TRACESTATE] = tracestate
    out["_meta"] = meta
    return out


def http_headers(msg: wire.Message) -> dict[str, str]:
    """The W3C `traceparent` and `tracestate` HTTP headers (W3C Trace Context
    §3) for the context a request carries in `_meta`, if valid: what an HTTP
    server's own instrumentation reads."""
    params = msg.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return {}
    traceparent = meta.get(TRACEPARENT)
    if not isinstance(traceparent, str) or parse_traceparent(traceparent) is None:
        return {}
    headers = {TRACEPARENT: traceparent}
    tracestate = valid_tracestate(meta.get(TRACESTATE))
    if tracestate:
        headers[TRACESTATE] = tracestate
    return headers


def request_attributes(msg: wire.Message) -> dict[str, str | bool]:
    """Span attributes of a client request: its method, the tool, prompt or
    resource it names, and whether it is an MRTR retry (it carries a
    requestState: 2026-07-28 basic/patterns/mrtr)."""
    method = msg.get("method")
    attrs: dict[str, str | bool] = {"mcp.method.name": str(method)}
    params = msg.get("params")
    if isinstance(params, dict):
        name = params.get("name")
        if method == "tools/call" and isinstance(name, str):
            attrs["gen_ai.tool.name"] = name
        elif method == "prompts/get" and isinstance(name, str):
            attrs["gen_ai.prompt.name"] = name
        if mrtr_shapes.is_retry(params):
            attrs["mcp.mrtr.retry"] = True
    return attrs


def span_name(msg: wire.Message) -> str:
    """OpenTelemetry MCP conventions: `{mcp.method.name} {target}`, the
    target being the tool or prompt name when there is one."""
    method = str(msg.get("method"))
    params = msg.get("params")
    if method in ("tools/call", "prompts/get") and isinstance(params, dict):
        name = params.get("name")
        if isinstance(name, str):
            return f"{method} {name}"
    return method


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: str  # OK, ERROR, TOOL_ERROR, INPUT_REQUIRED
    code: int | None = None  # the JSON-RPC error code
    message: str | None = None


def outcome_of(reply: wire.Message) -> Outcome:
    """What a reply says about its request: a JSON-RPC error (with its code),
    a tool's own error (`isError`), an `input_required` round, or success."""
    error = reply.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        text = error.get("message")
        return Outcome(
            ERROR,
            code if isinstance(code, int) else None,
            text if isinstance(text, str) else None,
        )
    result = reply.get("result")
    if mrtr_shapes.is_input_required(result):
        return Outcome(INPUT_REQUIRED)
    if isinstance(result, dict) and result.get("isError") is True:
        return Outcome(TOOL_ERROR)
    return Outcome(OK)
