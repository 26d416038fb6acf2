"""The Streamable HTTP header binding, written once for the HTTP front (which
checks a client's headers against the body) and the HTTP back (which writes
them): 2026-07-28 basic/transports/streamable-http "Standard Request
Headers", "Custom Headers from Tool Parameters" ("Schema Extension", "Value
Encoding", "Client Behavior", "Server Behavior for Custom Headers"), "Server
Validation". Issue #11 item 3: the `Mcp-Name` map and `x-mcp-header` parsing
were written twice, differently (the front read top-level properties only)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import era, wire
from gateway.core import http_binding as hb
from gateway.core.http_binding import HeaderParam, InvalidAnnotation
from tests.inprocess import MODERN_META, V, http_gateway
from tests.scripted import ScriptedServer, modern_server

pytestmark = pytest.mark.anyio


def params_of(schema: object) -> tuple[HeaderParam, ...]:
    return hb.tool_header_params({"name": "t", "inputSchema": schema})


def string(header: str) -> dict[str, Any]:
    return {"type": "string", "x-mcp-header": header}


# -- "Schema Extension": one parser, a test per constraint ----------------------------


def test_annotations_are_found_at_top_level_and_nested_paths() -> None:
    """ "Nested object properties are permitted as long as every step in the
    chain is a `properties` key"; "header extraction is defined as reading
    the instance value at the exact property path"."""
    schema = {
        "type": "object",
        "properties": {
            "region": string("Region"),
            "opts": {
                "type": "object",
                "properties": {"dry": {"type": "boolean", "x-mcp-header": "Dry"}},
            },
            "q": {"type": "string"},
        },
    }
    assert params_of(schema) == (
        HeaderParam(("region",), "Region"),
        HeaderParam(("opts", "dry"), "Dry"),
    )
    assert HeaderParam(("opts", "dry"), "Dry").header == "Mcp-Param-Dry"


@pytest.mark.parametrize("name", ["", "A b", "A:b", "Ä", "a/b", "(x)"])
def test_a_name_that_is_no_http_token_is_invalid(name: str) -> None:
    """ "MUST NOT be empty"; "MUST match HTTP field-name token syntax
    (`1*tchar`, RFC 9110 Section 5.1)"."""
    with pytest.raises(InvalidAnnotation, match="token"):
        params_of({"properties": {"a": string(name)}})


@pytest.mark.parametrize("name", ["A\r\nX-Injected: 1", "A\n", "A\x00", "A\t"])
def test_a_name_with_control_characters_is_invalid(name: str) -> None:
    """ "MUST NOT contain control characters, including carriage return (CR,
    `\\r`) or line feed (LF, `\\n`)"."""
    with pytest.raises(InvalidAnnotation, match="token"):
        params_of({"properties": {"a": string(name)}})


@pytest.mark.parametrize("name", [5, None, ["H"], {"a": "b"}])
def test_a_name_that_is_not_a_string_is_invalid(name: object) -> None:
    with pytest.raises(InvalidAnnotation, match="token"):
        params_of({"properties": {"a": {"type": "string", "x-mcp-header": name}}})


def test_names_must_be_unique_ignoring_case_across_the_schema() -> None:
    """ "MUST be case-insensitively unique among all `x-mcp-header` values in
    the `inputSchema`" — nested ones included."""
    with pytest.raises(InvalidAnnotation, match="twice"):
        params_of({"properties": {"a": string("X"), "b": string("x")}})
    nested = {"properties": {"a": string("X"), "b": {"properties": {"c": string("x")}}}}
    with pytest.raises(InvalidAnnotation, match="twice"):
        params_of(nested)


@pytest.mark.parametrize(
    "kind", ["number", "object", "array", ["number", "null"], ["string", "object"]]
)
def test_only_primitive_types_may_carry_a_header(kind: object) -> None:
    """ "MUST only be applied to parameters with primitive types (integer,
    string, boolean). Parameters with type `number` are not permitted"."""
    with pytest.raises(InvalidAnnotation):
        params_of({"properties": {"a": {"type": kind, "x-mcp-header": "A"}}})


