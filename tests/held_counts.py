"""What client calls hold, counted: in-flight calls, server requests being
forwarded, lease shares and waiters, pending upstream calls and progress
routes; all zero once no call is in progress. From tests/test_release.py and
tests/test_fuzz_fronts.py."""

from __future__ import annotations

import anyio
import anyio.lowlevel

from gateway.runtime.service import GatewayService
from tests.inprocess import HttpGateway


def held(service: GatewayService) -> dict[str, int]:
    """Everything client calls hold, summed over links and upstream sessions."""
    sessions = list(service.pool.sessions.values())
    return {
        "inflight": sum(len(link.inflight) for link in service.links),
        "server_requests": sum(len(link.server_requests) for link in service.links),
        "lease_readers": sum(s.lease.readers for s in sessions),
        "lease_holders": sum(s.lease.holder is not None for s in sessions),
        "lease_waiting": sum(s.lease.waiting_writers for s in sessions),
        "pending": sum(len(s.pending) for s in sessions),
        "progress": sum(len(s.progress) for s in sessions),
    }


NOTHING_HELD = {
    "inflight": 0,
    "server_requests": 0,
    "lease_readers": 0,
    "lease_holders": 0,
    "lease_waiting": 0,
    "pending": 0,
    "progress": 0,
}


async def _released(g: HttpGateway) -> None:
    with anyio.fail_after(3):
        while held(g.service) != NOTHING_HELD:  # ends when all is released (or the bound)
            await anyio.lowlevel.checkpoint()
