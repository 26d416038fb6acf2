"""Where a server's notification goes, and who sees its log messages
(DESIGN §5.1.5; 2026-07-28 logging, progress, subscriptions).

`route` reads a notification once and says which table the runtime must
look it up in (the progress routes, the forwarded server requests, a listen
stream) or that it goes to the session's legacy clients; the log filter says
which clients see a log message at its level. The runtime
(runtime/server_notifications.py) owns the tables and does the sending.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from gateway import era, wire
from gateway.core import upstream_checks
from gateway.core.server_requests import ClientView
from gateway.core.subscriptions import subscription_id


class Kind(enum.Enum):
    PROGRESS = "progress"  # to the call that gave the progress token
    LOG = "log"  # through the log filter
    CANCELLED = "cancelled"  # the server gave up on a request it sent
    LISTEN = "listen"  # a modern server's listen stream, back to its listener
    SESSION = "session"  # a legacy server's own: list_changed, resources/updated, ...
    MALFORMED = "malformed"  # dropped, worth a (rate-limited) line
    DROP = "drop"  # nobody it can be for


@dataclass(frozen=True, slots=True)
class Route:
    kind: Kind
    # PROGRESS: the upstream token; LOG: the level; CANCELLED: the request
    # id; LISTEN: the listen's upstream id; MALFORMED: what is wrong.
    key: Any = None


def route(msg: wire.Message, server_is_legacy: bool) -> Route:
    problem = upstream_checks.notification_problem(msg)
    if problem is not None:
        return Route(Kind.MALFORMED, problem)
    method = msg["method"]
    params: dict[str, Any] = msg.get("params") or {}
    if method == "notifications/progress":
        return Route(Kind.PROGRESS, str(params.get("progressToken")))
    if method == "notifications/message":
        # notification_problem refused a level that is not one of the eight.
        return Route(Kind.LOG, params["level"])
    if method == "notifications/cancelled":
        return Route(Kind.CANCELLED, params.get("requestId"))
    listen = subscription_id(msg)
    if listen is not None:
        # The gateway's own listens upstream have integer ids; anything else
        # names no listen of ours.
        return Route(Kind.LISTEN, listen) if isinstance(listen, int) else Route(Kind.DROP)
    if server_is_legacy:
        return Route(Kind.SESSION)
    return Route(Kind.DROP)


def for_client_token(msg: wire.Message, client_token: str | int) -> wire.Message:
    """A progress notification under the token the client gave."""
    params = dict(msg.get("params") or {})
    params["progressToken"] = client_token
    return wire.notification("notifications/progress", params)


def cancelled_for_client(msg: wire.Message, gateway_id: str) -> wire.Message:
    """The server's cancellation of a request the gateway passed to a client
    under `gateway_id`."""
    return wire.notification(
        "notifications/cancelled", {**(msg.get("params") or {}), "requestId": gateway_id}
    )


# -- the log filter -------------------------------------------------------------


def legacy_client_wants_log(asked: str | None, level: str, server_is_legacy: bool) -> bool:
    """DESIGN §5.1.5: a legacy client asked once for its session, with
    logging/setLevel (`asked`), and sees the messages at or above that level."""
    if asked is None:
        # Legacy default: the server decides what to send; pass it on for
        # a legacy server, and a modern one sends nothing unasked.
        return server_is_legacy
    return era.LOG_RANK[asked] <= era.LOG_RANK[level]


class CallView(Protocol):
    """What the log filter reads of a call in progress (the runtime's PendingCall)."""

    @property
    def log_level(self) -> str | None: ...

    @property
    def owner(self) -> ClientView | None: ...


T = TypeVar("T", bound=CallView)


def log_call(calls: Sequence[T], level: str) -> T | None:
    """The modern client call a log message provably belongs to, if any.

    `calls`: the client calls the message may be about (the call whose HTTP
    stream carried it; over stdio every client call in progress on the
    session). A modern client asks per request (`io.modelcontextprotocol/
    logLevel`), and a server MUST NOT send log messages for a request without
    it (2026-07-28 logging). A legacy server's messages name no call, so the
    gateway does not guess: a message goes to a call only when it is the one
    call it can be about and that call asked for this level. When calls
    overlap on a legacy stdio session, nobody gets it; a legacy client's
    messages follow its session's level instead.
    """
    if len(calls) != 1:
        return None
    call = calls[0]
    if call.owner is None or call.owner.session is not None or call.log_level is None:
        return None
    return call if era.LOG_RANK[call.log_level] <= era.LOG_RANK[level] else None