@pytest.mark.parametrize("kind", ["string", "integer", "boolean", ["string", "null"], None])
def test_primitive_types_carry_a_header(kind: object) -> None:
    """The primitive types, nullable ones, and a schema with no `type` (which
    cannot be shown to break the rule) are accepted."""
    schema: dict[str, Any] = {"x-mcp-header": "A"}
    if kind is not None:
        schema["type"] = kind
    assert params_of({"properties": {"a": schema}}) == (HeaderParam(("a",), "A"),)


@pytest.mark.parametrize(
    "schema",
    [
        string("A"),  # the root itself
        {"properties": {"a": {"items": string("A")}}},
        {"properties": {"a": {"prefixItems": [string("A")]}}},
        {"anyOf": [{"properties": {"a": string("A")}}]},
        {"oneOf": [{"properties": {"a": string("A")}}]},
        {"allOf": [{"properties": {"a": string("A")}}]},
        {"not": {"properties": {"a": string("A")}}},
        {"if": {"properties": {"a": string("A")}}},
        {"then": {"properties": {"a": string("A")}}},
        {"else": {"properties": {"a": string("A")}}},
        {"$defs": {"a": string("A")}},
        {"properties": {"a": {"$ref": "#/$defs/a", "$defs": {"a": string("A")}}}},
        {"additionalProperties": string("A")},
        {"patternProperties": {"^a": string("A")}},
    ],
)
def test_an_annotation_off_the_properties_chain_is_invalid(schema: dict[str, Any]) -> None:
    """ "MUST only be applied to properties that are statically reachable from
    the schema root ... MUST NOT pass through `items` (or any other array
    keyword), composition keywords, conditional keywords, or `$ref`. An
    `x-mcp-header` annotation anywhere else makes ... the tool definition
    invalid"."""
    with pytest.raises(InvalidAnnotation, match="reachable"):
        params_of(schema)


def test_annotations_in_data_keywords_are_not_annotations() -> None:
    """Instance data (`default`, `examples`, `const`, `enum`) is not schema,
    and a property named "x-mcp-header" is a property."""
    schema = {
        "properties": {
            "a": {"type": "object", "default": {"x-mcp-header": "nope"}},
            "b": {"enum": [{"x-mcp-header": "nope"}], "examples": [{"x-mcp-header": "no"}]},
            "x-mcp-header": {"type": "string"},
        }
    }
    assert params_of(schema) == ()


@pytest.mark.parametrize("schema", [None, "schema", 5, [], {"properties": "p"}])
def test_a_schema_of_the_wrong_shape_has_no_annotations(schema: object) -> None:
    assert params_of(schema) == ()


# -- "Value Encoding" -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        ("us-west1", "us-west1"),
        ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
        (" padded ", "=?base64?IHBhZGRlZCA=?="),
        ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
        ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
    ],
)
def test_value_encoding_matches_the_spec_table(value: str, encoded: str) -> None:
    assert hb.encode_value(value) == encoded
    assert hb.decode_value(encoded) == value


@settings(deadline=None)  # a loaded machine must not fail a pure test
@given(st.text())
def test_every_value_survives_the_header(value: str) -> None:
    """What the back encodes, the front decodes to the same value, and the
    header is visible ASCII (no CR/LF to inject another header)."""
    encoded = hb.encode_value(value)
    assert all(c == "\t" or " " <= c <= "~" for c in encoded)
    assert hb.decode_value(encoded) == value


@pytest.mark.parametrize("raw", ["=?base64?not base64!?=", "=?base64?/w==?=", "Zürich", "a\x01b"])
def test_a_malformed_header_value_decodes_to_nothing(raw: str) -> None:
    """Bad base64, bytes that are not UTF-8, and raw characters outside
    visible ASCII are "invalid characters" ("Server Behavior")."""
    assert hb.decode_value(raw) is None


@pytest.mark.parametrize(
    ("value", "text"),
    [("s", "s"), (42, "42"), (-7, "-7"), (True, "true"), (False, "false"), (42.0, "42")],
)
def test_type_conversion(value: object, text: str) -> None:
    """ "Type conversion": string as-is, integer in decimal, boolean lower case."""
    assert hb.header_text(value) == text


