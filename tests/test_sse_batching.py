"""Issue #15's bench (bench/RESULTS-sse.md): the SSE front wrote every
message as its own HTTP chunk, one send() each, even when a burst of replies
was already queued for the stream (32 calls in flight). Events queued
together now go out in one write, in order, and a write is bounded."""

from __future__ import annotations

import anyio
import orjson

from gateway import wire
from gateway.fronts.client_queues import ClientQueues
from gateway.fronts.sse_sessions import MAX_BATCH_BYTES, EventQueue, message_event
from tests.inprocess import http_gateway
from tests.scripted import legacy_server
from tests.sse_streams import messages, open_stream, sse_get


async def test_replies_queued_together_go_out_in_one_write() -> None:
    """Three messages queued while the stream's writer waits: one body chunk
    with the three events, in the order they were queued."""
    async with http_gateway(legacy_server()) as g:
        stream = sse_get()
        async with open_stream(g, stream):
            assert g.front.sse is not None
            (session,) = g.front.sse.sessions.by_id.values()
            before = len(stream.sent)
            for n in range(3):
                session.link.send_nowait(wire.notification("notifications/message", {"n": n}))
            await stream.wait_until(lambda: len(messages(stream)) == 3, timeout=5)
            assert len(stream.sent) == before + 1
            assert [m["params"]["n"] for m in messages(stream)] == [0, 1, 2]


def _event(size: int) -> bytes:
    """A message event of about `size` bytes."""
    return message_event(wire.notification("n", {"pad": "x" * size}))


async def test_a_write_is_bounded_and_a_large_event_goes_alone() -> None:
    """A batch holds events up to MAX_BATCH_BYTES; an event larger than that
    is written alone; nothing is lost or reordered, and the queue's byte
    count (its overflow bound) follows what was taken."""
    queues = ClientQueues()
    queue = EventQueue(queues, "local")
    small = [_event(100) for _ in range(3)]
    big = _event(MAX_BATCH_BYTES)
    many = [_event(MAX_BATCH_BYTES // 4) for _ in range(5)]
    for data in [*small, big, *many]:
        queue.put(data)
    queue.close()
    writes: list[bytes] = []
    with anyio.fail_after(5):
        while True:  # ends with the closed queue's EndOfStream
            try:
                writes.append(await queue.get())
            except anyio.EndOfStream:
                break
    assert writes[0] == b"".join(small) and writes[1] == big
    assert all(len(w) <= MAX_BATCH_BYTES for w in writes[2:]) and len(writes) == 4
    assert b"".join(writes) == b"".join([*small, big, *many])
    assert queue.size == 0 and len(queue) == 0
    assert len(queues) == 0  # nothing left counted against the principal
    events = [e for w in writes for e in w.split(b"\n\n") if e]
    assert [orjson.loads(e.split(b"data: ", 1)[1])["method"] for e in events] == ["n"] * 9
