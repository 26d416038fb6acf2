"""One log line per kind of event per interval, however often it happens.

A peer that misbehaves in a loop must not turn the gateway's log into a flood:
the first occurrence is logged at once, the rest of the interval only counted,
and the next line logged for that event says how many were held back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog

DEFAULT_INTERVAL = 60.0


class LogLimiter:
    """`burst`: how many times an event is logged in one interval before the
    rest are only counted (1 for a warning about misbehaviour; more for a
    stream the operator wants to read, like a server's stderr)."""

    def __init__(
        self,
        logger: Any,
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        burst: int = 1,
    ) -> None:
        self._log = logger
        self._interval = interval
        self._clock = clock
        self._burst = burst
        # event name -> (start of its interval, logged in it, held back in
        # it). Event names are the gateway's own strings, so this stays small.
        self._seen: dict[str, tuple[float, int, int]] = {}

    def warning(self, event: str, **fields: Any) -> bool:
        """Log `event` unless it was logged `burst` times within the
        interval; True if logged."""
        return self._emit(self._log.warning, event, fields)

    def info(self, event: str, **fields: Any) -> bool:
        return self._emit(self._log.info, event, fields)

    def _emit(self, emit: Callable[..., Any], event: str, fields: dict[str, Any]) -> bool:
        now = self._clock()
        seen = self._seen.get(event)
        if seen is not None and now - seen[0] < self._interval:
            start, logged, held = seen
            if logged >= self._burst:
                self._seen[event] = (start, logged, held + 1)
                return False
            self._seen[event] = (start, logged + 1, held)
        else:
            if seen is not None and seen[2]:
                fields["suppressed"] = seen[2]
            self._seen[event] = (now, 1, 0)
        emit(event, **fields)
        return True


def limited(name: str, interval: float = DEFAULT_INTERVAL) -> LogLimiter:
    return LogLimiter(structlog.get_logger(name), interval)