@pytest.mark.parametrize("value", [None, {}, [], {"a": 1}])
def test_no_header_for_null_or_non_primitive_values(value: object) -> None:
    assert hb.header_text(value) is None


# -- "Client Behavior" (the back) -------------------------------------------------

TOOL_SCHEMA = {
    "type": "object",
    "properties": {
        "region": string("Region"),
        "opts": {
            "type": "object",
            "properties": {
                "dry": {"type": "boolean", "x-mcp-header": "Dry"},
                "n": {"type": "integer", "x-mcp-header": "N"},
            },
        },
    },
}
TOOL_PARAMS = params_of(TOOL_SCHEMA)


def call(arguments: object, name: str = "query") -> wire.Message:
    params = {"name": name, "arguments": arguments, "_meta": MODERN_META}
    return wire.request(1, "tools/call", params)


def test_the_client_mirrors_each_value_at_its_path() -> None:
    """ "Client Behavior" 1-5: Mcp-Method, Mcp-Name, and an Mcp-Param-{Name}
    per annotated value present, encoded; none for an absent or null one."""
    headers = hb.modern_headers(
        call({"region": "Zürich", "opts": {"dry": True, "n": None}}), {"query": TOOL_PARAMS}
    )
    assert headers == {
        "MCP-Protocol-Version": V,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "query",
        "Mcp-Param-Region": hb.encode_value("Zürich"),
        "Mcp-Param-Dry": "true",
    }


@pytest.mark.parametrize(
    ("method", "params", "name"),
    [
        ("tools/call", {"name": "get weather"}, "get weather"),
        ("prompts/get", {"name": "greet"}, "greet"),
        ("resources/read", {"uri": "file:///é"}, hb.encode_value("file:///é")),
    ],
)
def test_mcp_name_comes_from_name_or_uri(method: str, params: dict[str, Any], name: str) -> None:
    """ "Standard Request Headers": Mcp-Name is `params.name` or `params.uri`
    for tools/call, resources/read and prompts/get, base64 when unsafe."""
    msg = wire.request(1, method, {**params, "_meta": MODERN_META})
    assert hb.modern_headers(msg, {})["Mcp-Name"] == name
    assert "Mcp-Name" not in hb.modern_headers(
        wire.request(1, "tools/list", {"_meta": MODERN_META}), {}
    )


# -- "Server Validation" (the front) ----------------------------------------------


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def check(msg: wire.Message, headers: dict[str, str]) -> wire.Message | None:
    return hb.check_modern_headers(lower(headers), msg, TOOL_PARAMS)


def mismatch_text(problem: wire.Message | None) -> str:
    assert problem is not None and problem["error"]["code"] == wire.HEADER_MISMATCH
    return str(problem["error"]["message"])


@pytest.mark.parametrize("drop", ["MCP-Protocol-Version", "Mcp-Method", "Mcp-Name"])
def test_a_missing_standard_header_is_a_mismatch(drop: str) -> None:
    """ "Validation failure conditions": a required standard header missing."""
    msg = call({"region": "eu"})
    headers = hb.modern_headers(msg, {"query": TOOL_PARAMS})
    del headers[drop]
    assert "required" in mismatch_text(check(msg, headers))


def test_a_nested_parameter_header_is_checked_against_its_path() -> None:
    """ "Server Validation": a header naming another value than the body's at
    the annotated (nested) path is refused, and a missing one too."""
    msg = call({"region": "eu", "opts": {"n": 42}})
    good = hb.modern_headers(msg, {"query": TOOL_PARAMS})
    assert check(msg, good) is None
    assert "does not match argument 'opts/n'" in mismatch_text(
        check(msg, {**good, "Mcp-Param-N": "41"})
    )
    del good["Mcp-Param-N"]
    assert "required (argument 'opts/n')" in mismatch_text(check(msg, good))


