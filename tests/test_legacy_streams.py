"""Resumable SSE answers of 2025-11-25 sessions (2025-11-25 basic/transports,
"Sending Messages to the Server", "Resumability and Redelivery"; SEP-1699).

Driven in process against a fake ASGI connection, on trio's MockClock: every
timer (the priming delay, the poll time, the resume window) fires as soon as
all tasks wait, so nothing here sleeps."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import anyio
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.fronts import legacy_streams, resumable_stream
from gateway.fronts.client_queues import ClientQueues
from gateway.fronts.http_output import Inbox
from gateway.fronts.legacy_streams import LegacyStreams, Outcome, SessionStreams
from gateway.fronts.resumable_stream import ResumableStream, parse_event_id
from tests.mock_clock import on_mock_clock


class Connection:
    """One HTTP response as the ASGI app sees it: what it sent, and a
    disconnect the test can trigger."""

    def __init__(self) -> None:
        self.sent: list[MutableMapping[str, Any]] = []
        self.gone = anyio.Event()
        self.ended = anyio.Event()

    async def receive(self) -> MutableMapping[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        assert not self.ended.is_set(), "sent after the end of the response"
        self.sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            self.ended.set()

    def events(self) -> list[dict[str, str]]:
        """The SSE events written so far (comments left out)."""
        text = b"".join(m["body"] for m in self.sent if m["type"] == "http.response.body")
        events = []
        for block in text.decode().split("\n\n"):
            fields: dict[str, str] = {}
            for line in block.splitlines():
                if line.startswith(":"):
                    continue
                name, _, value = line.partition(": ")
                fields[name] = value
            if fields:
                events.append(fields)
        return events

    def messages(self) -> list[dict[str, Any]]:
        return [orjson.loads(e["data"]) for e in self.events() if e.get("data")]

    @property
    def bodies(self) -> int:
        return sum(1 for m in self.sent if m["type"] == "http.response.body")


def front(poll_after: float = 0.0, window: float = 30.0) -> tuple[LegacyStreams, list[bool]]:
    cut = [False]
    streams = LegacyStreams(
        retry=0.5, poll_after=poll_after, window=window, waits=set(), cut_off=lambda: cut[0]
    )
    return streams, cut


REPLY = {"jsonrpc": "2.0", "id": 7, "result": {"content": []}}
PROGRESS = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
SAMPLING = {"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage", "params": {}}


class Call:
    """A request in progress: its inbox (what the gateway routes to it) and
    the POST's answer, run by the test's task group."""

    def __init__(self, streams: LegacyStreams, session: SessionStreams) -> None:
        self.inbox = Inbox(ClientQueues(), "local")
        self.post = Connection()
        self.outcome: Outcome | None = None
        self.done = anyio.Event()
        self._streams, self._session = streams, session

    async def run(self, msg_id: int = 7) -> None:
        try:
            self.outcome = await self._streams.answer(
                self._session, self.inbox, msg_id, self.post.receive, self.post.send
            )
        finally:
            self.inbox.close()
        self.done.set()


@on_mock_clock
async def test_a_reply_that_comes_first_goes_out_with_the_priming_event_in_one_write() -> None:
    """ "The server SHOULD immediately send an SSE event consisting of an event
    ID and an empty data field": first, with `retry`, and the reply after it."""
    streams, _ = front()
    session = SessionStreams()
    call = Call(streams, session)
    call.inbox.put(REPLY)
    async with anyio.create_task_group() as tg:
        tg.start_soon(call.run)
    events = call.post.events()
    assert events[0]["data"] == "" and events[0]["retry"] == "500" and events[0]["id"]
    assert orjson.loads(events[1]["data"]) == REPLY and events[1]["id"] != events[0]["id"]
    assert call.post.sent[0]["headers"][0] == (b"content-type", b"text/event-stream")
    assert call.post.bodies == 1
    assert call.outcome == Outcome(REPLY, cancel_upstream=False)
    assert session.live == {}  # delivered whole: nothing to resume


