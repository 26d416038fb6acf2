"""Client input of the wrong shape: refused with a clear JSON-RPC error before
any logic sees it, and nothing leaks (issue "Nothing a client, a server or a
connection sends can crash, wedge or exhaust the gateway")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import era, inbound, wire
from gateway.backs.server_output import ServerOutput
from gateway.core import upstream_checks
from tests.inprocess import MODERN_META, http_gateway
from tests.scripted import ScriptedServer, gateway, legacy_server

pytestmark = pytest.mark.anyio

FEATURES_META = {**MODERN_META, era.CLIENT_CAPABILITIES: {"elicitation": {}}}


async def echo(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "ok"}]}


def _is_invalid_params(reply: wire.Message, field: str) -> bool:
    error = reply.get("error") or {}
    return (
        error.get("code") == wire.INVALID_PARAMS
        and field in error.get("message", "")
        and error.get("data", {}).get("field") == field
    )


# -- defect: an unhashable log level killed the gateway ---------------------------


@pytest.mark.parametrize("level", [[], {}, ["debug"], 3])
async def test_a_modern_log_level_of_the_wrong_type_is_invalid_params(level: object) -> None:
    """Issue defect 1: `_meta` logLevel `[]` or `{}` raised `TypeError:
    unhashable` (the stdio gateway exited 1). 2026-07-28 RequestMetaObject:
    logLevel is a LoggingLevel, so anything else is -32602 naming the field."""
    async with gateway(legacy_server({"tools/call": echo})) as c:
        for _ in range(2):  # the fast path (settled) and the task path alike
            reply = await c.call(
                "tools/call", {"name": "x", "arguments": {}, "_meta": {era.LOG_LEVEL: level}}
            )
            assert _is_invalid_params(reply, f"params._meta[{era.LOG_LEVEL!r}]"), reply
        assert (await c.call("tools/call", {"name": "x", "arguments": {}}))["result"]


@pytest.mark.parametrize("level", [[], {}, 7, "verbose"])
async def test_a_legacy_set_level_of_the_wrong_type_is_invalid_params(level: object) -> None:
    """Issue defect 1: legacy `logging/setLevel` with `"level": []` raised
    `TypeError: unhashable`. 2025-11-25 SetLevelRequestParams: level is a
    LoggingLevel."""
    async with gateway(legacy_server({"tools/call": echo})) as c:
        await c.initialize()
        reply = await c.call("logging/setLevel", {"level": level}, modern=False)
        assert _is_invalid_params(reply, "params.level"), reply
        assert "result" in await c.call("logging/setLevel", {"level": "info"}, modern=False)


async def test_a_bad_log_level_over_http_is_a_400_not_a_500() -> None:
    """Issue defect 1: over HTTP the same message answered 500."""
    async with http_gateway(legacy_server({"tools/call": echo})) as g:
        resp = await g.modern("tools/call", {"name": "x", "_meta": {era.LOG_LEVEL: []}})
        assert resp.status_code == 400
        assert _is_invalid_params(resp.json(), f"params._meta[{era.LOG_LEVEL!r}]")


# -- defect: deep nesting passed the decoder and killed the params digest ---------


def test_a_message_nested_too_deep_is_invalid_request_at_decode() -> None:
    """Issue defect 2: JSON a few hundred levels deep passed `orjson.loads` and
    then raised `TypeError: Recursion limit reached` in the params digest.
    The decoder bounds nesting (wire.MAX_NESTING) and answers -32600 with the id."""
    with pytest.raises(wire.InvalidMessage) as caught:
        wire.decode(_deep_json(7, 300))
    reply = caught.value.reply
    assert reply is not None and reply["id"] == 7
    assert reply["error"]["code"] == wire.INVALID_REQUEST
    assert str(wire.MAX_NESTING) in reply["error"]["message"]
    # Just under the bound still decodes (and orjson can still encode it).
    ok = wire.decode(_deep_json(8, wire.MAX_NESTING - 6))
    assert orjson.dumps(ok)


def _deep_json(msg_id: int, levels: int) -> bytes:
    """orjson cannot encode what it is asked to refuse: build the text by hand."""
    meta = orjson.dumps(FEATURES_META).decode()
    args = "[" * levels + "]" * levels
    text = (
        f'{{"jsonrpc":"2.0","id":{msg_id},"method":"tools/call",'
        f'"params":{{"name":"x","arguments":{{"a":{args}}},"_meta":{meta}}}}}'
    )
    return text.encode()


async def test_a_deep_mrtr_call_over_http_is_refused_and_the_gateway_lives() -> None:
    """Issue defect 2, HTTP: the same call killed the gateway; now a 400 with
    -32600, and the next call is answered."""
    async with http_gateway(legacy_server({"tools/call": echo})) as g:
        resp = await g.post(_deep_json(3, 300))
        assert resp.status_code == 400
        assert resp.json()["error"]["code"] == wire.INVALID_REQUEST
        assert resp.json()["id"] == 3
        assert (await g.modern("tools/call", {"name": "x"})).status_code == 200


async def test_a_deep_mrtr_call_over_stdio_is_refused() -> None:
    """Issue defect 2, stdio: the front's decoder refuses the line, so the
    service never sees it."""
    from gateway.fronts.stdio_front import BadLine, StdioFront

    front = StdioFront(0, 1, max_bytes=1 << 20)
    front._take([_deep_json(4, 300)])
    (item,) = list(front._ready)
    assert isinstance(item, BadLine) and item.reply is not None
    assert item.reply["error"]["code"] == wire.INVALID_REQUEST


# -- defect: a bad progress token over HTTP leaked the in-progress count -----------


@pytest.mark.parametrize("token", [[], {}, 1.5, None, True])
async def test_a_bad_progress_token_over_http_is_400_and_leaks_nothing(token: object) -> None:
    """Issue defect 3: `_meta.progressToken` of `[]` or `{}` gave a 500 and
    leaked the per-principal in-progress count: after 64 such POSTs every
    request got 429. 2026-07-28 / 2025-11-25 schema: ProgressToken is
    string | integer, so this is -32602; the count is released on every path."""
    async with http_gateway(legacy_server({"tools/call": echo})) as g:
        for _ in range(g.service.config.http_max_concurrent + 2):
            resp = await g.modern("tools/call", {"name": "x", "_meta": {"progressToken": token}})
            assert resp.status_code == 400, resp.text
            assert _is_invalid_params(resp.json(), "params._meta.progressToken")
        assert g.front.access.busy == {}
        good = await g.modern("tools/call", {"name": "x", "_meta": {"progressToken": "p1"}})
        assert good.status_code == 200 and good.json()["result"]["content"]
        assert g.front.access.busy == {}


# -- the validation table agrees with both revisions' schema.json -------------------

SPEC = Path(__file__).resolve().parents[2] / "shared" / "spec"
if not SPEC.is_dir():
    SPEC = Path("/work/shared/spec")
# What each Kind is in the schemas: a JSON type, or the definition it refers to.
_SCHEMA_FORM: dict[inbound.Kind, dict[str, Any]] = {
    inbound.Kind.STRING: {"type": "string"},
    inbound.Kind.OBJECT: {"type": "object"},
    inbound.Kind.REQUEST_ID: {"$ref": "#/$defs/RequestId"},
    inbound.Kind.PROGRESS_TOKEN: {"$ref": "#/$defs/ProgressToken"},
    inbound.Kind.LOG_LEVEL: {"$ref": "#/$defs/LoggingLevel"},
    inbound.Kind.INPUT_RESPONSES: {"$ref": "#/$defs/InputResponses"},
    inbound.Kind.SUBSCRIPTION_FILTER: {"$ref": "#/$defs/SubscriptionFilter"},
}


def _defs(revision: str) -> dict[str, Any]:
    path = SPEC / revision / "schema.json"
    # The schemas are the authority for the table: their absence is a broken
    # checkout (../shared beside it), never a reason to pass unchecked.
    assert path.exists(), f"no {path}: the spec schemas must be in ../shared/spec"
    defs: dict[str, Any] = orjson.loads(path.read_bytes())["$defs"]
    return defs


def _resolve(defs: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[1]]
    return node


def _params_of(defs: dict[str, Any], method: str, notification: bool) -> dict[str, Any] | None:
    for name, d in defs.items():
        suffix = "Notification" if notification else "Request"
        props = d.get("properties", {})
        if name.endswith(suffix) and props.get("method", {}).get("const") == method:
            return _resolve(defs, props.get("params", {}))
    return None


def _same_shape(defs: dict[str, Any], kind: inbound.Kind, node: dict[str, Any]) -> bool:
    form = _SCHEMA_FORM[kind]
    if "$ref" in form:
        return bool(node.get("$ref") == form["$ref"])
    return bool(_resolve(defs, node).get("type") == form["type"])


@pytest.mark.parametrize("revision", ["2026-07-28", "2025-11-25"])
def test_the_field_table_agrees_with_the_schema(revision: str) -> None:
    """Issue, "Make it a property": the validation layer is driven by the two
    revisions' schema.json. Every field the table checks has that shape in
    every revision that has the method, and a field the table requires the
    schema requires too."""
    defs = _defs(revision)
    checked = 0
    tables = ((inbound.REQUEST_PARAMS, False), (inbound.NOTIFICATION_PARAMS, True))
    for table, notification in tables:
        for method, fields in table.items():
            params = _params_of(defs, method, notification)
            if params is None:
                continue  # not a method of this revision
            for spec in fields:
                node = params["properties"].get(spec.name)
                if node is None:
                    continue  # a field of the other revision (e.g. requestState)
                assert _same_shape(defs, spec.kind, node), (revision, method, spec)
                if spec.required:
                    assert spec.name in params.get("required", []), (revision, method, spec)
                checked += 1
    meta = _resolve(defs, _params_of(defs, "tools/call", False)["properties"]["_meta"])  # type: ignore[index]
    for spec in inbound.META_ANY_ERA:
        assert _same_shape(defs, spec.kind, meta["properties"][spec.name])
    if revision in era.MODERN_VERSIONS:
        for spec in inbound.META_MODERN:
            assert _same_shape(defs, spec.kind, meta["properties"][spec.name]), spec
            assert (spec.name in meta["required"]) == spec.required, spec
    assert checked > 10


def test_every_field_of_the_table_is_in_a_schema() -> None:
    """No field is checked that neither revision defines."""
    both = [_defs("2026-07-28"), _defs("2025-11-25")]
    tables = ((inbound.REQUEST_PARAMS, False), (inbound.NOTIFICATION_PARAMS, True))
    for table, notification in tables:
        for method, fields in table.items():
            known = [_params_of(defs, method, notification) for defs in both]
            for spec in fields:
                assert any(p and spec.name in p.get("properties", {}) for p in known), spec


@pytest.mark.parametrize("revision", ["2026-07-28", "2025-11-25"])
def test_the_log_levels_and_filter_flags_are_the_schemas(revision: str) -> None:
    """LoggingLevel's enum, and SubscriptionFilter's booleans (2026-07-28)."""
    defs = _defs(revision)
    assert sorted(defs["LoggingLevel"]["enum"]) == sorted(era.LOG_LEVELS)
    if "SubscriptionFilter" in defs:
        props = defs["SubscriptionFilter"]["properties"]
        flags = sorted(k for k, v in props.items() if v.get("type") == "boolean")
        assert flags == sorted(inbound._FILTER_FLAGS)


# -- each field the gateway reads: wrong type → -32602 naming it ---------------------

_GOOD_MODERN = {"_meta": MODERN_META}
_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("tools/call", {"name": 5}, "params.name"),
    ("tools/call", {}, "params.name"),
    ("prompts/get", {"name": None}, "params.name"),
    ("resources/read", {"uri": ["x"]}, "params.uri"),
    ("resources/read", {"uri": "a://b", "requestState": 1}, "params.requestState"),
    ("tools/call", {"name": "t", "inputResponses": []}, "params.inputResponses"),
    ("tools/call", {"name": "t", "inputResponses": {"i": "yes"}}, "params.inputResponses"),
    ("tools/list", {"cursor": 3}, "params.cursor"),
    ("resources/templates/list", {"cursor": {}}, "params.cursor"),
    ("subscriptions/listen", {"notifications": []}, "params.notifications"),
    ("subscriptions/listen", {"notifications": {"toolsListChanged": "y"}}, "params.notifications"),
    (
        "subscriptions/listen",
        {"notifications": {"resourceSubscriptions": [1]}},
        "params.notifications",
    ),
]


@pytest.mark.parametrize(("method", "params", "field"), _CASES)
def test_each_field_of_the_wrong_shape_is_named(
    method: str, params: dict[str, Any], field: str
) -> None:
    msg = wire.request(1, method, {**_GOOD_MODERN, **params})
    reply = inbound.error_for(msg)
    assert reply is not None and _is_invalid_params(reply, field), reply
    assert reply["error"]["data"]["source"] == wire.GATEWAY_SOURCE


@pytest.mark.parametrize(
    ("meta", "field"),
    [
        ({era.PROTOCOL_VERSION: 2026}, era.PROTOCOL_VERSION),
        ({era.CLIENT_CAPABILITIES: []}, era.CLIENT_CAPABILITIES),
        ({era.CLIENT_INFO: "me"}, era.CLIENT_INFO),
        ({era.LOG_LEVEL: "loud"}, era.LOG_LEVEL),
    ],
)
def test_each_modern_meta_key_of_the_wrong_shape_is_named(meta: dict[str, Any], field: str) -> None:
    msg = wire.request(1, "tools/list", {"_meta": {**MODERN_META, **meta}})
    reply = inbound.error_for(msg)
    assert reply is not None and _is_invalid_params(reply, f"params._meta[{field!r}]"), reply


def test_initialize_fields_are_checked() -> None:
    """2025-11-25 InitializeRequestParams."""
    good = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c"}}
    assert inbound.error_for(wire.request(1, "initialize", good)) is None
    for field, value in (("protocolVersion", 1), ("capabilities", []), ("clientInfo", "c")):
        reply = inbound.error_for(wire.request(1, "initialize", {**good, field: value}))
        assert reply is not None and _is_invalid_params(reply, f"params.{field}")


def test_a_cancel_with_a_bad_request_id_is_a_problem_but_has_no_answer() -> None:
    """A notification has nobody to answer (JSON-RPC 2.0 §4.1): it is dropped."""
    msg = wire.notification("notifications/cancelled", {"requestId": {"x": 1}})
    assert inbound.problem(msg) == ("params.requestId", "must be a string or an integer")
    assert inbound.error_for(msg) is None


def test_what_the_gateway_only_forwards_is_not_looked_at() -> None:
    """Issue: "Values the gateway only forwards stay untouched": tool
    arguments, unknown params and unknown `_meta` keys of any shape pass."""
    msg = wire.request(
        1,
        "tools/call",
        {
            "name": "t",
            "arguments": [1, {"deep": [None]}],
            "x-vendor": [],
            "_meta": {**MODERN_META, "com.example/k": [], "io.modelcontextprotocol/other": {}},
        },
    )
    assert inbound.problem(msg) is None
    legacy = wire.request(1, "vendor/thing", {"anything": [], "_meta": {"k": {}}})
    assert inbound.problem(legacy) is None


_ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=4,
) | st.sampled_from([*era.LOG_LEVELS, "2026-07-28", {}])


@settings(max_examples=300, deadline=None, derandomize=True)
@given(field=st.sampled_from([*inbound.META_MODERN, *inbound.META_ANY_ERA]), value=_ANY_JSON)
def test_the_written_out_meta_checks_agree_with_the_table(field: inbound.Field, value: Any) -> None:
    """The `_meta` checks on the hot path are written out by hand; they must
    refuse exactly what the table's kind refuses."""
    meta = {**MODERN_META, field.name: value}
    wrong = inbound.problem(wire.request(1, "tools/list", {"_meta": meta}))
    table_says_ok = inbound._first_wrong(meta, inbound._compile((field,), "params._meta")) is None
    assert (wrong is None) == table_says_ok, (field, value, wrong)
    if wrong is not None:
        assert wrong[0] == inbound._path("params._meta", field.name)


