"""Timers fired by the test: trio's MockClock under anyio code.

The gateway's front and runtime are written against anyio, so they run on
trio unchanged; on trio's MockClock the clock jumps to the next timer as soon
as every task waits, so a test of a timeout, a priming delay or a resume
window takes no wall-clock time and never races one."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

import trio
import trio.testing


def on_mock_clock(test: Callable[[], Awaitable[None]]) -> Callable[[], None]:
    """Run an async test under trio with a clock that jumps to the next timer
    whenever every task waits (a plain function: pytest-asyncio's auto mode
    would take an async one onto asyncio's real clock)."""

    @functools.wraps(test)
    def run() -> None:
        trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0))

    return run
