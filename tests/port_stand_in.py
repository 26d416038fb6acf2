"""A stand-in for the gateway that is nothing but the fronts' protocol
(gateway/fronts/port.py: GatewayPort), with a fixed snapshot: a front runs on
it with no runtime behind. From tests/test_front_port.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from anyio.abc import TaskGroup

from gateway import wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.fronts.port import GatewaySnapshot, Readiness

SNAPSHOT = GatewaySnapshot(
    upstream_sessions=3,
    parked_calls=2,
    rounds_to_modern_client=5,
    rounds_to_legacy_client=7,
    upstream_restarts=1,
    upstream_ready=True,
    log_lines_dropped=6,
    messages_dropped={("client", "lossy"): 8, ("server", "request"): 1},
)


@dataclass
class StandIn:
    """A gateway as the fronts see it (GatewayPort), and nothing more."""

    ready: Readiness
    config: Config = field(default_factory=lambda: Config(command=("x",), state_key="k" * 32))
    links: set[ClientLink] = field(default_factory=set)
    credentials: dict[str, str] = field(default_factory=dict)
    replica: str = "stand-in"

    async def handle_client_message(
        self, link: ClientLink, msg: wire.Message, tg: TaskGroup, *, checked: bool = False
    ) -> None:
        raise AssertionError("no client message is expected")

    def take_request(self, link: ClientLink, msg: wire.Message, tg: TaskGroup) -> None:
        raise AssertionError("no client request is expected")

    def hold_upstream_writes(self) -> None:
        return None

    def release_upstream_writes(self) -> None:
        return None

    def handle_client_reply(self, link: ClientLink, msg: wire.Message) -> None:
        raise AssertionError("no client reply is expected")

    def cancel_request(self, link: ClientLink, msg_id: wire.RequestId) -> None:
        return None

    def drop_link(self, link: ClientLink) -> None:
        self.links.discard(link)

    def remember_credential(self, principal: str, credential: str) -> None:
        self.credentials[principal] = credential

    def path_for(self, legacy_client: bool) -> str:
        return "modern->modern"

    def readiness(self) -> Readiness:
        return self.ready

    def snapshot(self) -> GatewaySnapshot:
        return SNAPSHOT
