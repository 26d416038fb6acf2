"""How a routed request travels upstream (DESIGN §5.1.6; 2026-07-28 "Progress";
issue #11 item 2): the one plan the immediate and the waiting path share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import wire
from gateway.core import call_plan
from gateway.core.call_plan import Lease


@dataclass
class Client:
    session: object | None = "legacy"
    features: frozenset[str] = frozenset({"sampling"})

    def declared(self, feature: str) -> bool:
        return self.session is not None and feature in self.features


def lease(
    method: str = "tools/call",
    *,
    server_is_legacy: bool = True,
    client_is_legacy: bool = True,
    client_declared_features: bool = True,
    other_clients: bool = True,
) -> Lease:
    client = Client(
        "legacy" if client_is_legacy else None,
        frozenset({"sampling"}) if client_declared_features else frozenset(),
    )
    return call_plan.lease_for(method, server_is_legacy, client, other_clients)


def test_a_legacy_client_with_client_features_holds_a_shared_session_alone() -> None:
    """DESIGN §5.1.6: on a legacy stdio session nothing says whose a server
    request is, so a call that may be asked for client input runs alone."""
    assert lease() is Lease.EXCLUSIVE
    # Alone on the gateway, or with nothing to be asked, it shares.
    assert lease(other_clients=False) is Lease.SHARED
    assert lease(client_declared_features=False) is Lease.SHARED
    assert lease(client_is_legacy=False) is Lease.SHARED


def test_listing_and_modern_servers_take_no_lease() -> None:
    """A list cannot need a client (it never waits behind a parked call), and a
    modern server asks nothing of the session."""
    for method in call_plan.NO_SERVER_REQUESTS:
        assert lease(method) is Lease.NONE
    assert lease(server_is_legacy=False) is Lease.NONE


def test_a_plan_waits_only_for_what_must_be_awaited() -> None:
    assert not call_plan.plan("tools/call", None, Lease.SHARED, True, False).must_wait
    assert call_plan.plan("tools/call", None, Lease.SHARED, False, False).must_wait
    assert call_plan.plan("tools/call", None, Lease.EXCLUSIVE, True, False).must_wait
    assert not call_plan.plan("tools/list", None, Lease.NONE, False, False).must_wait
    assert call_plan.plan("tools/call", None, Lease.NONE, True, True).must_wait
    for method in call_plan.WAITING_METHODS:
        assert call_plan.plan(method, None, Lease.NONE, True, False).must_wait


def test_the_progress_token_is_swapped_and_nothing_else_touched() -> None:
    """2026-07-28 "Progress": the token is the client's; upstream it is the
    gateway's own, since tokens of different clients may collide."""
    params = {"name": "t", "_meta": {"progressToken": 5, "trace": "x"}}
    plan = call_plan.plan("tools/call", params, Lease.NONE, True, False)
    assert plan.progress_token == 5
    assert call_plan.with_progress_token(params, "gw-1") == {
        "name": "t",
        "_meta": {"progressToken": "gw-1", "trace": "x"},
    }
    assert params == {"name": "t", "_meta": {"progressToken": 5, "trace": "x"}}  # untouched


@settings(max_examples=200, deadline=None)
@given(
    token=st.one_of(
        st.none(),
        st.booleans(),
        st.floats(),
        st.text(max_size=4),
        st.integers(),
        st.lists(st.integers(), max_size=2),
    ),
    meta=st.booleans(),
)
def test_only_a_string_or_integer_is_a_progress_token(token: Any, meta: bool) -> None:
    """2025-11-25 schema ProgressToken: string | integer."""
    params: dict[str, Any] = (
        {"_meta": {"progressToken": token}} if meta else {"progressToken": token}
    )
    found = call_plan.progress_token(params)
    if meta and wire.is_request_id(token):
        assert found == token
    else:
        assert found is None


def test_unsupported_version_is_recognised_by_its_code_only() -> None:
    """2026-07-28: -32022 UnsupportedProtocolVersion."""
    assert call_plan.is_unsupported_version(
        wire.error_response(1, wire.UNSUPPORTED_PROTOCOL_VERSION, "no")
    )
    assert not call_plan.is_unsupported_version(wire.error_response(1, -32000, "no"))
    assert not call_plan.is_unsupported_version(wire.result_response(1, {}))
    assert not call_plan.is_unsupported_version({"jsonrpc": "2.0", "id": 1, "error": "x"})
