"""Forwarded credentials (gateway.core.credentials), DESIGN §7: "forwarding of
the client's `Authorization` upstream when configured"; a principal's
credential is kept to open its sessions, and only so many are kept."""

from __future__ import annotations

import pytest

from gateway import wire
from gateway.core.credentials import CredentialStore, check_reply
from gateway.core.http_binding import UNAUTHORIZED_REASON
from gateway.upstream_errors import UpstreamUnauthorized


def test_a_principal_has_the_credential_it_brought_last() -> None:
    store = CredentialStore()
    assert store.headers_for("alice") is None and "alice" not in store
    store.remember("alice", "Bearer one")
    store.remember("alice", "Bearer two")
    assert store.headers_for("alice") == {"Authorization": "Bearer two"}
    assert "alice" in store and len(store) == 1


def test_past_the_bound_the_least_recently_given_credential_goes() -> None:
    """Bounded like every other piece of state (DESIGN §6): a principal that
    brings its credential again is the newest, so the oldest other goes."""
    store = CredentialStore(kept=2)
    store.remember("alice", "a")
    store.remember("bob", "b")
    store.remember("alice", "a")
    store.remember("carol", "c")
    assert "bob" not in store
    assert "alice" in store and "carol" in store and len(store) == 2


def refusal(status: int) -> wire.Message:
    return wire.gateway_error(
        1, wire.INVALID_REQUEST, "refused", reason=UNAUTHORIZED_REASON, status=status
    )


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_credential_is_an_unauthorized_upstream(status: int) -> None:
    """Not an outage and not an era verdict: the client sees the refusal."""
    with pytest.raises(UpstreamUnauthorized) as caught:
        check_reply(refusal(status))
    assert caught.value.reply == refusal(status)


def test_other_replies_pass() -> None:
    check_reply({"jsonrpc": "2.0", "id": 1, "result": {}})
    check_reply(wire.error_response(1, wire.INTERNAL_ERROR, "boom"))
    check_reply(refusal(500))
    # A server's own error that looks like ours is not the gateway's refusal.
    check_reply(wire.error_response(1, -32600, "x", {"reason": UNAUTHORIZED_REASON}))