def test_a_header_for_an_absent_argument_is_a_mismatch() -> None:
    """ "Server Validation" exists because an intermediary may route on the
    header: a Mcp-Param header naming a value the body does not carry
    (absent, null or not a primitive) is refused."""
    for args in (
        {"region": "eu"},
        {"region": "eu", "opts": {"n": None}},
        {"region": "eu", "opts": {"n": [1]}},
    ):
        msg = call(args)
        headers = {**hb.modern_headers(msg, {"query": TOOL_PARAMS}), "Mcp-Param-N": "7"}
        assert "names no argument 'opts/n'" in mismatch_text(check(msg, headers))


def test_integers_compare_numerically_and_exactly() -> None:
    """ "Server Validation": integer values compare numerically (`42.0` and
    `42` are equal); and exactly, so integers past 2**53 that a float
    comparison takes for one another are told apart."""
    msg = call({"region": "eu", "opts": {"n": 42}})
    headers = hb.modern_headers(msg, {"query": TOOL_PARAMS})
    assert check(msg, {**headers, "Mcp-Param-N": "42.0"}) is None
    big = call({"region": "eu", "opts": {"n": 2**53 + 1}})
    headers = hb.modern_headers(big, {"query": TOOL_PARAMS})
    assert check(big, headers) is None
    assert "does not match" in mismatch_text(check(big, {**headers, "Mcp-Param-N": str(2**53)}))
    assert "does not match" in mismatch_text(check(big, {**headers, "Mcp-Param-N": "sNaN"}))


def test_a_header_with_invalid_characters_is_a_mismatch() -> None:
    """ "Servers MUST reject requests with a recognized Mcp-Param-{Name}
    header that contains invalid characters"."""
    msg = call({"region": "eu"})
    headers = {**hb.modern_headers(msg, {"query": TOOL_PARAMS}), "Mcp-Param-Region": "=?base64?!?="}
    assert "invalid characters" in mismatch_text(check(msg, headers))


JSON_SCALAR = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
PATHS = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3).map(tuple)


@settings(deadline=None)
@given(
    st.lists(PATHS, max_size=4, unique=True),
    st.recursive(
        JSON_SCALAR, lambda x: st.dictionaries(st.sampled_from(["a", "b", "c"]), x), max_leaves=8
    ),
)
def test_what_the_back_writes_the_front_accepts(
    paths: list[tuple[str, ...]], arguments: object
) -> None:
    """Front and back read one parser: for any annotated schema and any
    arguments, the headers the back writes pass the front's validation."""
    properties: dict[str, Any] = {}
    for i, path in enumerate(paths):
        node = properties
        for step in path[:-1]:
            node = node.setdefault(step, {"type": "object", "properties": {}}).setdefault(
                "properties", {}
            )
        node.setdefault(path[-1], {"x-mcp-header": f"H{i}"})
    try:
        params = params_of({"type": "object", "properties": properties})
    except InvalidAnnotation:
        return  # an annotated object (a path that is a prefix of another)
    msg = call(arguments)
    headers = hb.modern_headers(msg, {"query": params})
    assert hb.check_modern_headers(lower(headers), msg, params) is None


# -- the front, in-process: it learns annotations from tools/list ----------------------

NESTED_TOOL = {"name": "query", "inputSchema": TOOL_SCHEMA}
BAD_TOOL = {
    "name": "bad",
    "inputSchema": {"properties": {"x": {"type": "number", "x-mcp-header": "X"}}},
}


async def _list(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {"tools": [NESTED_TOOL, BAD_TOOL]}


async def _echo(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "ran"}]}


async def _post_call(
    g: Any, arguments: dict[str, Any], extra: dict[str, str], name: str = "query"
) -> Any:
    msg = call(arguments, name)
    headers = lower({**hb.modern_headers(msg, {}), **extra})
    return await g.post(msg, headers)


