"""Connection-level limits of the HTTP front, enforced in uvicorn's httptools
protocol before anything reaches the ASGI app: head size (431), slow heads and
slow bodies (408), idle connections (closed), connections at once (the oldest
idle one makes room, else 503).

Three parts: connection_guard.py (the limits, the open connections and the
timer over their deadlines, the refusal log), limited_protocol.py (each
connection's phases and refusals, in uvicorn's protocol), open_files.py (the
cap the open-files limit allows). This module names them in one place, for
the runtime that wires them to uvicorn.
"""

from gateway.fronts.connection_guard import (
    BODY,
    HEAD,
    IDLE,
    NEVER,
    REFUSALS,
    SERVING,
    ConnectionGuard,
    HttpLimits,
    RefusalLog,
)
from gateway.fronts.limited_protocol import LimitedHttpToolsProtocol, protocol_class
from gateway.fronts.open_files import (
    BACKLOGS_IN_FLIGHT,
    FD_PER_UPSTREAM_SESSION,
    FD_RESERVE,
    MAX_BACKLOG,
    Capacity,
    capacity,
    quiet_accept_errors,
    raise_open_files_limit,
)

__all__ = [
    "BACKLOGS_IN_FLIGHT",
    "BODY",
    "FD_PER_UPSTREAM_SESSION",
    "FD_RESERVE",
    "HEAD",
    "IDLE",
    "MAX_BACKLOG",
    "NEVER",
    "REFUSALS",
    "SERVING",
    "Capacity",
    "ConnectionGuard",
    "HttpLimits",
    "LimitedHttpToolsProtocol",
    "RefusalLog",
    "capacity",
    "protocol_class",
    "quiet_accept_errors",
    "raise_open_files_limit",
]
