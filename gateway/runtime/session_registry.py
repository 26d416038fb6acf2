"""The open upstream sessions by key (DESIGN §5.1.1): claiming one for a
client, handing the start-up session to the first client that fits it, and
evicting idle ones past a bound. The rules are session_choice's."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import structlog

from gateway.config import Config
from gateway.core import session_choice
from gateway.core.era_settlement import Settlement
from gateway.core.session_choice import SessionKey
from gateway.runtime.upstream_session import UpstreamSession
from gateway.runtime.upstream_supervisor import UpstreamSupervisor

log = structlog.get_logger("gateway.pool")


def _nothing_relies_on(session: UpstreamSession) -> bool:
    return False


def _recency(session: UpstreamSession) -> int:
    return session.last_used


class SessionRegistry:
    def __init__(
        self, config: Config, settlement: Settlement, supervisor: UpstreamSupervisor
    ) -> None:
        self.config = config
        self._settlement = settlement
        self._supervisor = supervisor
        self.sessions: dict[SessionKey, UpstreamSession] = {}
        # The legacy session opened at start-up until a client uses it: the
        # first principal that needs a session of its features takes it over,
        # rather than have it evicted and another started.
        self.unclaimed: UpstreamSession | None = None
        # Whether something outside the pool still relies on a session (the
        # service's listens): such a session is never evicted.
        self.in_use: Callable[[UpstreamSession], bool] = _nothing_relies_on
        self._recency = itertools.count(1)

    def live(self, key: SessionKey) -> UpstreamSession | None:
        session = self.sessions.get(key)
        return session if session is not None and session.alive else None

    def claim(self, session: UpstreamSession) -> UpstreamSession:
        """A client uses `session` now: no one else takes it over, and it is
        the most recently used."""
        if session is self.unclaimed:
            self.unclaimed = None
        session.last_used = next(self._recency)
        return session

    def adopt(self, key: SessionKey) -> UpstreamSession | None:
        """The start-up session, re-keyed for `key`, if no client used it yet
        and it fits (session_choice.adoptable; with forwarded credentials it
        holds none of the clients', so it is never unclaimed then)."""
        session, self.unclaimed = self.unclaimed, None
        if session is None or not session.alive or not session_choice.adoptable(session.key, key):
            return None
        self.forget(session)
        log.info("start-up session taken over", principal=key.principal)
        session.key = key
        self.sessions[key] = session
        return session

    def forget(self, session: UpstreamSession) -> bool:
        """Take `session` out of the registry; whether it was in."""
        if self.sessions.get(session.key) is session:
            del self.sessions[session.key]
            return True
        return False

    async def retire(self, session: UpstreamSession, reason: str) -> None:
        session.close(reason)
        self.forget(session)
        await self._supervisor.stop(session)

    async def make_room(self, key: SessionKey) -> None:
        """Past a bound (session_choice.room_bounds) the least recently used
        idle session goes; a busy one never does."""
        others = [s for s in self.sessions.values() if s.alive and s.key != key]
        cfg = self.config
        bounds = session_choice.room_bounds(
            key,
            others,
            upstream_era=self._settlement.era,
            max_sessions=cfg.max_sessions,
            max_processes=cfg.max_processes,
        )
        for session, bound in session_choice.evictions(bounds, self._idle, _recency):
            log.info(
                "idle upstream session evicted to make room",
                session=session.label,
                principal=session.key.principal,
                bound=bound,
            )
            await self.retire(session, "evicted to make room for another session")

    def _idle(self, session: UpstreamSession) -> bool:
        lease = session.lease
        return session_choice.idle(
            calls_in_flight=len(session.pending),
            lease_held=lease.holder is not None,
            lease_readers=lease.readers,
            relied_on=self.in_use(session),
        )
