"""The pure rules of which upstream session serves a request and which may be
evicted (gateway.core.session_choice), DESIGN §5.1.1: "pool them by key =
(principal, normalised client capabilities)", "the default is **one**
process whose session declares every capability the gateway can bridge",
"Sessions are never shared across principals"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import era
from gateway.core import legacy_handshake
from gateway.core.session_choice import (
    MODERN_CONNECTIONS,
    MODERN_KEY,
    Bound,
    SessionKey,
    adoptable,
    capabilities_for,
    default_key,
    evictions,
    idle,
    key_for,
    room_bounds,
)
from gateway.upstream_errors import UpstreamBusy

FEATURES = sorted(era.CLIENT_FEATURES)
principals = st.sampled_from(["local", "alice", "bob"])
# Client capabilities: some the gateway bridges, some it does not know.
client_caps: st.SearchStrategy[dict[str, Any]] = st.dictionaries(
    st.sampled_from([*FEATURES, "experimental", "extensions", "x-unknown"]), st.just({})
)
eras = st.sampled_from([None, era.Era.LEGACY, era.Era.MODERN])


@dataclass
class FakeSession:
    key: SessionKey
    last_used: int = 0
    busy: bool = False


def test_a_modern_server_has_one_connection_for_every_client() -> None:
    """A modern server is stateless: every principal and feature set shares
    MODERN_KEY, unless credentials are forwarded (each its own connection)."""
    caps: dict[str, Any] = {"sampling": {}, "roots": {}}
    shared = key_for("alice", caps, upstream_era=era.Era.MODERN, max_sessions=4)
    own = key_for(
        "alice", caps, upstream_era=era.Era.MODERN, per_principal_modern=True, max_sessions=4
    )
    assert shared == MODERN_KEY
    assert own == SessionKey("alice", frozenset())


def test_a_legacy_client_of_a_dual_era_server_gets_a_legacy_session() -> None:
    """2026-07-28 "Dual-era": legacy clients get the legacy side natively, on a
    session never mistaken for the same principal's modern connection."""
    key = key_for(
        "alice",
        {},
        upstream_era=era.Era.MODERN,
        legacy_client=True,
        has_legacy_side=True,
        max_sessions=1,
    )
    assert key == default_key("alice", dual_legacy=True)
    assert key.dual_legacy and key != key_for(
        "alice", {}, upstream_era=era.Era.MODERN, max_sessions=1
    )
    # Without a legacy side it is served on the modern side.
    assert (
        key_for("alice", {}, upstream_era=era.Era.MODERN, legacy_client=True, max_sessions=1)
        == MODERN_KEY
    )


def test_one_legacy_session_declares_every_bridgeable_feature_by_default() -> None:
    """DESIGN §5.1.1: with max_sessions = 1 a principal's one session declares
    every capability the gateway can bridge, whatever the client declared."""
    key = key_for("bob", {"sampling": {}}, upstream_era=era.Era.LEGACY, max_sessions=1)
    assert key == SessionKey("bob", era.CLIENT_FEATURES)
    assert capabilities_for(key.features) == legacy_handshake.BRIDGEABLE_CAPABILITIES


@given(principals, client_caps, eras, st.booleans(), st.booleans(), st.integers(1, 5))
def test_a_key_names_its_principal_and_only_bridgeable_features(
    principal: str,
    caps: dict[str, Any],
    upstream_era: era.Era | None,
    legacy_client: bool,
    forward: bool,
    max_sessions: int,
) -> None:
    """DESIGN §5.1.1 and §7: "Sessions are never shared across principals"
    (the one modern connection, which holds no client state, aside), and a
    key's features are the bridgeable ones the client declared."""
    key = key_for(
        principal,
        caps,
        upstream_era=upstream_era,
        legacy_client=legacy_client,
        has_legacy_side=True,
        per_principal_modern=forward,
        max_sessions=max_sessions,
    )
    assert key.features <= era.CLIENT_FEATURES
    if key == MODERN_KEY:
        assert upstream_era is era.Era.MODERN and not legacy_client and not forward
        return
    assert key.principal == principal
    if upstream_era is era.Era.MODERN and not legacy_client:
        assert key.features == frozenset() and not key.dual_legacy
        return
    assert key.dual_legacy == (upstream_era is era.Era.MODERN)
    if max_sessions > 1:
        assert key.features == era.CLIENT_FEATURES.intersection(caps)
    else:
        assert key.features == era.CLIENT_FEATURES


def test_the_start_up_session_fits_any_principal_with_its_features() -> None:
    """Issue: alternating principals restarted processes. The unused start-up
    session holds no client's state, so the first principal whose key has
    its features (and its side of a dual-era server) takes it over."""
    startup = default_key("local")
    assert adoptable(startup, default_key("alice"))
    assert not adoptable(startup, SessionKey("alice", frozenset({"sampling"})))
    assert not adoptable(startup, default_key("alice", dual_legacy=True))


