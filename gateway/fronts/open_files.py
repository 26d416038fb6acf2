"""How many HTTP connections the process can hold: the open-files limit
raised as far as it goes, the connection cap and listen backlog it allows,
and accept() failures for lack of descriptors counted, not logged each."""

from __future__ import annotations

import asyncio
import errno
import resource
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from gateway.fronts.connection_guard import RefusalLog

log = structlog.get_logger("gateway.fronts.http")

# File descriptors kept aside for everything that is not a client connection:
# the listening socket, log and upstream pipes, upstream HTTP connections.
FD_RESERVE = 64
FD_PER_UPSTREAM_SESSION = 4


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; the soft limit after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning(
                "could not raise the open-files limit", soft=soft, hard=hard, error=str(exc)
            )
    return soft


@dataclass(frozen=True, slots=True)
class Capacity:
    connections: int  # the connection cap
    backlog: int  # the listen backlog, which is also how many accepts one loop pass makes


MAX_BACKLOG = 2048  # uvicorn's default
# Accepted sockets not yet admitted, and evicted ones not yet closed, at once:
# measured with floods of 2,000 connections at 1,024 open files (2 was short).
BACKLOGS_IN_FLIGHT = 4


def capacity(configured: int, open_files: int, upstream_sessions: int) -> Capacity:
    """The connection cap and listen backlog the open-files limit allows.

    asyncio accepts up to `backlog` sockets in one pass, before any of them
    reaches the protocol that would refuse or evict; their descriptors (and
    those of evicted connections, closed a pass later) come on top of the cap.
    Over the limit, every accept() fails until descriptors free up. Warns once
    when the cap must be lower than configured."""
    budget = max(open_files - FD_RESERVE - FD_PER_UPSTREAM_SESSION * upstream_sessions, 5)
    if budget >= configured + BACKLOGS_IN_FLIGHT * MAX_BACKLOG:
        return Capacity(configured, MAX_BACKLOG)
    backlog = min(max(budget // 16, 1), MAX_BACKLOG)
    allowed = min(configured, max(budget - BACKLOGS_IN_FLIGHT * backlog, 1))
    if allowed < configured:
        log.warning(
            f"the open-files limit ({open_files}) allows only {allowed} HTTP connections "
            f"of the configured max_connections = {configured}; raise it (ulimit -n) "
            "to allow more",
            open_files=open_files,
            max_connections=configured,
            allowed=allowed,
        )
    return Capacity(allowed, backlog)


def quiet_accept_errors(loop: asyncio.AbstractEventLoop, refusals: RefusalLog) -> None:
    """asyncio logs a traceback each time accept() fails for lack of file
    descriptors (and retries a second later); count those instead."""
    default = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
            refusals.note("accept() failures for lack of file descriptors")
            return
        if default is not None:
            default(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
