"""The runtime's one timer mechanism (runtime/deadlines.py): the bounds of
upstream calls and the engine's StartTimer / CancelTimer / TimerFired, on one
watcher. No sleeps: deadlines are in the past or an hour away, tests fire
them at once, or drive `fire_due` with a time of their choosing."""

from __future__ import annotations

from collections.abc import Hashable

import anyio
import pytest

from gateway.runtime.deadlines import Deadlines

pytestmark = pytest.mark.anyio


async def test_a_deadline_fires_once_when_due_and_not_once_cancelled() -> None:
    fired: list[Hashable] = []
    two = anyio.Event()

    def due(key: Hashable) -> None:
        fired.append(key)
        if len(fired) == 2:
            two.set()

    deadlines = Deadlines(due)
    async with anyio.create_task_group() as tg:
        tg.start_soon(deadlines.run)
        later = anyio.current_time() + 3600
        for name in ("a", "b", "c"):
            deadlines.start(name, later)
        deadlines.cancel("b")
        deadlines.start("c", anyio.current_time() - 1)  # moved: due now
        deadlines.fire_now("a")
        deadlines.fire_now("b")  # cancelled: nothing fires
        with anyio.fail_after(2):
            await two.wait()
        await anyio.wait_all_tasks_blocked()
        assert sorted(map(str, fired)) == ["a", "c"]
        assert "a" not in deadlines and "b" not in deadlines and "c" not in deadlines
        tg.cancel_scope.cancel()


async def test_deadlines_started_and_cancelled_leave_nothing_behind() -> None:
    """A call starts and ends its bound on every round trip: the heap stays
    as small as the deadlines that run."""

    def due(key: Hashable) -> None:
        raise AssertionError(f"{key!r} fired")

    deadlines = Deadlines(due)
    later = anyio.current_time() + 3600
    deadlines.start("kept", later)
    for n in range(10_000):
        deadlines.start(n, later + n)
        deadlines.cancel(n)
    assert "kept" in deadlines and len(deadlines) == 1
    assert len(deadlines._heap) <= 2 * 1 + 64 + 1


async def test_only_an_earlier_deadline_wakes_the_watcher() -> None:
    """Later bounds than the one the watcher sleeps for (every call's, with
    one timeout for all) do not wake it: no work per call beyond the heap."""
    deadlines = Deadlines(lambda key: None)
    now = anyio.current_time()
    deadlines.start("first", now + 60)
    assert deadlines._changed.is_set()
    deadlines._changed = anyio.Event()  # the watcher went back to sleep for "first"
    for n in range(100):
        deadlines.start(n, now + 61 + n)
    assert not deadlines._changed.is_set()
    deadlines.start("sooner", now + 1)
    assert deadlines._changed.is_set()


async def test_a_deadline_started_while_others_fire_is_kept() -> None:
    """`on_due` may start deadlines (a failed call's wind-down), and a start
    may rebuild the heap under the pass that fires: nothing is lost."""
    fired: list[Hashable] = []
    deadlines: Deadlines

    def due(key: Hashable) -> None:
        fired.append(key)
        if key == 0:
            for n in range(200):  # enough to rebuild the heap mid-pass
                deadlines.start(("later", n), 1000.0)
                deadlines.cancel(("later", n))
            deadlines.start("wind-down", 5.0)

    deadlines = Deadlines(due)
    for n in range(3):
        deadlines.start(n, 1.0)
    deadlines.fire_due(2.0)
    assert fired == [0, 1, 2]
    assert "wind-down" in deadlines
    deadlines.fire_due(5.0)
    assert fired[-1] == "wind-down" and len(deadlines) == 0


async def test_a_closed_watcher_ends_and_takes_no_more_deadlines() -> None:
    """A session's watcher ends with the session: none is left behind per
    upstream restart."""
    deadlines = Deadlines(lambda key: None)
    deadlines.start("a", anyio.current_time() + 3600)
    with anyio.fail_after(2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(deadlines.run)
            await anyio.wait_all_tasks_blocked()
            deadlines.close()
    deadlines.start("b", 0.0)
    assert len(deadlines) == 0
