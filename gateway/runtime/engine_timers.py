"""The engine's timers (core/engine.py StartTimer, CancelTimer, TimerFired) on
one task: starting or cancelling a timer is a dict and heap operation, so a
call that starts and cancels several per round trip spawns no task for them.
Only a timer that fires gets a task of its own (its firing may wait on I/O,
and timers that fire together must not wait for each other)."""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Coroutine, Hashable
from typing import Any

import anyio
from anyio.abc import TaskGroup

FireFn = Callable[[Hashable], Coroutine[Any, Any, None]]


class EngineTimers:
    def __init__(self, fire: FireFn) -> None:
        self._fire = fire
        self._deadlines: dict[Hashable, float] = {}
        # (deadline, seq, timer); entries whose deadline is no longer the
        # timer's (cancelled or moved) are skipped when they come up.
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = itertools.count()
        self._changed = anyio.Event()

    def __contains__(self, timer: Hashable) -> bool:
        return timer in self._deadlines

    def start(self, timer: Hashable, deadline: float) -> None:
        """Fire `timer` at `deadline`; a running timer moves to it."""
        self._deadlines[timer] = deadline
        if len(self._heap) > 2 * len(self._deadlines) + 64:
            # Mostly cancelled entries: rebuild, so that the heap stays as
            # small as the timers that run.
            self._heap = [(d, next(self._seq), t) for t, d in self._deadlines.items()]
            heapq.heapify(self._heap)
        else:
            heapq.heappush(self._heap, (deadline, next(self._seq), timer))
        if self._heap[0][2] == timer:
            self._changed.set()  # earlier than what the runner waits for

    def cancel(self, timer: Hashable) -> None:
        self._deadlines.pop(timer, None)

    def fire_now(self, timer: Hashable) -> None:
        """Let a running timer fire at once (tests fire timers this way)."""
        if timer in self._deadlines:
            self.start(timer, -math.inf)

    async def run(self, tg: TaskGroup) -> None:
        """Fire timers as they fall due. Runs until `tg` is cancelled; each pass
        waits until the earliest deadline or a new earlier one."""
        while True:
            now = anyio.current_time()
            while self._heap and self._heap[0][0] <= now:
                deadline, _, timer = heapq.heappop(self._heap)
                if self._deadlines.get(timer) == deadline:
                    del self._deadlines[timer]
                    tg.start_soon(self._fire, timer)
            # Skip entries already cancelled, so the wait below is for a live one.
            while self._heap and self._deadlines.get(self._heap[0][2]) != self._heap[0][0]:
                heapq.heappop(self._heap)
            delay = self._heap[0][0] - now if self._heap else math.inf
            with anyio.move_on_after(delay):
                await self._changed.wait()
            self._changed = anyio.Event()
