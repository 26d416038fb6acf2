"""Waiting for a turn on a legacy upstream session; the rules are
core/session_lease.py's. Callers bound every wait with their own timeout."""

from __future__ import annotations

import anyio

from gateway.core.session_lease import LeaseState


class SessionLease(LeaseState):
    def __init__(self) -> None:
        super().__init__()
        self._changed = anyio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def acquire_shared(self) -> None:
        while not self.can_share_now():  # each pass waits for a change
            await self._changed.wait()
        self.readers += 1

    def release_shared(self) -> bool:
        writer_may_go = LeaseState.release_shared(self)
        if writer_may_go:
            self._notify()
        return writer_may_go

    async def acquire_exclusive(self, holder: object) -> None:
        self.waiting_writers += 1
        acquired = False
        try:
            while not self.can_hold_alone_now():  # each pass waits for a change
                await self._changed.wait()
            acquired = True
        finally:
            self.waiting_writers -= 1
            if not acquired:
                # Given up (timeout, cancel): readers it held back may go now.
                self._notify()
        self.holder = holder

    def release_exclusive(self, holder: object) -> bool:
        released = LeaseState.release_exclusive(self, holder)
        if released:
            self._notify()
        return released
