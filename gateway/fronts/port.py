"""What the fronts need from the gateway behind them, and nothing more.

The fronts depend on this protocol; the runtime's GatewayService implements
it. So no front imports the runtime (tests/test_layering.py), and a front can
be driven by any object of this shape. The two snapshots are plain data the
runtime fills: /readyz and /metrics read them and never reach further in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from anyio.abc import TaskGroup

from gateway import wire
from gateway.client_link import ClientLink
from gateway.config import Config


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether the upstream can be served, and what /readyz may tell about it."""

    # The era is settled and its profile known.
    settled: bool
    era: str | None = None
    server_info: dict[str, Any] | None = None
    # A dual-era server: the version each era of client meets.
    modern_version: str | None = None
    legacy_version: str | None = None
    # Reachable, but it wants the clients' own credentials before its era is known.
    awaiting_credentials: bool = False
    # Why the upstream is not ready, when known.
    failure: str | None = None
    # Shutting down: the balancer should send no more (issue #13 "Draining").
    draining: bool = False


@dataclass(frozen=True, slots=True)
class GatewaySnapshot:
    """The gateway's gauges and counters at one instant, for /metrics."""

    upstream_sessions: int
    parked_calls: int
    rounds_to_modern_client: int
    rounds_to_legacy_client: int
    upstream_restarts: int
    upstream_ready: bool
    # A modern server's tasks polled to answer legacy clients' calls.
    tasks_polled_for_legacy_clients: int = 0
    # Log lines stderr could not take (its reader gone, a full disk).
    log_lines_dropped: int = 0
    # Messages not delivered to a peer that reads too slowly (gateway/
    # flow_control.py): (toward "client" or "server", kind of message, count).
    messages_dropped: tuple[tuple[str, str, int], ...] = ()


class GatewayPort(Protocol):
    """The gateway service as the fronts see it."""

    config: Config
    links: set[ClientLink]

    @property
    def replica(self) -> str:
        """This gateway's name among replicas (`[mrtr] instance_id`, else random)."""
        ...

    async def handle_client_message(
        self, link: ClientLink, msg: wire.Message, tg: TaskGroup, *, checked: bool = False
    ) -> None: ...

    def take_request(self, link: ClientLink, msg: wire.Message, tg: TaskGroup) -> None: ...

    def hold_upstream_writes(self) -> None:
        """Queue what is written upstream until `release_upstream_writes`."""

    def release_upstream_writes(self) -> None: ...

    def handle_client_reply(self, link: ClientLink, msg: wire.Message) -> None: ...

    def cancel_request(self, link: ClientLink, msg_id: wire.RequestId) -> None: ...

    def drop_link(self, link: ClientLink) -> None: ...

    def remember_credential(self, principal: str, credential: str) -> None: ...

    def path_for(self, legacy_client: bool) -> str: ...

    def readiness(self) -> Readiness: ...

    def snapshot(self) -> GatewaySnapshot: ...
