"""The `sse` bench group's pure parts (issue #15: "bench: the SSE front
against supergateway's SSE output on the same upstream"): the load client's
event-stream parsing and endpoint reading (bench/sse_client.py), its reply
check, and the report's comparisons (bench/sse_report.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bench.client import ECHO_TEXT, LoadResult
from bench.http_bench import HttpMeasured
from bench.http_setups import HttpRun
from bench.sse_client import SseParser, echo_problem, post_target
from bench.sse_report import compare, comparison_lines, ratios_table
from bench.sse_setups import SseGroup

# The gateway's stream (gateway/fronts/sse_front.py) and supergateway's (the
# TS SDK's SSEServerTransport) as they come off the wire, keep-alive included.
GATEWAY_STREAM = (
    b"event: endpoint\ndata: /messages?session_id=" + b"a" * 32 + b"\n\n"
    b": keep-alive\n\n"
    b'event: message\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\n\n'
)
SUPERGATEWAY_STREAM = (
    b"event: endpoint\r\ndata: /message?sessionId=43cd2c75-6c77-4995-b535-b30026b47c92\r\n\r\n"
    b'event: message\r\ndata: {"jsonrpc":"2.0","id":2,"result":{}}\r\n\r\n'
)


def test_the_gateway_stream_parses_to_its_endpoint_and_message() -> None:
    """2025-11-25 basic/transports, Backwards Compatibility: the first event
    is `endpoint`; messages come as `message` events; comments are skipped."""
    assert SseParser().feed(GATEWAY_STREAM) == [
        ("endpoint", b"/messages?session_id=" + b"a" * 32),
        ("message", b'{"jsonrpc":"2.0","id":1,"result":{}}'),
    ]


def test_crlf_lines_parse_like_lf_lines() -> None:
    """WHATWG event stream interpretation: lines end with CRLF, LF or CR."""
    assert SseParser().feed(SUPERGATEWAY_STREAM) == [
        ("endpoint", b"/message?sessionId=43cd2c75-6c77-4995-b535-b30026b47c92"),
        ("message", b'{"jsonrpc":"2.0","id":2,"result":{}}'),
    ]
    parser = SseParser()
    # A CR at the end of a chunk may be half of a CRLF: the next chunk decides.
    assert parser.feed(b"data: x\r\rdata: y\r\r") == [("message", b"x")]
    assert parser.feed(b": keep-alive\n") == [("message", b"y")]


def test_data_lines_join_and_the_type_defaults_to_message() -> None:
    """WHATWG: `data` lines join with LF; no `event` line means `message`; a
    field without a colon has an empty value; a blank line with no data
    dispatches nothing; `id` and `retry` set no data."""
    parser = SseParser()
    assert parser.feed(b"data:a\ndata: b\ndata\n\n") == [("message", b"a\nb\n")]
    assert parser.feed(b"event: ping\n\nid: 7\nretry: 10\n\n") == []
    assert parser.feed(b"data:  two spaces\n\n") == [("message", b" two spaces")]


@given(
    st.sampled_from([GATEWAY_STREAM, SUPERGATEWAY_STREAM]),
    st.lists(st.integers(min_value=0, max_value=200), max_size=12),
)
def test_any_chunking_gives_the_same_events(stream: bytes, cuts: list[int]) -> None:
    """TCP delivers the stream in any pieces, a CRLF split in two among them."""
    whole = SseParser().feed(stream)
    points = sorted({min(c, len(stream)) for c in cuts})
    parser, got = SseParser(), []
    for start, end in zip([0, *points], [*points, len(stream)], strict=True):
        got += parser.feed(stream[start:end])
    assert got == whole


def test_the_endpoint_names_a_path_relative_or_in_a_whole_url() -> None:
    """The gateway sends a path; supergateway with --baseUrl a whole URL."""
    assert post_target(b"/messages?session_id=abc") == "/messages?session_id=abc"
    assert post_target(b"http://localhost:8000/message?sessionId=x") == "/message?sessionId=x"


def test_only_a_legacy_shaped_echo_passes() -> None:
    """An SSE client is a legacy client: the echoed text, no `resultType`."""
    content = [{"type": "text", "text": ECHO_TEXT}]
    assert echo_problem({"jsonrpc": "2.0", "id": 1, "result": {"content": content}}) is None
    modern = {"result": {"content": content, "resultType": "complete"}}
    assert echo_problem(modern) is not None
    assert echo_problem({"error": {"code": -32603, "message": "x"}}) is not None
    assert echo_problem({"result": {"content": [{"text": "other"}], "isError": True}}) is not None


def _measured(key: str, kind: str, front: str, p50_us: int, rps: float) -> HttpMeasured:
    run = HttpRun(key, key, "legacy", kind, None if kind == "direct" else (), front=front)
    latency = LoadResult(1, 10, 1.0, [p50_us * 1000] * 10, 0)
    loads = {c: LoadResult(c, int(rps), 1.0, [1] * int(rps), 0) for c in (1, 8, 32)}
    return HttpMeasured(run, latency, loads, None, None, 10.0, 1.0, 1.0)


def test_the_comparisons_take_both_hops_over_the_same_direct_run() -> None:
    """The project's rule: ratios against a direct connection. Added p50 is
    each hop's p50 minus the direct stdio run's."""
    direct = _measured("d", "direct", "stdio", 50, 10_000)
    gw = _measured("g", "gateway", "sse", 350, 2_000)
    sg = _measured("s", "supergateway", "sse", 950, 500)
    http = _measured("h", "gateway", "http", 250, 5_000)
    v = compare(gw, sg, direct)
    assert (v.added_p50_us, v.other_added_p50_us) == (300, 900)
    assert v.latency_share is not None and round(v.latency_share, 3) == 0.333
    assert v.tput_factor(32) == 4.0
    group = SseGroup("path", direct.run, gw.run, sg.run, http.run)
    by_key = {m.run.key: m for m in (direct, gw, sg, http)}
    lines = comparison_lines([group], by_key)
    assert lines[0] == (
        "path, gateway against supergateway: added p50 300 µs against 900 µs "
        "(0.33 of supergateway's); c=1 2,000 against 500 req/s (4.00x); "
        "c=32 2,000 against 500 req/s (4.00x)"
    )
    assert "added p50 300 µs against 200 µs (1.50 of the HTTP front's)" in lines[1]
    table = ratios_table([group], by_key)
    assert "gateway (HTTP+SSE)" in table and "supergateway (HTTP+SSE)" in table
    assert "gateway (Streamable HTTP)" in table and "| 0.200 " in table


def test_no_latency_ratio_below_the_noise() -> None:
    """A slow real server's p50 moves by more than a hop adds: an added p50
    at or below zero gives no ratio (a negative over a negative is not one)."""
    direct = _measured("d", "direct", "stdio", 4_000, 200)
    gw = _measured("g", "gateway", "sse", 3_900, 150)
    sg = _measured("s", "supergateway", "sse", 3_800, 100)
    assert compare(gw, sg, direct).latency_share is None
    group = SseGroup("py1", direct.run, gw.run, sg.run, None)
    (line,) = comparison_lines([group], {m.run.key: m for m in (direct, gw, sg)})
    assert "added p50 -100 µs against -200 µs (no ratio: within the noise)" in line
