"""Which upstream session serves a request, and which sessions may go to make
room for another (DESIGN §5.1.1). Pure decisions over keys and what the
runtime reports about each session; opening and closing is the pool's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from gateway import era
from gateway.core import legacy_handshake
from gateway.core.fair_share import default_share
from gateway.upstream_errors import UpstreamBusy


@dataclass(frozen=True, slots=True)
class SessionKey:
    """DESIGN §5.1.1: sessions are keyed by principal and declared client features."""

    principal: str
    features: frozenset[str]
    # A legacy session of a dual-era server (which also has a modern one):
    # never mistaken for the modern connection of the same principal.
    dual_legacy: bool = False


# Modern servers are stateless: one connection serves every client and principal.
MODERN_KEY = SessionKey("*", frozenset())
# ... but with forwarded credentials each principal has its own connection to a
# modern server. Those cost the server nothing, so max_sessions and
# max_processes (processes, legacy sessions) do not bound them; this does.
MODERN_CONNECTIONS = 1024


def default_key(principal: str, dual_legacy: bool = False) -> SessionKey:
    """The key of a session that declares every feature the gateway bridges
    (the start-up session, and every session when max_sessions is 1)."""
    return SessionKey(principal, era.CLIENT_FEATURES, dual_legacy)


def key_for(
    principal: str,
    client_caps: dict[str, Any],
    *,
    upstream_era: era.Era | None,
    legacy_client: bool = False,
    has_legacy_side: bool = False,
    per_principal_modern: bool = False,
    max_sessions: int,
) -> SessionKey:
    """The session a client's request goes to. A modern server has one
    connection for all (one per principal when credentials are forwarded,
    `per_principal_modern`); a legacy client of a dual-era server, and every
    client of a legacy server, gets a legacy session keyed by principal and
    the client features it declared."""
    dual_legacy = False
    if upstream_era is era.Era.MODERN:
        if not (legacy_client and has_legacy_side):
            return SessionKey(principal, frozenset()) if per_principal_modern else MODERN_KEY
        dual_legacy = True
    if max_sessions == 1:
        return default_key(principal, dual_legacy)
    features = era.CLIENT_FEATURES.intersection(client_caps)
    return SessionKey(principal, features, dual_legacy)


def capabilities_for(features: frozenset[str]) -> dict[str, Any]:
    """The client capabilities a legacy session declares in `initialize`."""
    return {k: v for k, v in legacy_handshake.BRIDGEABLE_CAPABILITIES.items() if k in features}


def adoptable(unclaimed: SessionKey, wanted: SessionKey) -> bool:
    """Whether the start-up session, which no client used yet, may be taken
    over for `wanted`: it declared exactly those features (it holds no
    client's state, so the principal does not matter)."""
    return unclaimed.features == wanted.features and unclaimed.dual_legacy == wanted.dual_legacy


def idle(*, calls_in_flight: int, lease_held: bool, lease_readers: int, relied_on: bool) -> bool:
    """A session may be evicted when nothing runs on it (no call in flight,
    none parked for client input, no lease held) and nothing outside the
    pool relies on it (a listen)."""
    return not calls_in_flight and not lease_held and not lease_readers and not relied_on


class Keyed(Protocol):
    @property
    def key(self) -> SessionKey: ...


S = TypeVar("S", bound=Keyed)


@dataclass(frozen=True, slots=True)
class Bound(Generic[S]):
    """`members` may number at most `limit` once one more session opens."""

    members: list[S]
    limit: int
    what: str

    def evictions(self, is_idle: Callable[[S], bool], recency: Callable[[S], int]) -> list[S]:
        """The least recently used idle members that must go for one more to
        fit; UpstreamBusy when too many of them are busy (a busy session is
        never evicted)."""
        if len(self.members) < self.limit:
            return []
        candidates = sorted((s for s in self.members if is_idle(s)), key=recency)
        if len(self.members) - len(candidates) >= self.limit:
            raise UpstreamBusy(f"all {self.limit} {self.what} are busy")
        return candidates[: len(self.members) - self.limit + 1]


def room_bounds(
    key: SessionKey,
    others: Sequence[S],
    *,
    upstream_era: era.Era | None,
    max_sessions: int,
    max_processes: int,
) -> list[Bound[S]]:
    """The bounds a new session for `key` must fit, in the order they apply,
    given the other live sessions. DESIGN §5.1.1: a legacy session is never
    shared across principals; `max_sessions` bounds one principal's sessions
    (one per declared feature set, and never more than the default share of
    the processes), `max_processes` bounds them all."""
    if upstream_era is era.Era.MODERN and not key.dual_legacy:
        modern = [s for s in others if not s.key.dual_legacy]
        return [Bound(modern, MODERN_CONNECTIONS, "upstream connections")]
    # (A dual-era server's modern connections are not legacy sessions.)
    legacy = [s for s in others if s.key.dual_legacy == key.dual_legacy]
    own = [s for s in legacy if s.key.principal == key.principal]
    # Issue #29 class 4: busy sessions are never evicted, so one principal
    # holding every process would refuse all others; it gets a share.
    own_limit = min(max_sessions, default_share(max_processes))
    return [
        Bound(own, own_limit, "upstream sessions of this client (max_sessions)"),
        Bound(legacy, max_processes, "upstream processes (max_processes)"),
    ]


def evictions(
    bounds: Sequence[Bound[S]], is_idle: Callable[[S], bool], recency: Callable[[S], int]
) -> list[tuple[S, str]]:
    """The sessions to close, each with the bound it goes for, so that one
    more fits every bound. A session evicted for an earlier bound no longer
    counts against a later one (else the per-principal bound's eviction is
    counted again in the total, and another principal's idle session goes
    for nothing). UpstreamBusy before anything is evicted when a bound cannot
    be met."""
    gone: list[S] = []
    out: list[tuple[S, str]] = []
    for bound in bounds:
        left = [s for s in bound.members if not any(s is g for g in gone)]
        for session in Bound(left, bound.limit, bound.what).evictions(is_idle, recency):
            gone.append(session)
            out.append((session, bound.what))
    return out
