"""Which upstream session serves which request (DESIGN §4, §5.1.1, §6): the
era settled once at start-up, sessions opened on demand, the start-up session
handed to the first client that fits it, idle ones evicted past a bound, a
failed upstream tried again after a backoff. Running the connections is the
supervisor's (upstream_supervisor); the probes and handshakes are
era_settlement's; the decisions are the core's (session_choice,
era_settlement, credentials, backoff)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import structlog
from anyio.abc import TaskGroup

from gateway import era, wire
from gateway.config import Config
from gateway.core import session_choice
from gateway.core.credentials import CredentialStore
from gateway.core.era_settlement import Settlement
from gateway.core.profile import UpstreamProfile
from gateway.core.session_choice import SessionKey, default_key
from gateway.runtime.era_settlement import EraSettler
from gateway.runtime.session_registry import SessionRegistry
from gateway.runtime.upstream_channel import Corker
from gateway.runtime.upstream_readiness import Clock, Readiness, Sleep, describe
from gateway.runtime.upstream_session import ServerMessageHandler, UpstreamSession
from gateway.runtime.upstream_supervisor import (
    Connector,
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

if TYPE_CHECKING:
    from gateway.backs.http_connector import HttpConnector

# Imported from here by the service; at home in the core and the supervisor.

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
        self._http = _http_connector(config) if config.upstream_url else None
        self._connect = connect or self._default_connector()
        self._forward = config.http_forward_authorization and self._http is not None
        self._credentials = CredentialStore()
        self.settlement = Settlement()
        self.supervisor = UpstreamSupervisor(
            config, self._connect_as, handler, self._exited, tap, corker
        )
        self.registry = SessionRegistry(config, self.settlement, self.supervisor)
        self._settler = EraSettler(
            config,
            self.settlement,
            self.supervisor,
            retire=self.registry.retire,
            keep_legacy_session=self._keep_legacy_session,
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
        self.restarts = 0
        # Why a settled upstream is down now (its server exited and nothing
        # runs; an HTTP upstream stopped accepting connections), until it
        # serves again. /readyz follows it (UpstreamWatch).
        self.down: str | None = None
        self.went_down = anyio.Event()

    @property
    def http(self) -> HttpConnector | None:
        """The Streamable HTTP back's connector (None: a command)."""
        return self._http

    @property
    def sessions(self) -> dict[SessionKey, UpstreamSession]:
        return self.registry.sessions

    @property
    def in_use(self) -> Callable[[UpstreamSession], bool]:
        """Whether something outside the pool relies on a session (never evicted)."""
        return self.registry.in_use

    @in_use.setter
    def in_use(self, relies_on: Callable[[UpstreamSession], bool]) -> None:
        self.registry.in_use = relies_on

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
        return self.settlement.profile is not None and self.readiness.first_done

    @property
    def up(self) -> bool:
        """Settled and not known to be down: what /readyz reports."""
        return self.settled and self.down is None

    @property
    def failure(self) -> str | None:
        return self.readiness.failure

    def mark_down(self, reason: str) -> None:
        if self.down is None:
            log.warning("upstream down", reason=reason)
        self.down = reason
        self.went_down.set()

    def mark_up(self) -> None:
        if self.down is not None:
            log.info("upstream up again")
            self.down = None
        if self.went_down.is_set():
            self.went_down = anyio.Event()

    @property
    def awaiting_credentials(self) -> bool:
        return self.readiness.awaiting_credentials

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
                    self.registry.unclaimed = session

    async def ready(self, principal: str = "local", *, retry: bool = True) -> UpstreamProfile:
        """See Readiness.ready."""
        return await self.readiness.ready(self._open_first, principal, retry)

    async def revive(self) -> None:
        """Bring the upstream back without a client (UpstreamWatch): settle its
        era if that never succeeded, else start the start-up session again
        after its server exited (an HTTP upstream: see that it accepts
        connections again). Each attempt waits out the backoff; UpstreamError
        when it fails."""
        await self.ready()
        if self.down is None:
            return
        if self._http is not None:
            if await self._http.reachable(self.config.probe_timeout):
                self.mark_up()
            return
        async with self._lock:
            if any(s.alive for s in self.sessions.values()):
                self.mark_up()  # a client's request started it again meanwhile
                return
            key = self.key_for("local", {})
            await self.readiness.backoff()
            try:
                with anyio.fail_after(self.config.startup_timeout):
                    session = await self._open(key, first=False)
            except (TimeoutError, UpstreamError) as exc:
                why = describe(exc) if isinstance(exc, UpstreamError) else self.timeout_reason()
                reason = await self.supervisor.with_last_words(why)
                log.error("upstream did not start again", reason=reason)
                self.mark_down(reason)
                raise UpstreamUnavailable(reason) from None
            if self.era is era.Era.LEGACY and not self._forward:
                self.registry.unclaimed = session  # for the first client that fits

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
        settlement = self.settlement
        return session_choice.key_for(
            principal,
            client_caps,
            upstream_era=settlement.era,
            legacy_client=legacy_client,
            has_legacy_side=settlement.legacy_side is not None,
            per_principal_modern=self._forward,
            max_sessions=self.config.max_sessions,
        )

    def session_now(
        self, principal: str, client_caps: dict[str, Any], legacy_client: bool = False
    ) -> UpstreamSession | None:
        """The live session for a call, if it exists already (no waiting)."""
        registry = self.registry
        session = registry.sessions.get(self.key_for(principal, client_caps, legacy_client))
        if session is None or session.closed_reason is not None:  # (not alive; every call)
            return None
        return registry.claim(session)

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
                    registry = self.registry
                    session = registry.live(key) or registry.adopt(key)
                    if session is None:
                        await registry.make_room(key)
                        session = await self._open(key, first=False)
                    return registry.claim(session)
        except TimeoutError:
            reason = await self.supervisor.with_last_words(self.timeout_reason())
            raise UpstreamUnavailable(reason) from None
        except UpstreamError as exc:
            if isinstance(exc, UpstreamBusy | UpstreamUnauthorized):
                raise
            reason = await self.supervisor.with_last_words(describe(exc))
            raise UpstreamUnavailable(reason) from None

    def _keep_legacy_session(self, key: SessionKey, session: UpstreamSession) -> None:
        # The legacy check's session stays for the first legacy client.
        self.sessions[key] = session
        if not self._forward:
            self.registry.unclaimed = session

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
                    await self.registry.retire(session, "era changed")
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
                        session = self.registry.adopt(key) or await self._open_legacy_side(key)
                    else:
                        key = modern_key
        except BaseException as exc:
            if not isinstance(exc, UpstreamUnauthorized):
                self.readiness.failed()  # a credential refused is not an outage
            for started in self.supervisor.opening:
                await self.registry.retire(started, "failed to open")
            raise
        finally:
            self.supervisor.opening = []
        self.readiness.healthy()
        self.mark_up()
        self.sessions[key] = session
        return session

    async def _open_legacy_side(self, key: SessionKey) -> UpstreamSession:
        session = await self._settler.spawn(key)
        await self._settler.initialize(session, key)
        return session

    async def _exited(self, session: UpstreamSession, process: ServerConnection) -> None:
        """A connection ended that nobody retired: the server exited."""
        opened = self.registry.forget(session)
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
        if opened and not any(s.alive for s in self.sessions.values()):
            self.mark_down(
                f"the upstream exited (returncode {code})"
                if code is not None
                else "the upstream's connection ended"
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


def _http_connector(config: Config) -> HttpConnector:
    """The HTTP back, imported only for an HTTP upstream: a gateway in front
    of a command does not carry its modules (and h11) in memory."""
    from gateway.backs.http_connector import HttpConnector

    return HttpConnector.from_config(config)