@pytest.mark.parametrize("method", sorted(era.REMOVED_IN_MODERN))
async def test_a_modern_request_for_a_removed_method_is_still_method_not_found(method: str) -> None:
    """DESIGN §4 / 2026-07-28 "Key Changes": a modern initialize, ping,
    logging/setLevel or resources/subscribe is -32601, even with none of the
    legacy params those methods had (the field checks do not get there first)."""
    async with gateway(legacy_server({"tools/call": echo})) as c:
        reply = await c.call(method, {})
        assert reply["error"]["code"] == wire.METHOD_NOT_FOUND, reply


def test_an_upstream_message_nested_too_deep_is_dropped_at_decode() -> None:
    """Issue defect 2 applies to upstream messages too: the bound holds for
    what a server sends, on the stdio back (ServerOutput) and the HTTP back
    (each JSON body or SSE event), which both screen with upstream_checks,
    so nothing deeper reaches the gateway; a reply that names its call stands
    in for it as an error (upstream-malformed)."""
    deep = '{"jsonrpc":"2.0","id":1,"result":{"a":' + "[" * 300 + "]" * 300 + "}}"
    with pytest.raises(wire.InvalidMessage):
        wire.decode(deep.encode())
    refused = upstream_checks.screen_line(deep)
    assert isinstance(refused, upstream_checks.Refused)
    assert refused.to_call is not None
    assert refused.to_call["error"]["data"]["reason"] == "upstream-malformed"
    output = ServerOutput(1 << 20, lambda msg: None, label="test")
    assert output.feed(deep.encode() + b"\n") == [refused.to_call]
    shallow = '{"jsonrpc":"2.0","id":1,"result":{"a":' + "[" * 100 + "]" * 100 + "}}"
    assert not isinstance(upstream_checks.screen_line(shallow), upstream_checks.Refused)
