"""W3C trace context in `_meta` (core/trace_context.py): the parser, the
tracestate bound, and what goes upstream.

2026-07-28 basic/index, "OpenTelemetry trace context": "the keys
`traceparent`, `tracestate`, and `baggage` are reserved for OpenTelemetry
trace context propagation. When present, their values MUST follow W3C Trace
Context". Issue #13: "a malformed traceparent from a client is ignored (a new
root span), never an error, and never forwarded as a parent"."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway import wire
from gateway.core import trace_context as tc

VALID = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"  # the spec's example
W3C_FORM = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")

HEX = "0123456789abcdef"


def part(size: int) -> st.SearchStrategy[str]:
    """A field of `size` hex digits most of the time (zeros, upper case and
    other lengths too), so that valid and nearly valid forms both come up."""
    return st.one_of(
        st.text(alphabet=HEX, min_size=size, max_size=size),
        st.just("0" * size),
        st.text(alphabet=HEX + "ABCDEFx", min_size=size, max_size=size),
        st.text(alphabet=HEX, max_size=size + 2),
    )


def test_the_specs_example_parses() -> None:
    """The non-normative example of 2026-07-28 basic/index."""
    parent = tc.parse_traceparent(VALID)
    assert parent == tc.TraceParent(0x0AF7651916CD43DD8448EB211C80319C, 0x00F067AA0BA902B7, 0x01)
    assert parent.sampled


def test_the_malformed_forms_are_refused() -> None:
    """W3C Trace Context §3.2: version 00 only here, lower-case hex, exact
    lengths, and neither id all zeros."""
    for bad in (
        VALID.upper(),
        "ff" + VALID[2:],  # version ff is invalid
        "01" + VALID[2:],  # a version this gateway does not read
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        VALID + "-00",
        VALID[:-1],
        " " + VALID,
        VALID.replace("-", "_"),
        "",
    ):
        assert tc.parse_traceparent(bad) is None, bad
    for not_text in (None, 1, [VALID], {"v": VALID}, b"00-"):
        assert tc.parse_traceparent(not_text) is None


@given(st.one_of(st.text(), st.binary(), st.integers(), st.none(), st.lists(st.text())))
def test_the_parser_never_raises(value: Any) -> None:
    """Issue #13: a malformed traceparent is "never an error"."""
    tc.parse_traceparent(value)
    tc.valid_tracestate(value)


@given(
    st.one_of(st.sampled_from(["00", "01", "ff"]), part(2)),
    part(32),
    part(16),
    part(2),
    st.sampled_from("--_ "),
)
def test_the_parser_accepts_exactly_the_valid_form(
    version: str, trace_id: str, span_id: str, flags: str, sep: str
) -> None:
    """Accepted iff version 00, 32 + 16 + 2 lower-case hex digits, ids not
    all zeros; and what it accepts formats back to the same text."""
    text = sep.join((version, trace_id, span_id, flags))
    valid = W3C_FORM.fullmatch(text) is not None and int(trace_id, 16) and int(span_id, 16)
    parent = tc.parse_traceparent(text)
    assert (parent is not None) == bool(valid)
    if parent is not None:
        assert tc.format_traceparent(parent.trace_id, parent.span_id, parent.flags) == text


def test_a_tracestate_passes_as_is_within_its_bound() -> None:
    assert tc.valid_tracestate("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7") == (
        "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
    )
    assert tc.valid_tracestate("a" * tc.MAX_TRACESTATE) is not None
    assert tc.valid_tracestate("a" * (tc.MAX_TRACESTATE + 1)) is None
    assert tc.valid_tracestate("rojo=1\r\nx: y") is None  # never a header injection
    assert tc.valid_tracestate(["rojo=1"]) is None


def test_a_malformed_traceparent_takes_its_tracestate_with_it() -> None:
    """W3C §3.3: "If the vendor failed to parse traceparent, it MUST NOT
    attempt to parse tracestate"."""
    msg = wire.request(1, "tools/call", {"_meta": {"traceparent": "junk", "tracestate": "a=1"}})
    assert tc.client_context(msg) is None
    good = wire.request(1, "tools/call", {"_meta": {"traceparent": VALID, "tracestate": "a=1"}})
    found = tc.client_context(good)
    assert found is not None and found.tracestate == "a=1"


def test_the_upstream_context_replaces_only_the_trace_keys() -> None:
    """Unknown params and `_meta` keys (`baggage` among them) pass through
    untouched; the client's params are not changed."""
    params: dict[str, Any] = {
        "name": "t",
        "_meta": {"traceparent": VALID, "tracestate": "x=1", "baggage": "k=v", "com.example/a": 1},
    }
    ours = "00-11111111111111111111111111111111-2222222222222222-01"
    out = tc.with_trace_context(params, ours, None)
    assert out == {
        "name": "t",
        "_meta": {"traceparent": ours, "baggage": "k=v", "com.example/a": 1},
    }
    assert params["_meta"]["traceparent"] == VALID  # a copy
    assert tc.with_trace_context(None, ours, "x=1") == {
        "_meta": {"traceparent": ours, "tracestate": "x=1"}
    }


def test_outcomes() -> None:
    assert tc.outcome_of(wire.result_response(1, {})).kind == tc.OK
    assert tc.outcome_of(wire.result_response(1, {"isError": True})).kind == tc.TOOL_ERROR
    ask = {"resultType": "input_required", "inputRequests": {}, "requestState": "s"}
    assert tc.outcome_of(wire.result_response(1, ask)).kind == tc.INPUT_REQUIRED
    error = tc.outcome_of(wire.error_response(1, -32601, "Method not found"))
    assert (error.kind, error.code, error.message) == (tc.ERROR, -32601, "Method not found")
