"""Who may have calls running on a legacy upstream session (DESIGN §5.1.6),
as plain data.

On a legacy stdio session nothing on the wire says which call a server
request belongs to. So a call that may be asked for client input holds the
session alone (exclusive), and every other call that could trigger such a
request shares it. Waiting writers go first, so readers cannot starve them.
The runtime (runtime/session_lease.py) does the waiting for a turn.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(eq=False, slots=True)
class LeaseState:
    # The one holding the session alone: a legacy client, or a held call.
    holder: object | None = None
    readers: int = 0
    waiting_writers: int = 0

    def can_share_now(self) -> bool:
        return self.holder is None and not self.waiting_writers

    def can_hold_alone_now(self) -> bool:
        return self.holder is None and not self.readers

    def share_now(self) -> bool:
        """Take a share if one is free at once (the immediate path)."""
        if not self.can_share_now():
            return False
        self.readers += 1
        return True

    def release_shared(self) -> bool:
        """Give a share back; True when a waiting writer may go now."""
        self.readers -= 1
        return bool(self.waiting_writers) and not self.readers

    def release_exclusive(self, holder: object) -> bool:
        """Give the session back; True if `holder` held it (others may go)."""
        if self.holder is not holder:
            return False
        self.holder = None
        return True
