"""/readyz that tells the truth without client traffic (issue #13): a
sidecar's readiness gate lets no request in until /readyz says ready, so
the gateway itself must try again after a failed start, notice its upstream
going away, and see it come back.

The stdio back learns of an exit from the process itself (the pool marks
itself down); an HTTP upstream has no connection to lose between requests,
so it is asked whether it still accepts one every `health_interval`."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

import anyio

from gateway.runtime.upstream_pool import UpstreamPool
from gateway.upstream_errors import UpstreamError

# While down, how often to look again; the backoff decides when an attempt
# is really made (UpstreamPool.revive waits it out).
DOWN_TICK = 1.0


class UpstreamWatch:
    def __init__(
        self,
        pool: UpstreamPool,
        *,
        interval: float,
        reachable: Callable[[], Awaitable[bool]] | None,
    ) -> None:
        self.pool = pool
        self.interval = interval
        # How an HTTP upstream is checked (None: a command, whose exit is seen).
        self._reachable = reachable

    async def run(self) -> None:
        """Until cancelled with the gateway's task group."""
        while True:  # ends when the gateway's task group is cancelled at shutdown
            await self.check()
            await self.pause()

    async def check(self) -> None:
        pool = self.pool
        if not pool.readiness.first_done:
            return  # the start-up attempt is still under way
        if pool.up:
            if self._reachable is not None and not await self._reachable():
                pool.mark_down("the upstream does not accept connections")
            return
        if pool.awaiting_credentials:
            return  # reachable; its era waits for a client's credential
        with contextlib.suppress(UpstreamError):  # logged; /readyz tells why
            await pool.revive()

    async def pause(self) -> None:
        """Until the next check: at once when the upstream goes down, else
        after `interval` (up) or DOWN_TICK (down)."""
        pool = self.pool
        if not pool.up:
            await anyio.sleep(min(DOWN_TICK, self.interval))
            return
        with anyio.move_on_after(self.interval):
            await pool.went_down.wait()
