"""The gateway's log lines as events a test can wait on.

structlog.testing.capture_logs gives a list; a test that must know when
something happened inside the gateway (a background task gave up, a stream
was refused) waits here for the line the gateway logs at that moment,
instead of sleeping and hoping."""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import anyio
import structlog

Entry = MutableMapping[str, Any]


class LogEvents:
    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self._waiters: list[tuple[Callable[[Entry], bool], anyio.Event]] = []

    def __call__(self, logger: object, method_name: str, event_dict: Entry) -> Entry:
        event_dict["log_level"] = method_name
        self.entries.append(event_dict)
        for matches, seen in self._waiters:
            if matches(event_dict):
                seen.set()
        raise structlog.DropEvent

    async def wait_for(self, event: str, timeout: float = 5) -> Entry:
        """The first line whose message is `event`, logged before or after the call."""
        return await self.wait_until(lambda e: e.get("event") == event, timeout)

    async def wait_until(self, matches: Callable[[Entry], bool], timeout: float = 5) -> Entry:
        for entry in self.entries:
            if matches(entry):
                return entry
        seen = anyio.Event()
        waiter = (matches, seen)
        self._waiters.append(waiter)
        try:
            with anyio.fail_after(timeout):
                await seen.wait()
        finally:
            self._waiters.remove(waiter)
        return next(e for e in self.entries if matches(e))


@contextmanager
def log_events() -> Iterator[LogEvents]:
    """As structlog.testing.capture_logs: the processors list is changed in
    place, so loggers bound before the block log here too."""
    events = LogEvents()
    processors = structlog.get_config()["processors"]
    old = processors.copy()
    try:
        processors.clear()
        processors.append(events)
        structlog.configure(processors=processors)
        yield events
    finally:
        processors.clear()
        processors.extend(old)
        structlog.configure(processors=processors)
