"""Parked MRTR calls expiring at once against the real mcp 1.30.0 server.

The issue ("Nothing a client, a server or a connection sends can crash, wedge or
exhaust the gateway"): "100 parked MRTR calls expiring at once kill the mcp 1.30
upstream (exit 1, BrokenResourceError); 10 do not. Find what the gateway sends
it and fix that."

What the gateway sent: for each expired call, `notifications/cancelled` for the
tool call and an error reply to the server's pending `elicitation/create`, in
whatever order the tasks ran. When the SDK reads a reply to a request whose
tool task it has just cancelled (but that has not run yet), its receive loop
pops the response stream, yields, the cancelled task closes that stream, and
the send fails with ClosedResourceError, which ends the receive loop: stdin's
reader then dies with BrokenResourceError and the server exits 1. The more
calls expire together, the likelier the interleaving.

The gateway runs in-process (GatewayService over a memory client link), the
server is the real FastMCP fixture over stdio; the test fires the expiry
timers itself rather than waiting for `state_ttl`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

from compat_matrix.environment import INSTALL_HINT, missing_peers, peers_dir
from gateway import era, wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.core.mrtr_hold_events import Expiry
from gateway.runtime.service import GatewayService
from tests.inprocess_service import in_process_service

pytestmark = [pytest.mark.peers, pytest.mark.anyio]

FIXTURES = Path(__file__).resolve().parent.parent / "compat_matrix" / "peers"
PARKED = 200
META = {
    era.PROTOCOL_VERSION: "2026-07-28",
    era.CLIENT_CAPABILITIES: {"elicitation": {"form": {}}},
}


def py1_server() -> tuple[str, ...]:
    missing = missing_peers()
    if missing:
        pytest.fail(
            f"the real MCP peers are not installed in {peers_dir()} "
            f"(missing: {', '.join(missing)}): {INSTALL_HINT}",
            pytrace=False,
        )
    return (str(peers_dir() / "py1" / "bin" / "python"), str(FIXTURES / "py1_server.py"))


@dataclass
class InProcess:
    service: GatewayService
    link: ClientLink
    inbox: MemoryObjectReceiveStream[wire.Message]
    requests: anyio.abc.TaskGroup

    async def send(self, msg: wire.Message) -> None:
        await self.service.handle_client_message(self.link, msg, self.requests)

    async def answers(self, ids: set[int], timeout: float = 60) -> dict[int, wire.Message]:
        got: dict[int, wire.Message] = {}
        with anyio.fail_after(timeout):
            while len(got) < len(ids):
                msg = await self.inbox.receive()
                if msg.get("id") in ids and "method" not in msg:
                    got[msg["id"]] = msg
        return got


@asynccontextmanager
async def in_process(**config: Any) -> AsyncIterator[InProcess]:
    cfg = Config(command=py1_server(), probe_timeout=5, request_timeout=60, **config)
    async with in_process_service(cfg) as c:
        yield InProcess(c.service, c.link, c.inbox, c.requests)


def ask_name(msg_id: int) -> wire.Message:
    return wire.request(msg_id, "tools/call", {"name": "ask_name", "arguments": {}, "_meta": META})


async def test_many_parked_calls_expiring_at_once_leave_py1_alive() -> None:
    """Issue defect: "100 parked MRTR calls expiring at once kill the mcp 1.30
    upstream (exit 1, BrokenResourceError)". After 200 parked calls expire in
    the same instant, the same server process answers the next call."""
    async with in_process(max_inflight_per_client=PARKED + 8) as gw:
        ids = set(range(1, PARKED + 1))
        for msg_id in sorted(ids):
            await gw.send(ask_name(msg_id))
        firsts = await gw.answers(ids)
        assert all(m["result"]["resultType"] == "input_required" for m in firsts.values())
        bridge = gw.service.bridge
        assert len(bridge.held) == PARKED
        (session,) = gw.service.pool.sessions.values()

        entries = list(bridge.held.values())
        for entry in entries:  # the state_ttl timers, fired together
            bridge.fire_timer(Expiry(entry.key))
            await anyio.lowlevel.checkpoint()
        with anyio.fail_after(30):
            for entry in entries:
                await entry.finished.wait()
        assert not bridge.held

        echo = wire.request(
            9999,
            "tools/call",
            {"name": "echo", "arguments": {"text": "alive"}, "_meta": dict(META)},
        )
        await gw.send(echo)
        reply = (await gw.answers({9999}))[9999]
        assert reply.get("result", {}).get("content", [{}])[0].get("text") == "alive", reply
        assert session.alive, session.closed_reason
        assert gw.service.pool.restarts == 0