@on_mock_clock
async def test_the_whole_answer_written_directly_is_the_one_answer_writes() -> None:
    """The front's own server writes a reply that came first without a task
    (fronts/direct_posts.py): the same status, headers and bytes, and the
    same stream ids going on, as the ASGI answer."""
    streams, _ = front()
    slow, direct = SessionStreams(), SessionStreams()
    for msg_id in (7, 8):
        call = Call(streams, slow)
        reply = {**REPLY, "id": msg_id}
        call.inbox.put(reply)
        async with anyio.create_task_group() as tg:
            tg.start_soon(call.run, msg_id)
        whole = streams.whole_answer(direct, reply)
        start = call.post.sent[0]
        assert whole.status == start["status"] == 200
        assert [*whole.headers, (b"content-length", b"%d" % len(whole.body))] == start["headers"]
        assert whole.body == call.post.sent[1]["body"]
    assert slow.live == direct.live == {}


@on_mock_clock
async def test_a_slow_call_is_primed_before_its_reply_and_keeps_the_order() -> None:
    streams, _ = front()
    call = Call(streams, SessionStreams())
    async with anyio.create_task_group() as tg:
        tg.start_soon(call.run)
        await anyio.sleep(legacy_streams.PRIME_AFTER + 1)
        assert [e["data"] for e in call.post.events()] == [""]
        call.inbox.put(PROGRESS)
        call.inbox.put(REPLY)
    assert call.post.messages() == [PROGRESS, REPLY]
    ids = [e["id"] for e in call.post.events()]
    assert len(set(ids)) == 3 and call.post.ended.is_set()


@on_mock_clock
async def test_a_client_that_loses_the_stream_resumes_it_and_the_call_goes_on() -> None:
    """ "Disconnection SHOULD NOT be interpreted as the client cancelling its
    request"; the client resumes with GET and Last-Event-ID, and the server
    replays what followed on that stream."""
    streams, _ = front()
    session = SessionStreams()
    call = Call(streams, session)
    async with anyio.create_task_group() as tg:
        tg.start_soon(call.run)
        call.inbox.put(PROGRESS)
        await anyio.sleep(1)
        last = call.post.events()[-1]["id"]
        call.post.gone.set()
        await anyio.sleep(1)
        call.inbox.put(SAMPLING)  # while nobody listens
        call.inbox.put(REPLY)
        await anyio.sleep(1)
        assert not call.done.is_set() or call.outcome == Outcome(REPLY, cancel_upstream=False)
        get = Connection()
        assert await streams.resume(session, last, get.receive, get.send)
    assert get.messages() == [SAMPLING, REPLY] and get.ended.is_set()
    assert call.outcome == Outcome(REPLY, cancel_upstream=False)
    assert session.live == {}


@on_mock_clock
async def test_the_poll_time_closes_the_stream_and_a_resumption_gets_the_reply() -> None:
    """SEP-1699 polling: the server may close the stream after the priming
    event; the client reconnects after `retry`."""
    streams, _ = front(poll_after=2.0)
    session = SessionStreams()
    call = Call(streams, session)
    async with anyio.create_task_group() as tg:
        tg.start_soon(call.run)
        with anyio.fail_after(5):
            await call.post.ended.wait()
        assert call.post.messages() == []
        last = call.post.events()[-1]["id"]
        call.inbox.put(REPLY)
        get = Connection()
        assert await streams.resume(session, last, get.receive, get.send)
    assert get.messages() == [REPLY]
    assert call.outcome == Outcome(REPLY, cancel_upstream=False)


@on_mock_clock
async def test_a_resumption_polls_too() -> None:
    streams, _ = front(poll_after=2.0)
    session = SessionStreams()
    call = Call(streams, session)
    async with anyio.create_task_group() as tg:
        tg.start_soon(call.run)
        await call.post.ended.wait()
        get = Connection()
        first = call.post.events()[-1]["id"]
        assert await streams.resume(session, first, get.receive, get.send)
        assert get.messages() == [] and get.ended.is_set()  # closed after 2 s again
        call.inbox.put(REPLY)
        again = Connection()
        assert await streams.resume(session, first, again.receive, again.send)
    assert again.messages() == [REPLY]


