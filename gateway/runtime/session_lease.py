"""Who may have calls running on a legacy upstream session (DESIGN §5.1.6).

On a legacy stdio session nothing on the wire says which call a server
request belongs to. So a call that may be asked for client input holds the
session alone (exclusive), and every other call that could trigger such a
request shares it. Waiting writers go first, so readers cannot starve them.
Callers bound every wait with their own timeout.
"""

from __future__ import annotations

import anyio


class SessionLease:
    def __init__(self) -> None:
        self.holder: object | None = None
        self.readers = 0
        self._waiting_writers = 0
        self._changed = anyio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def can_share_now(self) -> bool:
        return self.holder is None and not self._waiting_writers

    async def acquire_shared(self) -> None:
        while self.holder is not None or self._waiting_writers:  # each pass waits for a change
            await self._changed.wait()
        self.readers += 1

    def release_shared(self) -> None:
        self.readers -= 1
        if self._waiting_writers and not self.readers:
            self._notify()

    async def acquire_exclusive(self, holder: object) -> None:
        self._waiting_writers += 1
        acquired = False
        try:
            while self.holder is not None or self.readers:  # each pass waits for a change
                await self._changed.wait()
            acquired = True
        finally:
            self._waiting_writers -= 1
            if not acquired:
                # Given up (timeout, cancel): readers it held back may go now.
                self._notify()
        self.holder = holder

    def release_exclusive(self, holder: object) -> None:
        if self.holder is holder:
            self.holder = None
            self._notify()
