"""The event loop's clock, read without asking which loop runs.

anyio.current_time() looks the running loop up on every call, and on
CPython 3.11 every lookup is a getpid() system call: a few microseconds on a
virtual machine, on the path of every request. A loop's clock does not change
while it runs, so the hot paths look it up once (trio, and its mock clock in
the tests, keep anyio's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import anyio


def loop_clock() -> Callable[[], float]:
    """The running loop's clock: the same readings as anyio.current_time()."""
    try:
        return asyncio.get_running_loop().time
    except RuntimeError:  # trio
        return anyio.current_time


class LazyClock:
    """A clock bound to the loop of its first reading (objects built before
    the loop runs, or outside it, get one too)."""

    __slots__ = ("_read",)

    def __init__(self) -> None:
        self._read: Callable[[], float] | None = None

    def __call__(self) -> float:
        read = self._read
        if read is None:
            read = self._read = loop_clock()
        return read()
