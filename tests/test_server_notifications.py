"""Where a server's notification goes and who sees its log messages
(DESIGN §5.1.5; 2026-07-28 logging, progress, subscriptions; issue #11 item 1):
the pure rules, no sockets. End-to-end delivery stays in test_service.py,
test_listens.py and test_tenant_isolation.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import era, wire
from gateway.core import server_notifications as notes
from gateway.core.server_notifications import Kind, Route


@dataclass(eq=False)
class Client:
    session: object | None = None

    def declared(self, feature: str) -> bool:
        return False


@dataclass
class Call:
    log_level: str | None
    owner: Client | None


MODERN, LEGACY = Client(), Client(session="legacy")


def note(method: str, params: dict[str, Any] | None = None) -> wire.Message:
    return wire.notification(method, params)


def test_each_kind_of_notification_is_routed_by_what_it_names() -> None:
    sub_meta = {"_meta": {era.SUBSCRIPTION_ID: 5}}
    assert notes.route(
        note("notifications/progress", {"progressToken": 3, "progress": 1}), True
    ) == Route(Kind.PROGRESS, "3")
    assert notes.route(note("notifications/message", {"level": "info", "data": 1}), True) == Route(
        Kind.LOG, "info"
    )
    assert notes.route(note("notifications/cancelled", {"requestId": 9}), True) == Route(
        Kind.CANCELLED, 9
    )
    assert notes.route(note("notifications/tools/list_changed", sub_meta), False) == Route(
        Kind.LISTEN, 5
    )
    assert notes.route(note("notifications/tools/list_changed"), True) == Route(Kind.SESSION)
    # A modern server's notification that names no listen of ours has nobody to go to.
    assert notes.route(note("notifications/tools/list_changed"), False) == Route(Kind.DROP)
    foreign = {"_meta": {era.SUBSCRIPTION_ID: "not-ours"}}
    assert notes.route(note("notifications/tools/list_changed", foreign), False).kind is Kind.DROP


def test_a_log_message_of_no_known_level_is_malformed() -> None:
    """2025-11-25 logging: the level is one of the eight syslog levels; any
    other is junk, named for the operator."""
    route = notes.route(note("notifications/message", {"level": "loud", "data": 1}), True)
    assert route.kind is Kind.MALFORMED and "level" in route.key


def test_a_malformed_notification_is_named_for_the_operator() -> None:
    """A hostile server's junk is dropped with what is wrong with it."""
    route = notes.route(note("notifications/progress", {"progress": "much"}), True)
    assert route.kind is Kind.MALFORMED and isinstance(route.key, str)


def test_progress_and_cancellation_go_back_under_the_clients_ids() -> None:
    """2026-07-28 "Progress": the token is the one the client gave, the rest untouched."""
    upstream = note("notifications/progress", {"progressToken": "gw-1", "progress": 2, "x": 1})
    assert notes.for_client_token(upstream, "mine") == note(
        "notifications/progress", {"progressToken": "mine", "progress": 2, "x": 1}
    )
    cancelled = note("notifications/cancelled", {"requestId": 4, "reason": "late"})
    assert notes.cancelled_for_client(cancelled, "gw-2") == note(
        "notifications/cancelled", {"requestId": "gw-2", "reason": "late"}
    )


def test_a_legacy_client_sees_what_its_session_asked_for() -> None:
    """DESIGN §5.1.5: logging/setLevel once per session; unasked, a legacy
    server's messages pass and a modern server's do not exist."""
    assert notes.legacy_client_wants_log("warning", "error", True)
    assert not notes.legacy_client_wants_log("warning", "info", True)
    assert notes.legacy_client_wants_log(None, "debug", True)
    assert not notes.legacy_client_wants_log(None, "emergency", False)


def test_a_log_message_reaches_only_the_one_modern_call_that_asked() -> None:
    """2026-07-28 logging: a modern client asks per request; with two calls in
    progress the gateway does not guess, and a legacy client's call follows
    its session's level instead."""
    asked = Call("info", MODERN)
    assert notes.log_call([asked], "warning") is asked
    assert notes.log_call([asked], "debug") is None
    assert notes.log_call([asked, Call("info", MODERN)], "warning") is None
    assert notes.log_call([Call(None, MODERN)], "emergency") is None
    assert notes.log_call([Call("debug", LEGACY)], "error") is None
    assert notes.log_call([Call("debug", None)], "error") is None
    assert notes.log_call([], "error") is None


LEVELS = st.sampled_from(era.LOG_LEVELS)


@settings(max_examples=200, deadline=None)
@given(asked=LEVELS, level=LEVELS)
def test_the_filter_passes_exactly_the_levels_at_or_above_the_one_asked(
    asked: str, level: str
) -> None:
    above = era.LOG_LEVELS.index(level) >= era.LOG_LEVELS.index(asked)
    assert notes.legacy_client_wants_log(asked, level, True) is above
    call = Call(asked, MODERN)
    assert (notes.log_call([call], level) is call) is above


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(
    method=st.sampled_from(
        [
            "notifications/progress",
            "notifications/message",
            "notifications/cancelled",
            "notifications/resources/updated",
            "notifications/x",
        ]
    ),
    params=st.one_of(st.none(), st.dictionaries(st.text(max_size=12), JSON, max_size=4)),
    legacy=st.booleans(),
)
def test_routing_never_fails_on_what_a_server_sends(
    method: str, params: dict[str, Any] | None, legacy: bool
) -> None:
    """Any notification a server sends is routed or dropped, never an exception."""
    route = notes.route(note(method, params), legacy)
    assert isinstance(route.kind, Kind)
    if route.kind is Kind.LOG:
        assert route.key in era.LOG_RANK
    if method == "notifications/message" and route.kind is not Kind.LOG:
        assert route.kind is Kind.MALFORMED  # never silently lost
