"""structlog to stderr, always: in stdio mode stdout belongs to the protocol."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


def configure(level: str = "info", fmt: str = "console") -> None:
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, not {level!r}")
    renderer: structlog.types.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        colors = sys.stderr is not None and sys.stderr.isatty()
        renderer = structlog.dev.ConsoleRenderer(colors=colors)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=StderrLogger,
        cache_logger_on_first_use=True,
    )


class LogSink:
    """Where log lines go, and how many it could not take."""

    def __init__(self) -> None:
        self.dropped = 0

    def write(self, line: str, stream: TextIO | None) -> None:
        if stream is None:  # no stderr at all (pythonw, a closed fd 2 at start)
            self.dropped += 1
            return
        try:
            stream.write(line + "\n")
            stream.flush()
        # Its reader gone (EPIPE: a log shipper restarting), a full disk, a
        # closed file: the line is lost, and the gateway goes on serving. Left
        # to rise, it would fail whatever was logging (the stderr pump of an
        # upstream, a request) and with it the gateway.
        except (OSError, ValueError):
            self.dropped += 1


SINK = LogSink()


class StderrLogger:
    """structlog's PrintLogger on stderr, through SINK (read at each line, so a
    test's or an embedder's replacement of sys.stderr is honoured)."""

    def __init__(self, *args: Any) -> None:
        pass

    def msg(self, message: str) -> None:
        SINK.write(message, sys.stderr)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg
