"""An HTTP answer's head and body go out in one write (fronts/one_write_answers.py;
issue #12: two writes per answer cost a syscall and a TCP segment each)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from gateway.fronts.one_write_answers import OneWriteTransport

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return self.closed


def _proxy() -> tuple[OneWriteTransport, Recorder]:
    raw = Recorder()
    return OneWriteTransport(cast(Any, raw), asyncio.get_running_loop()), raw


async def test_a_head_and_its_body_are_one_write() -> None:
    proxy, raw = _proxy()
    proxy.write(HEAD)
    assert raw.writes == []
    assert proxy.get_write_buffer_size() == len(HEAD)
    proxy.write(b"{}")
    assert raw.writes == [HEAD + b"{}"]


async def test_a_head_with_nothing_after_it_goes_out_at_the_end_of_the_step() -> None:
    """An SSE stream's head, its first event still to come: the client must
    not wait for the event to see the head."""
    proxy, raw = _proxy()
    proxy.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
    await asyncio.sleep(0)
    assert len(raw.writes) == 1
    proxy.write(b"event: message\r\n")
    assert len(raw.writes) == 2  # nothing held after the head went


async def test_100_continue_and_bodies_pass_at_once_and_close_flushes() -> None:
    proxy, raw = _proxy()
    proxy.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    proxy.write(b"chunk")
    assert raw.writes == [b"HTTP/1.1 100 Continue\r\n\r\n", b"chunk"]
    proxy.write(HEAD)
    proxy.close()
    assert raw.writes[-1] == HEAD and raw.closed
    assert proxy.is_closing()  # everything else is the transport's own