def test_a_session_is_idle_only_when_nothing_runs_on_it_or_relies_on_it() -> None:
    """DESIGN §6: a busy session is never evicted: a call in flight, a lease
    held or shared, or a listen relying on it keeps it."""
    assert idle(calls_in_flight=0, lease_held=False, lease_readers=0, relied_on=False)
    assert not idle(calls_in_flight=1, lease_held=False, lease_readers=0, relied_on=False)
    assert not idle(calls_in_flight=0, lease_held=True, lease_readers=0, relied_on=False)
    assert not idle(calls_in_flight=0, lease_held=False, lease_readers=2, relied_on=False)
    assert not idle(calls_in_flight=0, lease_held=False, lease_readers=0, relied_on=True)


def _idle(s: FakeSession) -> bool:
    return not s.busy


def _recency(s: FakeSession) -> int:
    return s.last_used


sessions = st.lists(
    st.builds(
        FakeSession,
        key=st.builds(SessionKey, principals, st.just(frozenset())),
        last_used=st.integers(0, 100),
        busy=st.booleans(),
    ),
    max_size=8,
)


@given(sessions, st.integers(1, 6))
def test_eviction_takes_the_least_recently_used_idle_sessions_and_never_a_busy_one(
    members: list[FakeSession], limit: int
) -> None:
    """DESIGN §5.1.1/§6: past `max_sessions`/`max_processes` "the least
    recently used idle session goes; a busy one never does"; with too many
    busy the client gets upstream-busy."""
    bound = Bound(members, limit, "things")
    busy = [s for s in members if s.busy]
    if len(members) >= limit and len(busy) >= limit:
        with pytest.raises(UpstreamBusy, match=f"all {limit} things are busy"):
            bound.evictions(_idle, _recency)
        return
    evicted = bound.evictions(_idle, _recency)
    assert len(members) - len(evicted) < limit  # one more fits now
    assert len(evicted) == max(0, len(members) - limit + 1)  # and no more go than must
    assert not any(s.busy for s in evicted)
    kept_idle = [s for s in members if not s.busy and s not in evicted]
    assert all(e.last_used <= k.last_used for e in evicted for k in kept_idle)


def test_a_legacy_session_is_bounded_per_principal_then_in_all() -> None:
    """DESIGN §5.1.1: `max_sessions` bounds one principal's sessions,
    `max_processes` all of them, in that order; a dual-era server's modern
    connection is not a legacy session and counts in neither."""
    alice = FakeSession(SessionKey("alice", frozenset({"sampling"})))
    bob = FakeSession(SessionKey("bob", era.CLIENT_FEATURES))
    modern = FakeSession(MODERN_KEY)
    key = SessionKey("alice", era.CLIENT_FEATURES)
    own, every = room_bounds(
        key, [alice, bob], upstream_era=era.Era.LEGACY, max_sessions=2, max_processes=3
    )
    assert (own.members, own.limit) == ([alice], 2)
    assert (every.members, every.limit) == ([alice, bob], 3)
    dual = [FakeSession(default_key("bob", dual_legacy=True)), modern]
    (own, every) = room_bounds(
        default_key("alice", dual_legacy=True),
        dual,
        upstream_era=era.Era.MODERN,
        max_sessions=1,
        max_processes=8,
    )
    assert own.members == [] and every.members == [dual[0]]


def test_a_session_evicted_for_its_principal_is_not_counted_again_in_all() -> None:
    """DESIGN §5.1.1, a defect found splitting the pool: with max_sessions=1
    and max_processes=2, alice opening a second feature set evicted her idle
    session and then, counting it again against max_processes, bob's older
    idle session as well. Only alice's goes."""
    bobs = FakeSession(SessionKey("bob", frozenset()), last_used=1)
    alices = FakeSession(SessionKey("alice", frozenset()), last_used=2)
    bounds = room_bounds(
        SessionKey("alice", frozenset({"sampling"})),
        [bobs, alices],
        upstream_era=era.Era.LEGACY,
        max_sessions=1,
        max_processes=2,
    )
    gone = evictions(bounds, lambda s: not s.busy, lambda s: s.last_used)
    assert gone == [(alices, "upstream sessions of this client (max_sessions)")]


def test_no_session_is_evicted_when_a_later_bound_cannot_be_met() -> None:
    """A busy session is never evicted; when the total cannot be met, the
    caller gets UpstreamBusy before anything is closed for nothing."""
    alices = FakeSession(SessionKey("alice", frozenset()), last_used=2)
    bobs = FakeSession(SessionKey("bob", frozenset()), busy=True)
    carols = FakeSession(SessionKey("carol", frozenset()), busy=True)
    bounds = room_bounds(
        SessionKey("alice", frozenset({"sampling"})),
        [alices, bobs, carols],
        upstream_era=era.Era.LEGACY,
        max_sessions=2,
        max_processes=2,
    )
    with pytest.raises(UpstreamBusy):
        evictions(bounds, lambda s: not s.busy, lambda s: s.last_used)


def test_modern_connections_have_a_bound_of_their_own() -> None:
    """Forwarded credentials give each principal a modern connection: those
    cost the server nothing, so only MODERN_CONNECTIONS bounds them."""
    others = [FakeSession(SessionKey("bob", frozenset())), FakeSession(default_key("b", True))]
    (bound,) = room_bounds(
        SessionKey("alice", frozenset()),
        others,
        upstream_era=era.Era.MODERN,
        max_sessions=1,
        max_processes=1,
    )
    assert bound.members == [others[0]] and bound.limit == MODERN_CONNECTIONS
