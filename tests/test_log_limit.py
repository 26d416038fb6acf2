"""One log line per kind of event per interval (the issue: "the operator sees
one log line (never a traceback, never a log flood)")."""

from __future__ import annotations

from typing import Any

from gateway.log_limit import LogLimiter


class _Logger:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append(("warning", event, fields))

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append(("info", event, fields))


def test_an_event_is_logged_once_per_interval_then_with_the_count_held_back() -> None:
    now = [0.0]
    logger = _Logger()
    limiter = LogLimiter(logger, interval=60, clock=lambda: now[0])
    for _ in range(1000):
        limiter.warning("junk", n=1)
    limiter.info("other")
    now[0] = 59.9
    limiter.warning("junk", n=2)
    now[0] = 60.0
    limiter.warning("junk", n=3)
    limiter.warning("junk", n=4)
    now[0] = 200.0
    limiter.warning("junk", n=5)
    assert logger.lines == [
        ("warning", "junk", {"n": 1}),
        ("info", "other", {}),
        ("warning", "junk", {"n": 3, "suppressed": 1000}),
        ("warning", "junk", {"n": 5, "suppressed": 1}),
    ]
