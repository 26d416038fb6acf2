"""Timers fired by the test: trio's MockClock under anyio code.

The gateway's front and runtime are written against anyio, so they run on
trio unchanged; on trio's MockClock the clock jumps to the next timer as soon
as every task waits, so a test of a timeout, a priming delay or a resume
window takes no wall-clock time and never races one."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec

import trio
import trio.testing

P = ParamSpec("P")


def mock_clock() -> trio.testing.MockClock:
    """A clock that jumps to the next timer whenever every task waits."""
    return trio.testing.MockClock(autojump_threshold=0)


def on_mock_clock(test: Callable[P, Awaitable[None]]) -> Callable[P, None]:
    """Run an async test under trio on mock_clock() (a plain function:
    pytest-asyncio's auto mode would take an async one onto asyncio's real
    clock). The test's parameters (pytest's parametrize) pass through."""

    @functools.wraps(test)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        trio.run(functools.partial(test, *args, **kwargs), clock=mock_clock())

    return run
