"""The runtime's timers for the engine (runtime/engine_timers.py): StartTimer,
CancelTimer and TimerFired of core/engine.py, on one task. No sleeps: the
deadlines are in the past or an hour away, and tests fire timers at once."""

from __future__ import annotations

from collections.abc import Hashable

import anyio
import pytest

from gateway.runtime.engine_timers import EngineTimers

pytestmark = pytest.mark.anyio


async def test_a_timer_fires_once_when_due_and_not_once_cancelled() -> None:
    fired: list[Hashable] = []
    two = anyio.Event()

    async def fire(timer: Hashable) -> None:
        fired.append(timer)
        if len(fired) == 2:
            two.set()

    timers = EngineTimers(fire)
    async with anyio.create_task_group() as tg:
        tg.start_soon(timers.run, tg)
        later = anyio.current_time() + 3600
        for name in ("a", "b", "c"):
            timers.start(name, later)
        timers.cancel("b")
        timers.start("c", anyio.current_time() - 1)  # moved: due now
        timers.fire_now("a")
        timers.fire_now("b")  # cancelled: nothing fires
        with anyio.fail_after(2):
            await two.wait()
        await anyio.wait_all_tasks_blocked()
        assert sorted(map(str, fired)) == ["a", "c"]
        assert "a" not in timers and "b" not in timers and "c" not in timers
        tg.cancel_scope.cancel()


async def test_timers_started_and_cancelled_leave_nothing_behind() -> None:
    """A call starts and cancels several timers per round trip: the heap stays
    as small as the timers that run."""

    async def fire(timer: Hashable) -> None:
        raise AssertionError(f"{timer!r} fired")

    timers = EngineTimers(fire)
    later = anyio.current_time() + 3600
    timers.start("kept", later)
    for n in range(10_000):
        timers.start(n, later)
        timers.cancel(n)
    assert "kept" in timers
    assert len(timers._heap) <= 2 * 1 + 64 + 1
