"""Which upstream session serves which request (DESIGN §4, §5.1.1, §6): the
era settled once at start-up, sessions opened on demand, the start-up session
handed to the first client that fits it, idle ones evicted past a bound, a
failed upstream tried again after a backoff. Running the connections is the
supervisor's (upstream_supervisor); the probes and handshakes are
era_settlement's; the decisions are the core's (session_choice,
era_settlement, credentials, backoff)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup

from gateway import era, wire
from gateway.backs.http_connector import HttpConnector
from gateway.config import Config
from gateway.core import session_choice
from gateway.core.credentials import CREDENTIALS_KEPT, CredentialStore
from gateway.core.era_settlement import Settlement
from gateway.core.profile import UpstreamProfile
from gateway.core.session_choice import (
    MODERN_CONNECTIONS,
    MODERN_KEY,
    SessionKey,
    capabilities_for,
    default_key,
)
from gateway.runtime.era_settlement import EraSettler
from gateway.runtime.upstream_readiness import Clock, Readiness, Sleep, describe
from gateway.runtime.upstream_session import Corker, ServerMessageHandler, UpstreamSession
from gateway.runtime.upstream_supervisor import (
    Connector,
    LastWords,
    ServerConnection,
    UpstreamSupervisor,
    spawn_process,
)
from gateway.upstream_errors import (
    Contradicted,
    UpstreamBusy,
    UpstreamError,
    UpstreamUnauthorized,
    UpstreamUnavailable,
)

# The names this module has always offered, now at home elsewhere.
__all__ = [
    "CREDENTIALS_KEPT",
    "MODERN_CONNECTIONS",
    "MODERN_KEY",
    "Connector",
    "LastWords",
    "ServerConnection",
    "UpstreamPool",
    "capabilities_for",
]

log = structlog.get_logger("gateway.pool")


class UpstreamPool:
    def __init__(
        self,
        config: Config,
        handler: ServerMessageHandler,
        tap: Callable[[str, wire.Message], None] | None = None,
        connect: Connector | None = None,
        corker: Corker | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = anyio.sleep,
    ) -> None:
        self.config = config
        # An upstream URL means the Streamable HTTP back: its connections share
        # one pooled HTTP client, closed with the pool.
        self._http = HttpConnector.from_config(config) if config.upstream_url else None
        self._connect = connect or self._default_connector()
        self._forward = config.http_forward_authorization and self._http is not None
        self._credentials = CredentialStore()
        # The legacy session opened at start-up until a client uses it: the
        # first principal that needs a session of its features takes it over,
        # rather than have it evicted and another started.
        self._unclaimed: UpstreamSession | None = None
        self.settlement = Settlement()
        self.sessions: dict[SessionKey, UpstreamSession] = {}
        self.supervisor = UpstreamSupervisor(
            config, self._connect_as, handler, self._exited, tap, corker
        )
        self._settler = EraSettler(
            config, self.settlement, self.supervisor, self._retire, self._keep_legacy_session
        )
        self.readiness = Readiness(
            config,
            self.settlement,
            self._credentials,
            self._http,
            forward=self._forward,
            explain=self.supervisor.with_last_words,
            timeout_reason=self._settler.timeout_reason,
            clock=clock,
            sleep=sleep,
        )
        self._lock = anyio.Lock()
        # Told when a session dies unasked (the service re-establishes what
        # lived on it, e.g. resource subscriptions).
        self.on_session_lost: Callable[[UpstreamSession], Awaitable[None]] | None = None
        # Whether something outside the pool still relies on a session (the
        # service's listens): such a session is never evicted.
        self.in_use: Callable[[UpstreamSession], bool] = _nothing_relies_on
        self._recency = itertools.count(1)
        self.restarts = 0

    # -- what is settled -------------------------------------------------
    @property
    def era(self) -> era.Era | None:
        return self.settlement.era

    @property
    def profile(self) -> UpstreamProfile | None:
        return self.settlement.profile

    @property
    def legacy_side(self) -> UpstreamProfile | None:
        """A dual-era server's legacy side (2026-07-28 "Dual-era"; DESIGN §5.3)."""
        return self.settlement.legacy_side

    @property
    def stateless_legacy_side(self) -> UpstreamProfile | None:
        return self.settlement.stateless_legacy_side

    @property
    def probe_report(self) -> dict[str, Any]:
        return self.settlement.probe_report

    @property
    def era_name(self) -> str | None:
        return self.settlement.era_name

    def profile_for(self, legacy_client: bool) -> UpstreamProfile | None:
        return self.settlement.profile_for(legacy_client)

    def path_for(self, legacy_client: bool) -> str:
        return self.settlement.path_for(legacy_client)

    def describe(self) -> dict[str, Any]:
        return self.settlement.describe()

    @property
    def settled(self) -> bool:
        return self.readiness.first_done and self.profile is not None

    @property
    def failure(self) -> str | None:
        return self.readiness.failure

    @property
    def awaiting_credentials(self) -> bool:
        return self.readiness.awaiting_credentials

    @property
    def restart_delay(self) -> float:
        return self.readiness.restart_delay

    def timeout_reason(self) -> str:
        return self._settler.timeout_reason()

    # -- lifecycle -------------------------------------------------------
    async def start(self, tg: TaskGroup) -> None:
        """Settle the upstream's era and open its first session."""
        self.supervisor.tg = tg
        await self.readiness.start(self._open_first)

    async def _open_first(self, principal: str) -> None:
        async with self._lock:
            if self.profile is None:
                session = await self._open(default_key(principal), first=True)
                if self.era is era.Era.LEGACY and not self._forward:
                    self._unclaimed = session

    async def ready(self, principal: str = "local", *, retry: bool = True) -> UpstreamProfile:
        """See Readiness.ready."""
        return await self.readiness.ready(self._open_first, principal, retry)

    def remember_credential(self, principal: str, credential: str) -> None:
        """The Authorization value to forward for `principal` (the HTTP front
        names principals so that one principal has one credential)."""
        self._credentials.remember(principal, credential)

    async def aclose(self) -> None:
        """Stop every upstream (see UpstreamSupervisor.aclose)."""
        self.sessions.clear()
        await self.supervisor.aclose()
        if self._http is not None:
            with anyio.CancelScope(shield=True):
                await self._http.aclose()

    def hurry(self) -> None:
        self.supervisor.hurry()

    def cork(self) -> None:
        self.supervisor.cork()

    def uncork(self) -> None:
        self.supervisor.uncork()

    # -- choosing a session ----------------------------------------------
    def key_for(
        self, principal: str, client_caps: dict[str, Any], legacy_client: bool = False
    ) -> SessionKey:
        return session_choice.key_for(
            principal,
            client_caps,
            upstream_era=self.era,
            legacy_client=legacy_client,
            has_legacy_side=self.legacy_side is not None,
            per_principal_modern=self._forward,
            max_sessions=self.config.max_sessions,
        )

    def session_now(
        self, principal: str, client_caps: dict[str, Any], legacy_client: bool = False
    ) -> UpstreamSession | None:
        """The live session for a call, if it exists already (the fast path)."""
        session = self.sessions.get(self.key_for(principal, client_caps, legacy_client))
        if session is None or not session.alive:
            return None
        return self._claim(session)

    async def session_for(
        self, principal: str, client_caps: dict[str, Any], legacy_client: bool = False
    ) -> UpstreamSession:
        """`legacy_client`: the session is for a legacy client, which a
        dual-era server serves on a legacy session of its own."""
        session = self.session_now(principal, client_caps, legacy_client) if self.settled else None
        if session is not None:
            return session
        await self.ready(principal)
        key = self.key_for(principal, client_caps, legacy_client)
        try:
            with anyio.fail_after(self.config.startup_timeout):
                async with self._lock:
                    session = self.sessions.get(key)
                    if session is not None and session.alive:
                        return self._claim(session)
                    adopted = self._adopt(key)
                    if adopted is not None:
                        return self._claim(adopted)
                    await self._make_room(key)
                    return self._claim(await self._open(key, first=False))
        except TimeoutError:
            reason = await self.supervisor.with_last_words(self.timeout_reason())
            raise UpstreamUnavailable(reason) from None
        except UpstreamError as exc:
            if isinstance(exc, UpstreamBusy | UpstreamUnauthorized):
                raise
            reason = await self.supervisor.with_last_words(describe(exc))
            raise UpstreamUnavailable(reason) from None

    def _claim(self, session: UpstreamSession) -> UpstreamSession:
        if session is self._unclaimed:
            self._unclaimed = None  # a client uses it now: no one else takes it over
        session.last_used = next(self._recency)
        return session

    def _adopt(self, key: SessionKey) -> UpstreamSession | None:
        """The start-up session, re-keyed for `key`, if no client used it yet
        and it fits (session_choice.adoptable; with forwarded credentials it
        holds none of the clients', so never then)."""
        session, self._unclaimed = self._unclaimed, None
        if session is None or not session.alive or not session_choice.adoptable(session.key, key):
            return None
        if self.sessions.get(session.key) is session:
            del self.sessions[session.key]
        log.info("start-up session taken over", principal=key.principal)
        session.key = key
        self.sessions[key] = session
        return session

    def _keep_legacy_session(self, key: SessionKey, session: UpstreamSession) -> None:
        # The legacy check's session stays for the first legacy client.
        self.sessions[key] = session
        if not self._forward:
            self._unclaimed = session

    async def _make_room(self, key: SessionKey) -> None:
        """Past a bound (session_choice.room_bounds) the least recently used
        idle session goes; a busy one never does."""
        live = [s for s in self.sessions.values() if s.alive and s.key != key]
        cfg = self.config
        bounds = session_choice.room_bounds(
            key,
            live,
            upstream_era=self.era,
            max_sessions=cfg.max_sessions,
            max_processes=cfg.max_processes,
        )
        for bound in bounds:
            for session in bound.evictions(self._idle, _recency):
                log.info(
                    "idle upstream session evicted to make room",
                    session=session.label,
                    principal=session.key.principal,
                    bound=bound.what,
                )
                await self._retire(session, "evicted to make room for another session")

    def _idle(self, session: UpstreamSession) -> bool:
        lease = session.lease
        return session_choice.idle(
            calls_in_flight=len(session.pending),
            lease_held=lease.holder is not None,
            lease_readers=lease.readers,
            relied_on=self.in_use(session),
        )

    async def _retire(self, session: UpstreamSession, reason: str) -> None:
        session.close(reason)
        if self.sessions.get(session.key) is session:
            del self.sessions[session.key]
        await self.supervisor.stop(session)

    # -- opening ---------------------------------------------------------
    def _default_connector(self) -> Connector:
        if self._http is not None:
            return self._http.connect
        config = self.config
        return lambda: spawn_process(config)

    async def _connect_as(self, principal: str) -> ServerConnection:
        if self._forward and self._http is not None:
            return await self._http.connect(self._credentials.headers_for(principal))
        return await self._connect()

    async def _open(self, key: SessionKey, *, first: bool) -> UpstreamSession:
        await self.readiness.backoff()
        settler = self._settler
        self.supervisor.opening = []
        try:
            session = await settler.spawn(key)
            if not first and self.era is not None:
                try:
                    if self.era is era.Era.MODERN and not key.dual_legacy:
                        await settler.discover(session, era.NEWEST_MODERN)
                    else:
                        await settler.initialize(session, key)
                except Contradicted as exc:
                    # DESIGN §4: a cached verdict the server contradicts is re-probed
                    # (e.g. the server was upgraded between restarts).
                    log.warning("upstream era changed; probing again", reason=str(exc))
                    await self._retire(session, "era changed")
                    self.settlement.forget()
                    session = await settler.spawn(key)
            if first or self.era is None:
                session = await settler.settle(session, key)
                if self.era is era.Era.MODERN:
                    modern_key = self.key_for(key.principal, {})
                    session.key = modern_key
                    if key.dual_legacy and self.legacy_side is not None:
                        # A legacy client re-probed a dual-era server: the
                        # modern connection stays, and it gets a legacy session.
                        self.sessions[modern_key] = session
                        session = self._adopt(key) or await self._open_legacy_side(key)
                    else:
                        key = modern_key
        except BaseException as exc:
            if not isinstance(exc, UpstreamUnauthorized):
                self.readiness.failed()  # a credential refused is not an outage
            for started in self.supervisor.opening:
                await self._retire(started, "failed to open")
            raise
        finally:
            self.supervisor.opening = []
        self.readiness.healthy()
        self.sessions[key] = session
        return session

    async def _open_legacy_side(self, key: SessionKey) -> UpstreamSession:
        session = await self._settler.spawn(key)
        await self._settler.initialize(session, key)
        return session

    async def _exited(self, session: UpstreamSession, process: ServerConnection) -> None:
        """A connection ended that nobody retired: the server exited."""
        opened = self.sessions.get(session.key) is session
        if opened:
            del self.sessions[session.key]
        code = await process.aclose(self.config.shutdown_grace)
        if opened:
            # (one that dies while opening is counted by _open)
            self.readiness.failed()
        self.restarts += 1
        log.warning(
            "upstream exited; the next request restarts it"
            if opened
            else "upstream exited while it was being started",
            returncode=code,
            reason=session.closed_reason,
        )
        if self.on_session_lost is not None:
            await self.on_session_lost(session)

    async def rediscover(self, principal: str = "*") -> UpstreamProfile:
        """DESIGN §5.2.7: refresh a modern server's profile after a -32022."""
        session = await self.session_for(principal, {})
        async with self._lock:
            await self._settler.discover(session, era.NEWEST_MODERN)
        assert self.profile is not None
        return self.profile


def _nothing_relies_on(session: UpstreamSession) -> bool:
    return False


def _recency(session: UpstreamSession) -> int:
    return session.last_used
