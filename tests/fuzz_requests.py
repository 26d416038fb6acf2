"""Hostile requests for the fronts, as hypothesis strategies (issue "Nothing a
client, a server or a connection sends can crash, wedge or exhaust the
gateway"): arbitrary JSON, JSON-RPC envelopes of both eras with a field the
gateway reads replaced by something of another shape (or removed, huge,
deeply nested), raw lines, and HTTP POSTs with hostile headers; and what a
front must answer to them. From tests/test_fuzz_fronts.py."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
from hypothesis import strategies as st

from gateway import era, wire
from tests.inprocess import MODERN_META

# -- JSON-RPC lines ------------------------------------------------------------------------

JSON: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
# Ids the fuzz uses: few, so duplicates happen. Well-behaved ids never collide.
FUZZ_IDS = st.integers(min_value=0, max_value=4) | st.sampled_from(["a", "b", ""])
# Every method of both revisions, and a vendor request and notification.
METHODS = sorted(era.SPEC_METHODS | {"vendor/unknown", "notifications/vendor"})


def _good_params(method: str, modern: bool, features: bool) -> dict[str, Any]:
    good: dict[str, dict[str, Any]] = {
        "initialize": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}} if features else {},
            "clientInfo": {"name": "fuzz", "version": "1"},
        },
        "tools/call": {"name": "echo", "arguments": {"text": "t"}},
        "prompts/get": {"name": "p"},
        "resources/read": {"uri": "mem://a"},
        "resources/subscribe": {"uri": "mem://a"},
        "resources/unsubscribe": {"uri": "mem://a"},
        "logging/setLevel": {"level": "info"},
        "subscriptions/listen": {"notifications": {"toolsListChanged": True}},
        "notifications/cancelled": {"requestId": 1},
        "notifications/progress": {"progressToken": "t", "progress": 1},
        "completion/complete": {
            "ref": {"type": "ref/prompt", "name": "p"},
            "argument": {"name": "a", "value": "b"},
        },
    }
    params = dict(good.get(method, {}))
    if modern and method != "initialize":
        caps: dict[str, Any] = {"elicitation": {}, "sampling": {}} if features else {}
        params["_meta"] = {**MODERN_META, era.CLIENT_CAPABILITIES: caps}
    return params


# Where a mutation lands: the fields the gateway reads.
PATHS: list[tuple[str, ...]] = [
    ("id",),
    ("method",),
    ("jsonrpc",),
    ("params",),
    ("params", "_meta"),
    ("params", "_meta", era.PROTOCOL_VERSION),
    ("params", "_meta", era.CLIENT_CAPABILITIES),
    ("params", "_meta", era.CLIENT_INFO),
    ("params", "_meta", era.LOG_LEVEL),
    ("params", "_meta", "progressToken"),
    ("params", "name"),
    ("params", "uri"),
    ("params", "cursor"),
    ("params", "level"),
    ("params", "requestState"),
    ("params", "inputResponses"),
    ("params", "notifications"),
    ("params", "requestId"),
    ("params", "arguments"),
    ("params", "protocolVersion"),
    ("params", "capabilities"),
    ("params", "clientInfo"),
]

_DELETE = object()


def _deep(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


REPLACEMENTS = st.one_of(
    JSON,
    st.just(_DELETE),
    st.just("x" * 70_000),
    st.integers(min_value=100, max_value=240).map(_deep),
    st.sampled_from(["g1.AAAA", "g1." + "A" * 64 + "=", "not-a-state", "g1..", ""]),
    st.dictionaries(st.text(max_size=6), JSON, max_size=3),  # inputResponses-like
)


def _set(msg: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node: Any = msg
    for key in path[:-1]:
        if not isinstance(node, dict):
            return
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    if not isinstance(node, dict):
        return
    if value is _DELETE:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value


@st.composite
def envelopes(draw: st.DrawFn) -> bytes:
    """A JSON-RPC message of either era, with up to three fields mutated."""
    method = draw(st.sampled_from(METHODS))
    modern = draw(st.booleans())
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if not method.startswith("notifications/"):
        msg["id"] = draw(FUZZ_IDS)
    msg["params"] = _good_params(method, modern, draw(st.booleans()))
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        _set(msg, draw(st.sampled_from(PATHS)), draw(REPLACEMENTS))
    try:
        return orjson.dumps(msg)
    except orjson.JSONEncodeError:  # e.g. an integer beyond 64 bits
        return b'{"jsonrpc":"2.0","id":1,"method":"ping","params":' + b"[" * 300 + b"]" * 300 + b"}"


def _raw_deep(levels: int) -> bytes:
    """Deeper than orjson can encode: written by hand."""
    meta = orjson.dumps({**MODERN_META, era.CLIENT_CAPABILITIES: {"elicitation": {}}}).decode()
    args = "[" * levels + "]" * levels
    return (
        f'{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":'
        f'{{"name":"echo","arguments":{{"a":{args}}},"_meta":{meta}}}}}'
    ).encode()


HOSTILE_LINES = st.one_of(
    envelopes(),
    envelopes(),
    envelopes(),
    JSON.map(orjson.dumps),
    st.binary(max_size=64).map(lambda b: b.replace(b"\n", b" ")),
    st.integers(min_value=250, max_value=1100).map(_raw_deep),
)


# -- HTTP POSTs --------------------------------------------------------------------------

HEADER_VALUES = st.one_of(
    st.sampled_from(["2026-07-28", "2025-11-25", "tools/call", "echo", "", "=?base64?AAA?="]),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=20),
)
HEADERS = st.dictionaries(
    st.sampled_from(
        ["mcp-protocol-version", "mcp-method", "mcp-name", "mcp-session-id", "mcp-param-text"]
    ),
    HEADER_VALUES,
    max_size=3,
)


# A header value that stands for "the session the fuzz opened last".
OPEN_SESSION = "<open session>"


@st.composite
def http_posts(draw: st.DrawFn) -> tuple[bytes, dict[str, str]]:
    body = draw(HOSTILE_LINES)
    headers = draw(HEADERS)
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        value = None
    if isinstance(value, dict) and draw(st.booleans()):
        # Headers that agree with the body, so it gets past the binding's checks.
        headers.setdefault("mcp-protocol-version", era.NEWEST_MODERN)
        if isinstance(value.get("method"), str):
            headers.setdefault("mcp-method", value["method"])
        params = value.get("params")
        name = params.get("name") or params.get("uri") if isinstance(params, dict) else None
        if isinstance(name, str) and name.isascii() and name.isprintable():
            headers.setdefault("mcp-name", name)
    if draw(st.integers(min_value=0, max_value=3)) == 0:
        headers["content-type"] = draw(st.sampled_from(["text/plain", "application/json; x=1"]))
    if draw(st.booleans()):
        headers["mcp-session-id"] = OPEN_SESSION
    if draw(st.integers(min_value=0, max_value=7)) == 0:
        headers[":method"] = draw(st.sampled_from(["GET", "DELETE", "PUT"]))
    return body, headers


# -- what a front must answer ---------------------------------------------------------


def _expected_answers(lines: list[bytes]) -> Counter[Any]:
    """How many answers each id must get: one per line that is not a
    response, except ids the client cancelled (2026-07-28 "Cancellation": no
    reply). JSON-RPC 2.0 §5: an invalid request is answered under its id when
    the id can be read."""
    expected: Counter[Any] = Counter()
    cancelled: set[Any] = set()
    for line in lines:
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(value, dict):
            continue
        # A well-formed response (result or error, not both) is never answered.
        is_response = "method" not in value and value.get("jsonrpc") == "2.0"
        if is_response and ("result" in value) != ("error" in value):
            continue
        params = value.get("params")
        if value.get("method") == "notifications/cancelled" and isinstance(params, dict):
            target = params.get("requestId")
            if wire.is_request_id(target):
                cancelled.add(target)
        if "id" in value and wire.is_request_id(value["id"]):
            expected[value["id"]] += 1
    for target in cancelled:
        expected.pop(target, None)
    return expected


def check_http_response(resp: Any) -> None:
    status = resp.status_code
    assert status < 500 or status == 503, (status, resp.text)
    ctype = resp.headers.get("content-type", "")
    if status >= 400:
        body = resp.json()
        assert body["error"]["code"] < 0
    elif ctype == "application/json":
        wire.validate(resp.json())
    elif ctype == "text/event-stream":
        for block in resp.text.split("\n\n"):
            for line in block.split("\n"):
                # An empty data field is 2025-11-25's priming event, no message.
                if line.startswith("data: ") and line[6:]:
                    wire.validate(orjson.loads(line[6:]))
