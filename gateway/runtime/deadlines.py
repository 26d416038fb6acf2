"""The runtime's one timer mechanism: deadlines on a heap, watched by one task.

Every bound the runtime keeps on something it waits for without a task of
its own — an upstream call's reply (runtime/upstream_session.py), a timer of
an engine machine (core/engine.py StartTimer, runtime/held_call_runner.py) —
is a key here. Starting or cancelling one is a dict and heap operation: a
call that starts and ends several per round trip spawns nothing and wakes
nothing. The watcher runs `on_due(key)` synchronously when a key falls due;
an owner whose firing waits on I/O spawns its task there.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Hashable

import anyio


class Deadlines:
    def __init__(self, on_due: Callable[[Hashable], None]) -> None:
        self._on_due = on_due
        self._deadlines: dict[Hashable, float] = {}
        # (deadline, seq, key); entries whose deadline is no longer the key's
        # (cancelled or moved) are skipped when they come up.
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = itertools.count()
        # What the watcher sleeps until: only an earlier deadline wakes it.
        # Deadlines that are ended before they fall due (nearly all: a reply
        # comes) cost the watcher one wake per bound's length, not one each.
        self._wake_at = math.inf
        self._changed = anyio.Event()
        self._closed = False

    def __contains__(self, key: Hashable) -> bool:
        return key in self._deadlines

    def __len__(self) -> int:
        return len(self._deadlines)

    def start(self, key: Hashable, deadline: float) -> None:
        """Fire `key` at `deadline`; a running one moves to it."""
        if self._closed:
            return
        self._deadlines[key] = deadline
        if len(self._heap) > 2 * len(self._deadlines) + 64:
            # Mostly ended entries: rebuild, so that the heap stays as small
            # as the deadlines that run.
            self._heap = [(d, next(self._seq), k) for k, d in self._deadlines.items()]
            heapq.heapify(self._heap)
        else:
            heapq.heappush(self._heap, (deadline, next(self._seq), key))
        if deadline < self._wake_at:
            self._wake_at = deadline
            self._changed.set()

    def cancel(self, key: Hashable) -> None:
        self._deadlines.pop(key, None)

    @property
    def cancel_at_once(self) -> Callable[[Hashable, None], float | None]:
        """`cancel` as one C call, for an owner's path of every call:
        `cancel_at_once(key, None)` (bind it once; it stays valid)."""
        return self._deadlines.pop

    def close(self) -> None:
        """Drop every deadline and end the watcher (its owner is over)."""
        self._closed = True
        self._deadlines.clear()
        self._heap.clear()
        self._changed.set()

    def fire_now(self, key: Hashable) -> None:
        """Let a running deadline fall due at once (tests fire timers this way)."""
        if key in self._deadlines:
            self.start(key, -math.inf)

    def fire_due(self, now: float) -> None:
        """Run `on_due` for every key due at `now` (the watcher's pass)."""
        # self._heap, not a local: `on_due` may start a deadline, and a start
        # may rebuild the heap.
        while self._heap and self._heap[0][0] <= now:
            deadline, _, key = heapq.heappop(self._heap)
            if self._deadlines.get(key) == deadline:
                del self._deadlines[key]
                self._on_due(key)

    async def run(self) -> None:
        """Fire deadlines as they fall due, until closed or cancelled."""
        while not self._closed:  # each pass sleeps until the earliest deadline or an earlier one
            self.fire_due(anyio.current_time())
            heap, deadlines = self._heap, self._deadlines
            # Skip ended entries, so the sleep below is for a live one.
            while heap and deadlines.get(heap[0][2]) != heap[0][0]:
                heapq.heappop(heap)
            self._wake_at = heap[0][0] if heap else math.inf
            self._changed = anyio.Event()
            with anyio.move_on_after(self._wake_at - anyio.current_time()):
                await self._changed.wait()