async def test_the_front_checks_nested_headers_it_learned_from_tools_list() -> None:
    """Issue #11 item 3: the front read only top-level `x-mcp-header`
    properties, so a nested parameter's header was never checked: a client
    could send `Mcp-Param-N: 41` for `opts.n = 42`, and an intermediary
    routing on it would act on a value the server never saw."""
    async with http_gateway(modern_server({"tools/list": _list, "tools/call": _echo})) as g:
        assert (await g.modern("tools/list")).status_code == 200
        ok = await _post_call(
            g, {"region": "eu", "opts": {"n": 42}}, {"Mcp-Param-Region": "eu", "Mcp-Param-N": "42"}
        )
        wrong = await _post_call(
            g, {"region": "eu", "opts": {"n": 42}}, {"Mcp-Param-Region": "eu", "Mcp-Param-N": "41"}
        )
        missing = await _post_call(
            g, {"region": "eu", "opts": {"n": 42}}, {"Mcp-Param-Region": "eu"}
        )
        absent = await _post_call(
            g, {"region": "eu"}, {"Mcp-Param-Region": "eu", "Mcp-Param-N": "7"}
        )
        big = 2**53 + 1
        rounded = await _post_call(
            g,
            {"region": "eu", "opts": {"n": big}},
            {"Mcp-Param-Region": "eu", "Mcp-Param-N": str(big - 1)},
        )
    assert ok.status_code == 200 and ok.json()["result"]["content"][0]["text"] == "ran"
    for refused in (wrong, missing, absent, rounded):
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == wire.HEADER_MISMATCH


async def test_the_front_expects_no_headers_for_a_tool_with_invalid_annotations() -> None:
    """ "Schema Extension": a tool whose annotations break the rules is one a
    conforming client excludes and sends no headers for; the front (like the
    mcp 2.x server) checks none for it rather than guess which apply."""
    async with http_gateway(modern_server({"tools/list": _list, "tools/call": _echo})) as g:
        await g.modern("tools/list")
        assert "bad" not in g.front._tools.known()
        reply = await _post_call(g, {"x": 1.5}, {}, name="bad")
    assert reply.status_code == 200


def test_modern_meta_is_what_the_binding_reads() -> None:
    """The version header is compared with `_meta`'s protocol version."""
    msg = call({"region": "eu"})
    headers = {
        **hb.modern_headers(msg, {"query": TOOL_PARAMS}),
        "MCP-Protocol-Version": "2025-11-25",
    }
    assert "does not match _meta" in mismatch_text(check(msg, headers))
    assert msg["params"]["_meta"][era.PROTOCOL_VERSION] == V


def test_the_tool_cache_learns_listed_tools_and_leaves_invalid_ones_out() -> None:
    """ "Schema Extension": "Clients using the Streamable HTTP transport MUST
    reject tool definitions where any `x-mcp-header` value violates these
    constraints. Rejection means the client MUST exclude the invalid tool from
    the result of `tools/list`." One rule for both sides: the back filters the
    list it hands on, the front forgets what a tool it knew no longer has."""
    cache = hb.ToolHeaderCache()
    good = {"name": "query", "inputSchema": TOOL_SCHEMA}
    bad = {"name": "bad", "inputSchema": {"properties": {"x": {"x-mcp-header": "a b"}}}}
    kept, excluded = cache.take([good, bad, "not a tool", {"name": 3}])
    assert kept == [good, "not a tool", {"name": 3}]
    assert [name for name, _ in excluded] == ["bad"] and "HTTP token" in excluded[0][1]
    assert cache.known() == {"query": TOOL_PARAMS} and cache.by_name == cache.known()
    # Listed again with a broken annotation, the tool is forgotten.
    broken = {"name": "query", "inputSchema": {"properties": {"r": {"x-mcp-header": ""}}}}
    kept, _ = cache.take([broken])
    assert kept == [] and cache.params("query") is None


@settings(deadline=None)
@given(st.text())
def test_a_raw_value_is_taken_exactly_when_it_is_visible_ascii_or_tab(raw: str) -> None:
    """Per "Server Behavior", a value that is not a sentinel is taken as it is
    (less surrounding spaces and tabs) when every character is visible ASCII
    or a tab, and is invalid otherwise."""
    value = raw.strip(" \t")
    if value.startswith(hb.SENTINEL_PREFIX) and value.endswith(hb.SENTINEL_SUFFIX):
        return
    visible = all(c == "\t" or " " <= c <= "~" for c in value)
    assert hb.decode_value(raw) == (value if visible else None)
