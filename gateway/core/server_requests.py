"""Who answers a legacy server's request to its client (DESIGN §5.1.5-5.1.6).

A legacy server asks sampling, elicitation, roots or ping of "its client";
behind the gateway that may be a legacy client (asked under a gateway id), a
modern client's call held by the MRTR bridge, the configured roots, or
nobody (a refusal naming why). The decision is made when the request
arrives, in wire order, from a `Claim` the runtime reads off the session at
that moment: by the time anything is awaited the reader may have delivered
the reply that ended the call the request came during.

`ServerRequests.handle` answers a `ServerRequestArrived` with commands; the
runtime (runtime/server_requests.py) carries them out.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from gateway import era, wire
from gateway.core import upstream_checks
from gateway.core.engine import Command, Event, Log
from gateway.core.mrtr_bridge import check_capability


class ClientView(Protocol):
    """What the decision reads of a client (the runtime's ClientLink)."""

    @property
    def session(self) -> object | None:
        """The client's legacy session; None for a modern client."""

    def declared(self, feature: str) -> bool: ...


C = TypeVar("C", bound=ClientView)


@dataclass(frozen=True, slots=True)
class OwnerCall:
    """A call in progress of the client a request could belong to."""

    upstream_id: int
    method: str
    client_id: wire.RequestId | None


@dataclass(frozen=True, slots=True)
class Claim(Generic[C]):
    """Who could own a server request when it arrived."""

    # The bridged call holding the session's lease (DESIGN §5.1.6), if any.
    held_call: Hashable | None
    # The client holding the lease alone, if any.
    holder: C | None
    # The one client with calls on the session (or, with none in progress,
    # the one client of the session's principal), if there is just one.
    sole_owner: C | None
    # The owner's calls in progress.
    calls: tuple[OwnerCall, ...] = ()
    # The client features the held call's client declared.
    held_features: frozenset[str] = frozenset()

    @property
    def owner(self) -> C | None:
        return self.holder if self.holder is not None else self.sole_owner


@dataclass(frozen=True, slots=True)
class ServerRequestArrived(Event, Generic[C]):
    request: wire.Message
    claim: Claim[C]
    # A dual-era server's legacy session is a legacy client's own (DESIGN §5.3).
    dual_legacy: bool = False
    # The session speaks 2026-07-28, which has no server requests at all.
    server_is_modern: bool = False
    # Server requests of this session already waiting for a client.
    waiting: int = 0
    # The HTTP back saw it on the GET stream, outside any call.
    outside_calls: bool = False
    # The client features the session was opened with.
    session_features: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class RespondToServer(Command):
    reply: wire.Message


@dataclass(frozen=True, slots=True)
class AskClient(Command, Generic[C]):
    """Pass the request to a legacy client and its answer back to the server."""

    client: C
    request: wire.Message


@dataclass(frozen=True, slots=True)
class HandToHeldCall(Command):
    """The MRTR bridge's held call owns it (it becomes `input_required`)."""

    held_call: Hashable
    request: wire.Message


@dataclass(frozen=True, slots=True)
class FailClientCall(Command):
    """End a client's call upstream with `reply` instead of the server's."""

    upstream_id: int
    reply: wire.Message


@dataclass(frozen=True, slots=True)
class ServerRequestSettings:
    # Server requests one session may have waiting for clients at once: each
    # waits up to request_timeout, and a server that asks without end must
    # not pile them up.
    max_waiting: int
    static_roots: tuple[dict[str, Any], ...] = ()


class ServerRequests(Generic[C]):
    def __init__(self, settings: ServerRequestSettings) -> None:
        self.settings = settings

    def handle(self, event: Event) -> list[Command]:
        assert isinstance(event, ServerRequestArrived), event
        msg: wire.Message = event.request
        msg_id = msg["id"]
        method: str = msg["method"]
        refusal = upstream_checks.server_request_problem(msg)
        if refusal is not None:
            return [
                _junk("server request with bad params refused", method, refusal),
                RespondToServer(refusal),
            ]
        if method == "ping" and not event.dual_legacy:
            # DESIGN §5.1.5: the gateway answers the legacy server's ping itself.
            return [RespondToServer(wire.result_response(msg_id, {}))]
        if event.server_is_modern:
            # 2026-07-28 basic/patterns/mrtr: a server asks for input with
            # input_required, never with a request of its own. Such a request
            # names no call and is no client's, so none is failed for it.
            return [
                Log(
                    "request from a 2026-07-28 server refused",
                    "warning",
                    {"method": method[:100]},
                    rate_limited=True,
                ),
                RespondToServer(
                    wire.error_response(
                        msg_id,
                        wire.METHOD_NOT_FOUND,
                        f"{method[:100]} refused: a 2026-07-28 server asks for client input"
                        " with input_required, not with requests",
                    )
                ),
            ]
        limit = self.settings.max_waiting
        if event.waiting >= limit:
            return [
                Log(
                    "server requests over the limit refused",
                    "warning",
                    {"limit": limit},
                    rate_limited=True,
                ),
                RespondToServer(
                    wire.error_response(
                        msg_id,
                        wire.INTERNAL_ERROR,
                        f"Too many requests in progress (limit {limit})",
                    )
                ),
            ]
        claim: Claim[C] = event.claim
        if method == "ping":
            # A dual-era server's legacy session is the client's own, kept
            # whole (DESIGN §5.3): its ping reaches the one legacy client it
            # can belong to; with none, the gateway answers as on other paths.
            owner = claim.owner
            if owner is not None and owner.session is not None:
                return [AskClient(owner, msg)]
            return [RespondToServer(wire.result_response(msg_id, {}))]
        feature = era.CLIENT_FEATURE_METHODS.get(method)
        if feature is None:
            return [
                RespondToServer(
                    wire.error_response(
                        msg_id, wire.METHOD_NOT_FOUND, f"Method not found: {method}"
                    )
                )
            ]
        if claim.held_call is not None and not (
            method == "roots/list"
            and feature not in claim.held_features
            and feature in event.session_features
        ):
            # DESIGN §5.1.6: the call holding the session owns the request.
            return [HandToHeldCall(claim.held_call, msg)]
        # Roots are the session's, not a call's (see _serve): a held call of a
        # client that declared none is not failed -32021 for a roots/list the
        # server sends at session start (server-everything, 350 ms after
        # initialized, in whatever call then runs, its elicitation included).
        return self._serve(event, feature)

    def _serve(self, event: ServerRequestArrived[C], feature: str) -> list[Command]:
        msg = event.request
        msg_id, method = msg["id"], msg["method"]
        owner = event.claim.owner
        if (
            method == "roots/list"
            and self.settings.static_roots
            and not (owner is not None and owner.declared("roots"))
        ):
            # DESIGN §5.1.6: roots the client cannot give may come from configuration.
            if owner is None:
                why = "no single client it can belong to"
            elif owner.session is not None:
                why = "the client did not declare the roots capability"
            else:
                why = "no call of the modern client that can carry it is in progress"
            return [
                Log(
                    "roots/list answered from the configured roots",
                    "info",
                    {"why": why},
                    rate_limited=True,
                ),
                RespondToServer(
                    wire.result_response(msg_id, {"roots": list(self.settings.static_roots)})
                ),
            ]
        if owner is not None and owner.session is not None:
            if owner.declared(feature):
                return [AskClient(owner, msg)]
            why = f"the client did not declare the {feature} capability"
        elif owner is None:
            why = "no single client call it can belong to"
        else:
            calls = event.claim.calls
            missing = check_capability({}, method, msg.get("params"))
            # Roots are the session's, not a call's: a legacy server asks for
            # them at session start and on list_changed (server-everything
            # 350 ms after initialized, whatever call is then in flight), so
            # a call of a client that declared none is not failed for it; the
            # server's refusal lets a tool that needed them fail on its own
            # terms. Sampling and elicitation asked during a call are its own.
            sessionwide = method == "roots/list" and feature in event.session_features
            # A request from the HTTP GET stream names no call (2025-11-25: it
            # SHOULD be unrelated to running ones; server-everything asks for
            # roots there after initialized), so it fails none. Nor does one
            # that arrives while the only call is one whose result cannot be
            # input_required (a tools/list, 2026-07-28): a server asks that at
            # session start, as server-filesystem asks roots/list right after
            # initialized, and the call is not the one that needs it.
            could_carry = len(calls) == 1 and calls[0].method in era.MRTR_METHODS
            if could_carry and missing is not None and not event.outside_calls and not sessionwide:
                # The one call of a modern client that declared no client
                # features needs one: answer it -32021, as a modern server would.
                commands: list[Command] = [
                    RespondToServer(
                        wire.error_response(msg_id, wire.METHOD_NOT_FOUND, missing.reason)
                    )
                ]
                call = calls[0]
                if call.client_id is not None:
                    commands.append(FailClientCall(call.upstream_id, missing.error(call.client_id)))
                return commands
            in_progress = ", ".join(sorted({c.method[:100] for c in calls}))[:300] or "none"
            why = (
                f"roots belong to the session, and the only call in progress ({in_progress})"
                " is of a client that did not declare them"
                if sessionwide and could_carry
                else f"no call of the modern client that can carry it is in progress"
                f" (in progress: {in_progress})"
            )
        # Every refusal is -32601 with the reason in the message: servers take
        # any error from roots/list as "no roots from the client" and keep
        # their own configuration (server-filesystem keeps the directories on
        # its command line and asks again on roots/list_changed); the mcp SDKs
        # raise it in the tool that asked, which fails on its own terms.
        return [
            Log(
                "server request refused",
                "info",
                {"method": method[:100], "why": why},
                rate_limited=True,
            ),
            RespondToServer(
                wire.error_response(msg_id, wire.METHOD_NOT_FOUND, f"{method} refused: {why}")
            ),
        ]


def _junk(message: str, method: str, refusal: wire.Message) -> Log:
    return Log(
        message,
        "warning",
        {"method": method[:100], "error": refusal["error"]["message"]},
        rate_limited=True,
    )