@on_mock_clock
async def test_every_resumption_starts_with_an_id_to_resume_from() -> None:
    """A response closed for polling before any message must still leave the
    client an event id: the TS SDK client resumes only with the ids of the
    response it just read (without one it opens a plain GET stream, and the
    call's reply never reaches it: the conformance suite hung 30 s)."""
    streams, _ = front(poll_after=2.0)
    session = SessionStreams()
    call = Call(streams, session)
    async with anyio.create_task_group() as tg:
        tg.start_soon(call.run)
        await call.post.ended.wait()
        first = call.post.events()[-1]["id"]
        get = Connection()
        assert await streams.resume(session, first, get.receive, get.send)
        assert get.events() == [{"id": first, "retry": "500", "data": ""}]
        call.inbox.put(REPLY)
        again = Connection()
        assert await streams.resume(session, get.events()[-1]["id"], again.receive, again.send)
    assert again.events()[0]["id"] == first and again.messages() == [REPLY]


@on_mock_clock
async def test_a_call_nobody_resumes_within_the_window_is_cancelled_upstream() -> None:
    streams, _ = front(window=10.0)
    session = SessionStreams()
    call = Call(streams, session)
    async with anyio.create_task_group() as tg:
        tg.start_soon(call.run)
        call.inbox.put(PROGRESS)
        await anyio.sleep(1)
        call.post.gone.set()
        started = anyio.current_time()
        await call.done.wait()
        assert anyio.current_time() - started == pytest.approx(10.0, abs=0.01)
    assert call.outcome == Outcome(None, cancel_upstream=True)
    assert session.live == {}


@on_mock_clock
async def test_a_reply_while_nobody_listens_is_kept_for_the_window_then_dropped() -> None:
    streams, _ = front(window=10.0)
    session = SessionStreams()
    call = Call(streams, session)
    async with anyio.create_task_group() as tg:
        tg.start_soon(call.run)
        call.inbox.put(PROGRESS)
        await anyio.sleep(1)
        call.post.gone.set()
        await anyio.sleep(1)
        call.inbox.put(REPLY)
    assert call.outcome == Outcome(REPLY, cancel_upstream=False)
    assert len(session.live) == 1
    session.sweep(anyio.current_time() + 5, 10.0)
    assert session.live  # within the window: a client may still collect it
    session.sweep(anyio.current_time() + 11, 10.0)
    assert session.live == {}


@on_mock_clock
async def test_a_client_that_leaves_before_anything_was_sent_cancels() -> None:
    """Nothing was sent, so there is no event id to resume from."""
    streams, _ = front()
    session = SessionStreams()
    call = Call(streams, session)
    call.post.gone.set()
    async with anyio.create_task_group() as tg:
        tg.start_soon(call.run)
    assert call.outcome == Outcome(None, cancel_upstream=True)
    assert call.post.sent == [] and session.live == {}


@on_mock_clock
async def test_unknown_forged_or_collected_event_ids_resume_nothing() -> None:
    streams, _ = front()
    session = SessionStreams()
    for value in ["", "junk", "9/1", "1/x", "/1", "1/" + "9" * 40]:
        get = Connection()
        assert not await streams.resume(session, value, get.receive, get.send)
        assert get.sent == []


@on_mock_clock
async def test_a_second_resumption_takes_over_from_the_first() -> None:
    streams, _ = front()
    session = SessionStreams()
    call = Call(streams, session)
    async with anyio.create_task_group() as tg:
        tg.start_soon(call.run)
        await anyio.sleep(legacy_streams.PRIME_AFTER + 1)
        last = call.post.events()[-1]["id"]
        first, second = Connection(), Connection()
        tg.start_soon(streams.resume, session, last, first.receive, first.send)
        await anyio.sleep(1)
        assert call.post.ended.is_set()  # the POST's response gave way to the GET
        tg.start_soon(streams.resume, session, last, second.receive, second.send)
        await anyio.sleep(1)
        assert first.ended.is_set() and first.messages() == []
        call.inbox.put(REPLY)
    assert second.messages() == [REPLY]


