"""Messages toward one peer over a pipe, under the flow-control rule
(gateway.flow_control): every write is taken or refused at once, so that no
task ever waits for a peer to read."""

from __future__ import annotations

from typing import Any

import anyio
import structlog

from gateway import flow_control, wire
from gateway.flow_control import QueueBounds, Verdict
from gateway.log_limit import LogLimiter
from gateway.pipes import PipeWriter

log = structlog.get_logger("gateway.flow")
# One line a minute for each peer kind, however many messages go.
dropped_log = LogLimiter(log)

# What was not delivered, process-wide, for /metrics.
TOWARD_CLIENTS = flow_control.Drops()
TOWARD_SERVERS = flow_control.Drops()


class QueueFull(Exception):
    """A request the peer's queue cannot take: its sender fails it now."""


class ClientNotReading(anyio.BrokenResourceError):
    """A request for a client that its queue cannot take: whoever sends it
    gets what it gets when the client is gone, at once."""


def note_dropped(
    drops: flow_control.Drops, toward: str, msg: wire.Message, queued: int, **fields: Any
) -> None:
    """Count a message not delivered toward a peer (or a reply replaced),
    and say so in the one line a minute for that kind of peer."""
    drops.count(msg)
    dropped_log.warning(
        f"messages dropped for a {toward} that reads too slowly",
        kind=flow_control.kind(msg),
        queued_bytes=queued,
        dropped_so_far=drops.total,
        **fields,
    )


class PeerQueue:
    """`toward`: "client" or "server", for the log and the counts."""

    __slots__ = ("_bounds", "_drops", "_writer", "label", "toward")

    def __init__(
        self, writer: PipeWriter, bounds: QueueBounds, toward: str, label: str = ""
    ) -> None:
        self._writer = writer
        self._bounds = bounds
        self.toward = toward
        self.label = label
        self._drops = TOWARD_CLIENTS if toward == "client" else TOWARD_SERVERS

    @property
    def queued(self) -> int:
        return self._writer.queued

    def put(self, msg: wire.Message) -> None:
        """Write `msg`, or drop it or its stand-in by the rule. QueueFull for
        a request that does not fit; anyio.BrokenResourceError once the pipe
        is gone."""
        data = wire.encode(msg)
        writer = self._writer
        queued = writer.queued
        bounds = self._bounds
        # Every kind of message fits below the lowest bound: the usual case.
        if queued + len(data) <= bounds.notification_bytes:
            writer.write(data)
            return
        verdict = flow_control.verdict(msg, len(data), queued, bounds)
        if verdict is Verdict.SEND:
            writer.write(data)
            return
        if verdict is Verdict.REFUSE:
            self._dropped(msg, queued)
            raise QueueFull(f"the {self.toward} has not read the {queued} bytes queued for it")
        if verdict is Verdict.REPLACE:
            stand_in = wire.encode(flow_control.not_read_reply(msg, len(data), bounds.queue_bytes))
            if flow_control.allowance_left(queued, len(stand_in), bounds):
                writer.write(stand_in)
        self._dropped(msg, queued)

    def _dropped(self, msg: wire.Message, queued: int) -> None:
        note_dropped(self._drops, self.toward, msg, queued, peer=self.label or self.toward)
