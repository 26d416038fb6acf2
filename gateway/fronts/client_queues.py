"""The bytes queued toward HTTP clients and not yet written, per stream and
per principal (issue #29, class 5).

Every response stream of the HTTP front (a modern POST's, a legacy session's
POSTs' and GET stream, an HTTP+SSE session's stream) queues what it has not
written yet; a client that does not read its stream would make that queue
grow without end, and a principal may hold many streams. So each message is
judged by the flow-control rule (gateway.flow_control) twice: on the bytes
queued on its stream (`[gateway] max_queued_bytes` and
`max_queued_notification_bytes`) and on those queued on all the streams of
its principal together (`[http] max_queued_bytes_per_principal`), and it goes
only if both take it. A stream's bytes are released as its response takes
them to write, or when the response ends.
"""

from __future__ import annotations

from gateway import flow_control, wire
from gateway.config import Config
from gateway.flow_control import DEFAULT_BOUNDS, QueueBounds, Verdict
from gateway.peer_queue import TOWARD_CLIENTS, note_dropped

# `[http] max_queued_bytes_per_principal` by default.
DEFAULT_PER_PRINCIPAL = 64 * 1024 * 1024


class ClientQueues:
    """One front's count of queued bytes by principal."""

    __slots__ = ("_queued", "each", "shared")

    def __init__(
        self, each: QueueBounds = DEFAULT_BOUNDS, per_principal: int = DEFAULT_PER_PRINCIPAL
    ) -> None:
        self.each = each  # one stream's
        self.shared = flow_control.shared_bounds(each, per_principal)  # one principal's together
        # principal -> bytes queued on all its streams. Only principals with
        # something queued are here (an entry goes when its count is back to
        # 0), so that many principals, each with a credential of its own,
        # cost nothing once their streams are written.
        self._queued: dict[str, int] = {}

    @classmethod
    def of(cls, config: Config) -> ClientQueues:
        return cls(config.queue_bounds, config.http_max_queued_bytes_per_principal)

    def queued(self, principal: str) -> int:
        return self._queued.get(principal, 0)

    @property
    def total(self) -> int:
        """The bytes queued toward every client (for /metrics)."""
        return sum(self._queued.values())

    def __len__(self) -> int:
        """The principals with something queued."""
        return len(self._queued)

    def add(self, principal: str, size: int) -> None:
        self._queued[principal] = self._queued.get(principal, 0) + size

    def release(self, principal: str, size: int) -> None:
        left = self._queued[principal] - size
        if left:
            self._queued[principal] = left
        else:
            del self._queued[principal]

    def verdict(
        self, msg: wire.Message, size: int, queued: int, principal: str
    ) -> tuple[Verdict, QueueBounds]:
        """The rule for `msg` (`size` bytes) on a stream of `principal` with
        `queued` bytes on it, and the bound that decided."""
        verdict = flow_control.verdict(msg, size, queued, self.each)
        if verdict is not Verdict.SEND:
            return verdict, self.each
        return flow_control.verdict(msg, size, self.queued(principal), self.shared), self.shared

    def stand_in_fits(self, size: int, queued: int, principal: str) -> bool:
        """Whether an error standing in for a reply (`size` bytes) still fits
        the stream's allowance and the principal's."""
        fits = flow_control.allowance_left
        return fits(queued, size, self.each) and fits(self.queued(principal), size, self.shared)

    def dropped(self, msg: wire.Message, principal: str, queued: int, bounds: QueueBounds) -> None:
        """Count `msg` (dropped, refused or replaced at `bounds`, on a stream
        with `queued` bytes) with the other messages not delivered toward
        clients, in the one line a minute."""
        shared = bounds is self.shared
        note_dropped(
            TOWARD_CLIENTS,
            "client",
            msg,
            self.queued(principal) if shared else queued,
            peer="http",
            principal=principal,
            bound="principal" if shared else "stream",
        )
