"""JSON-RPC envelope handling (2026-07-28 basic "Messages"; stdio framing)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import wire


def test_not_json_is_parse_error_with_null_id() -> None:
    with pytest.raises(wire.InvalidMessage) as exc:
        wire.decode(b"{nope")
    assert exc.value.reply is not None
    assert exc.value.reply["error"]["code"] == wire.PARSE_ERROR
    assert exc.value.reply["id"] is None


@pytest.mark.parametrize(
    ("raw", "code", "answer_id"),
    [
        (b"[]", wire.INVALID_REQUEST, None),  # batches are gone
        (b'"hello"', wire.INVALID_REQUEST, None),
        (b'{"jsonrpc":"1.0","id":3,"method":"x"}', wire.INVALID_REQUEST, 3),
        (b'{"jsonrpc":"2.0","id":3,"method":7}', wire.INVALID_REQUEST, 3),
        # "Requests MUST include a string or integer ID ... MUST NOT be null"
        (b'{"jsonrpc":"2.0","id":null,"method":"x"}', wire.INVALID_REQUEST, None),
        (b'{"jsonrpc":"2.0","id":true,"method":"x"}', wire.INVALID_REQUEST, None),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"x"}', wire.INVALID_REQUEST, None),
        (b'{"jsonrpc":"2.0","id":4,"method":"x","params":[1]}', wire.INVALID_PARAMS, 4),
        (b'{"jsonrpc":"2.0","id":4,"method":"x","params":{"_meta":3}}', wire.INVALID_PARAMS, 4),
        (b'{"jsonrpc":"2.0","id":5}', wire.INVALID_REQUEST, 5),
    ],
)
def test_invalid_requests_get_the_spec_error(raw: bytes, code: int, answer_id: object) -> None:
    with pytest.raises(wire.InvalidMessage) as exc:
        wire.decode(raw)
    assert exc.value.reply is not None
    assert exc.value.reply["error"]["code"] == code
    assert exc.value.reply["id"] == answer_id


def test_bad_notification_or_response_is_never_answered() -> None:
    for raw in (
        b'{"jsonrpc":"2.0","method":"n","params":[1]}',
        b'{"jsonrpc":"2.0","id":1,"result":[]}',
        b'{"jsonrpc":"2.0","id":1,"error":{"code":"x"}}',
    ):
        with pytest.raises(wire.InvalidMessage) as exc:
            wire.decode(raw)
        assert exc.value.reply is None


def test_kinds() -> None:
    assert (
        wire.kind_of(wire.decode(b'{"jsonrpc":"2.0","id":"a","method":"m"}')) is wire.Kind.REQUEST
    )
    assert wire.kind_of(wire.decode(b'{"jsonrpc":"2.0","method":"m"}')) is wire.Kind.NOTIFICATION
    assert wire.kind_of(wire.decode(b'{"jsonrpc":"2.0","id":1,"result":{}}')) is wire.Kind.RESULT
    err = b'{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}'
    assert wire.kind_of(wire.decode(err)) is wire.Kind.ERROR


def test_unknown_fields_survive_a_round_trip() -> None:
    raw = b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":{"y":[1,2]}},"extra":true}'
    assert wire.decode(wire.encode(wire.decode(raw))) == orjson.loads(raw)


def test_gateway_errors_say_where_they_come_from() -> None:
    err = wire.gateway_error(1, wire.INTERNAL_ERROR, "boom", reason="upstream-exited")
    assert err["error"]["data"] == {"source": wire.GATEWAY_SOURCE, "reason": "upstream-exited"}


# -- framing -----------------------------------------------------------------


def test_lines_split_across_chunks() -> None:
    s = wire.LineSplitter(100)
    assert s.feed(b'{"a":') == []
    assert s.feed(b'1}\n{"b":2}\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert s.feed(b":3}\r\n") == [b'{"c":3}']
    assert s.close() == []


def test_blank_lines_are_skipped_and_last_line_counts_at_eof() -> None:
    s = wire.LineSplitter(100)
    assert s.feed(b"\n\n  \nabc") == []
    assert s.close() == [b"abc"]


def test_oversized_line_is_discarded_without_buffering() -> None:
    s = wire.LineSplitter(10)
    assert s.feed(b"x" * 8) == []
    assert s.feed(b"y" * 1000) == []
    assert len(s._buf) == 0  # nothing of the huge line is held
    out = s.feed(b"zz\nok\n")
    assert out == [wire.Oversized(1010), b"ok"]


def test_oversized_line_in_one_chunk() -> None:
    s = wire.LineSplitter(4)
    assert s.feed(b"123456\n12\n") == [wire.Oversized(6), b"12"]


@given(
    st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=20),
    st.lists(st.integers(min_value=1, max_value=17), min_size=1, max_size=50),
)
def test_framing_is_independent_of_chunking(lines: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    expected = wire.LineSplitter(1000).feed(stream)
    s = wire.LineSplitter(1000)
    got: list[bytes | wire.Oversized] = []
    pos = 0
    for i in range(len(stream) + 1):
        step = cuts[i % len(cuts)]
        if pos >= len(stream):
            break
        got += s.feed(stream[pos : pos + step])
        pos += step
    got += s.close()
    assert got == expected
    assert expected == [line.rstrip(b"\r") for line in lines if line.rstrip(b"\r").strip()]
