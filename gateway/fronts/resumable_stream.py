"""A legacy request's SSE stream that outlives its HTTP response.

2025-11-25 basic/transports ("Sending Messages to the Server",
"Resumability and Redelivery"): the server primes a POST's SSE stream with an
event id, may close the stream before the reply ("polling"), and a client
that lost it reconnects with GET and `Last-Event-ID`; the server replays what
followed on that stream and goes on with it. Disconnection is not
cancellation.

So the call's messages are recorded here, each with its event id, and any
one HTTP response at a time (the POST's, then a resuming GET's) writes them
out. The call's owner (the POST handler) records; writers wait for news.
"""

from __future__ import annotations

import bisect

import anyio
import orjson

from gateway import wire

# What one stream keeps of notifications (progress, logs) for a client that
# may resume: the newest ones within both bounds. A client that resumes from
# further back misses older notifications, never a server request or the reply.
KEEP_NOTIFICATIONS = 1024
KEEP_NOTIFICATION_BYTES = 1024 * 1024


class ResumableStream:
    def __init__(self, stream_id: str) -> None:
        self.stream_id = stream_id
        # (sequence, the encoded event, is a notification), in order
        self._events: list[tuple[int, bytes, bool]] = []
        self._next = 1  # 0 is the priming event's
        self._notes = 0
        self._note_bytes = 0
        self.forgotten = 0  # notifications a late resumption can no longer get
        self.reply: wire.Message | None = None
        self.ended = False  # the reply is recorded, or there never will be one
        self.cut_off = False  # ended by the end of the shutdown grace
        self._attachment = 0  # which response writes the stream; 0 = none
        # Made when a writer waits: most streams end before anyone does.
        self._news: anyio.Event | None = None
        self.detached_at: float | None = None

    # -- the call's side ---------------------------------------------------------------
    def priming(self, retry_ms: int, seq: int = 0) -> bytes:
        """An event with an id and empty data: the first of the stream, and
        the first of each resumption (`seq`: where it resumes), so that a
        client always holds an id to resume from, even when a response ends
        before any message (TS SDK clients forget the id they resumed with)."""
        return priming_event(self.stream_id, seq, retry_ms)

    def record(self, msg: wire.Message, data: bytes) -> None:
        """Record `msg` (`data`: its JSON) as the stream's next event."""
        seq = self._next
        self._next += 1
        event = message_event(self.stream_id, seq, data)
        note = "id" not in msg
        self._events.append((seq, event, note))
        if note:
            self._notes += 1
            self._note_bytes += len(event)
            if (
                self._notes > 2 * KEEP_NOTIFICATIONS
                or self._note_bytes > 2 * KEEP_NOTIFICATION_BYTES
            ):
                self._forget_old_notifications()
        elif "method" not in msg:
            self.reply = msg
            self.ended = True
        self._wake()

    def _forget_old_notifications(self) -> None:
        """Keep the newest notifications within the bounds, and every request
        and reply (amortised: this runs once the kept ones doubled)."""
        kept: list[tuple[int, bytes, bool]] = []
        notes = size = 0
        for item in reversed(self._events):
            if item[2]:
                if notes >= KEEP_NOTIFICATIONS or size + len(item[1]) > KEEP_NOTIFICATION_BYTES:
                    self.forgotten += 1
                    continue
                notes += 1
                size += len(item[1])
            kept.append(item)
        kept.reverse()
        self._events, self._notes, self._note_bytes = kept, notes, size

    def end(self, reply: wire.Message | None = None) -> None:
        """No reply will come from upstream: `reply` (a gateway error) or
        nothing is the stream's last word."""
        if self.ended:
            return
        if reply is not None:
            self.record(reply, orjson.dumps(reply))
        self.ended = True
        self._wake()

    # -- the writers' side -------------------------------------------------------------
    def attach(self) -> int:
        """A response takes over the stream; the one writing before ends."""
        self._attachment += 1
        self.detached_at = None
        self._wake()
        return self._attachment

    def detach(self, attachment: int, now: float) -> None:
        if self._attachment == attachment:
            self._attachment = 0
            self.detached_at = now
            self._wake()

    def writes(self, attachment: int) -> bool:
        return self._attachment == attachment

    @property
    def attached(self) -> bool:
        return self._attachment != 0

    def after(self, seq: int) -> list[tuple[int, bytes]]:
        """The kept events after `seq`, in order."""
        start = bisect.bisect_right(self._events, seq, key=_seq)
        return [(item[0], item[1]) for item in self._events[start:]]

    @property
    def last_seq(self) -> int:
        return self._next - 1

    async def news(self) -> None:
        """Returns once something was recorded, or the writer changed."""
        if self._news is None:
            self._news = anyio.Event()
        await self._news.wait()

    def _wake(self) -> None:
        if self._news is not None:
            self._news.set()
            self._news = None


def parse_event_id(value: str) -> tuple[str, int] | None:
    """A Last-Event-ID this front handed out: (stream id, sequence)."""
    stream_id, sep, seq = value.strip().rpartition("/")
    # isascii: str.isdigit() also takes "²", which int() refuses.
    if not sep or not stream_id or not (seq.isascii() and seq.isdigit()) or len(seq) > 12:
        return None
    return stream_id, int(seq)


def priming_event(stream_id: str, seq: int, retry_ms: int) -> bytes:
    return f"id: {stream_id}/{seq}\nretry: {retry_ms}\ndata: \n\n".encode()


def message_event(stream_id: str, seq: int, data: bytes) -> bytes:
    """The event of a message (`data`: its JSON) with its id."""
    return b"id: " + f"{stream_id}/{seq}".encode() + b"\nevent: message\ndata: " + data + b"\n\n"


def _seq(item: tuple[int, bytes, bool]) -> int:
    return item[0]