@on_mock_clock
async def test_the_session_ending_under_a_call_ends_its_stream() -> None:
    streams, _ = front()
    session = SessionStreams()
    call = Call(streams, session)
    async with anyio.create_task_group() as tg:
        tg.start_soon(call.run)
        call.inbox.put(PROGRESS)
        await anyio.sleep(1)
        call.inbox.close()
    assert call.post.ended.is_set() and call.post.messages() == [PROGRESS]
    assert call.outcome == Outcome(None, cancel_upstream=True)


@on_mock_clock
async def test_a_session_that_ended_before_anything_came_gets_none() -> None:
    streams, _ = front()
    call = Call(streams, SessionStreams())
    call.inbox.close()
    await call.run()
    assert call.outcome is None and call.post.sent == []


@on_mock_clock
async def test_the_end_of_the_shutdown_grace_is_the_streams_last_event() -> None:
    waits: set[anyio.CancelScope] = set()
    cut = [False]
    streams = LegacyStreams(retry=1, poll_after=0, window=30, waits=waits, cut_off=lambda: cut[0])
    call = Call(streams, SessionStreams())
    async with anyio.create_task_group() as tg:
        tg.start_soon(call.run)
        call.inbox.put(PROGRESS)
        await anyio.sleep(1)
        cut[0] = True
        for wait in list(waits):
            wait.cancel()
    last = call.post.messages()[-1]
    assert last["id"] == 7 and last["error"]["data"]["reason"] == "shutdown"
    assert call.outcome is not None and call.outcome.cancel_upstream


@on_mock_clock
async def test_keepalive_comments_on_a_quiet_stream() -> None:
    streams, _ = front()
    call = Call(streams, SessionStreams())
    async with anyio.create_task_group() as tg:
        tg.start_soon(call.run)
        await anyio.sleep(legacy_streams.KEEPALIVE * 2 + 2)
        call.inbox.put(REPLY)
    comments = [m for m in call.post.sent if m.get("body") == b": keep-alive\n\n"]
    assert len(comments) == 2 and call.post.messages() == [REPLY]


# -- the stream's record --------------------------------------------------------------
def _record(stream: ResumableStream, msg: dict[str, Any]) -> None:
    stream.record(msg, orjson.dumps(msg))


def test_notifications_kept_are_bounded_requests_and_the_reply_never_dropped() -> None:
    stream = ResumableStream("1")
    _record(stream, SAMPLING)
    for n in range(resumable_stream.KEEP_NOTIFICATIONS * 3):
        _record(stream, {**PROGRESS, "params": {"progress": n}})
    _record(stream, REPLY)
    kept = [orjson.loads(e.split(b"data: ", 1)[1]) for _, e in stream.after(0)]
    assert kept[0] == SAMPLING and kept[-1] == REPLY
    notes = kept[1:-1]
    assert (
        resumable_stream.KEEP_NOTIFICATIONS <= len(notes) <= 2 * resumable_stream.KEEP_NOTIFICATIONS
    )
    assert notes[-1]["params"]["progress"] == resumable_stream.KEEP_NOTIFICATIONS * 3 - 1
    assert stream.forgotten == resumable_stream.KEEP_NOTIFICATIONS * 3 - len(notes)


@given(st.lists(st.booleans(), max_size=200), st.integers(min_value=-1, max_value=250))
def test_after_gives_the_kept_events_past_a_point_in_order(notes: list[bool], seq: int) -> None:
    stream = ResumableStream("4")
    for i, note in enumerate(notes):
        _record(stream, PROGRESS if note else {**SAMPLING, "id": i})
    got = [s for s, _ in stream.after(seq)]
    assert got == sorted(got) and all(s > seq for s in got)
    assert len(got) == max(0, len(notes) - max(seq, 0))


@given(st.text(max_size=30), st.integers(min_value=0, max_value=10**12 - 1))
def test_event_ids_read_back(stream_id: str, seq: int) -> None:
    stream = ResumableStream(stream_id)
    _record(stream, {**SAMPLING, "id": 1})
    if stream_id.strip() == stream_id and stream_id:
        assert parse_event_id(f"{stream_id}/{seq}") == (stream_id, seq)


@given(st.text(max_size=60))
def test_any_last_event_id_parses_or_is_refused(value: str) -> None:
    parsed = parse_event_id(value)
    assert parsed is None or (isinstance(parsed[1], int) and parsed[1] >= 0)
