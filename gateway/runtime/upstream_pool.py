"""The upstream server processes: spawning, era probing, legacy handshakes,
restarts with backoff, and which session serves which request (DESIGN §4,
§5.1.1, §6)."""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

import anyio
import structlog
from anyio.abc import TaskGroup

from gateway import era, wire
from gateway.backs.http_connector import HttpConnector
from gateway.backs.stdio_back import StdioServerProcess, stderr_summary
from gateway.config import Config
from gateway.core import backoff, era_probe, http_binding, legacy_handshake
from gateway.core.profile import UpstreamProfile
from gateway.runtime.upstream_session import (
    Corker,
    ServerMessageHandler,
    SessionKey,
    UpstreamSession,
)
from gateway.upstream_errors import (
    Contradicted,
    UpstreamBusy,
    UpstreamError,
    UpstreamGone,
    UpstreamTimeout,
    UpstreamUnauthorized,
    UpstreamUnavailable,
)

log = structlog.get_logger("gateway.pool")

# After an outage, how long the reachability check of an HTTP upstream may
# take before the backoff applies after all.
REACHABLE_TIMEOUT = 1.0


# Modern servers are stateless: one connection serves every client and principal.
MODERN_KEY = SessionKey("*", frozenset())
# With [http] forward_authorization, a principal's credential is kept to open
# its sessions (never logged or written anywhere); the oldest go first.
CREDENTIALS_KEPT = 4096
# ... and each credential has its own connection to a modern server. Those
# cost the server nothing, so max_sessions and max_processes (processes,
# legacy sessions) do not bound them; this does.
MODERN_CONNECTIONS = 1024


class ServerConnection(Protocol):
    """A started upstream server: the stdio back's process, or a test's script."""

    pid: int
    tap: Callable[[str, wire.Message], None] | None

    async def send(self, msg: wire.Message) -> None: ...
    def send_nowait(self, msg: wire.Message) -> None: ...
    def cork(self) -> None: ...
    def uncork(self) -> None: ...
    async def receive_batch(self) -> list[wire.Message]: ...
    async def run_background(self) -> None: ...
    async def aclose(self, grace: float = ...) -> int | None: ...
    def terminate(self) -> None: ...


Connector = Callable[[], Awaitable[ServerConnection]]
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


@runtime_checkable
class LastWords(Protocol):
    """A connection that keeps what the server said on stderr (the stdio back)."""

    async def last_words(self, timeout: float = ...) -> list[str]: ...


def capabilities_for(features: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in legacy_handshake.BRIDGEABLE_CAPABILITIES.items() if k in features}


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
        # Injected so that tests drive the backoff without waiting.
        self.clock = clock
        self.sleep = sleep
        self._corker = corker
        self._tap = tap
        # An upstream URL means the Streamable HTTP back: its connections share
        # one pooled HTTP client, closed with the pool.
        self._http = HttpConnector.from_config(config) if config.upstream_url else None
        self._connect = connect or (self._http.connect if self._http else self._spawn_process)
        self._forward = config.http_forward_authorization and self._http is not None
        self._credentials: OrderedDict[str, str] = OrderedDict()
        # The upstream refused the credential it was probed with; with
        # forwarding, the next client that brings one is probed with it.
        self.awaiting_credentials = False
        self._refusal: UpstreamUnauthorized | None = None
        # The legacy session opened at start-up until a client uses it: the
        # first principal that needs a session of its features takes it over,
        # rather than have it evicted and another started.
        self._unclaimed: UpstreamSession | None = None
        self._handler = handler
        self._tg: TaskGroup | None = None
        self.era: era.Era | None = None
        self.profile: UpstreamProfile | None = None
        # A dual-era server (2026-07-28 "Dual-era"; DESIGN §5.3): `era` is
        # modern and `profile` its modern side; this is its legacy side, which
        # legacy clients get natively on legacy sessions of their own.
        self.legacy_side: UpstreamProfile | None = None
        # A dual-era server's legacy side that keeps no sessions: reported,
        # but its legacy clients are served on the modern side.
        self.stateless_legacy_side: UpstreamProfile | None = None
        self.probe_report: dict[str, Any] = {}
        self.sessions: dict[SessionKey, UpstreamSession] = {}
        self._processes: dict[UpstreamSession, ServerConnection] = {}
        self._lock = anyio.Lock()
        self._ready = anyio.Event()
        self._failure: str | None = None
        # Failed starts and crashes since the upstream last answered its
        # handshake; the backoff grows with them.
        self._failures = 0
        self._last_failure = 0.0
        # Start-up attempts made; a request that waited for one takes its verdict.
        self._attempts = 0
        self._settling = anyio.Lock()
        # What opening a session is waiting for now, for the timeout's message.
        self._stage = "the start-up probe"
        self._last_process: ServerConnection | None = None
        self._opening: list[UpstreamSession] = []
        self._closing: list[ServerConnection] = []
        # Told when a session dies unasked (the service re-establishes what
        # lived on it, e.g. resource subscriptions).
        self.on_session_lost: Callable[[UpstreamSession], Awaitable[None]] | None = None
        # Whether something outside the pool still relies on a session (the
        # service's listens): such a session is never evicted.
        self.in_use: Callable[[UpstreamSession], bool] = _nothing_relies_on
        self._recency = itertools.count(1)
        self._hurried = False
        self.restarts = 0

    # -- lifecycle -------------------------------------------------------
    async def start(self, tg: TaskGroup) -> None:
        """Settle the upstream's era and open its first session."""
        self._tg = tg
        try:
            await self._settle_first()
        finally:
            self._ready.set()

    async def _settle_first(self, principal: str = "local") -> None:
        try:
            with anyio.fail_after(self.config.startup_timeout):
                async with self._lock:
                    if self.profile is None:
                        session = await self._open(self._default_key(principal), first=True)
                        if self.era is era.Era.LEGACY and not self._forward:
                            self._unclaimed = session
            self._failure = None
            self._refusal = None
            self.awaiting_credentials = False
        except UpstreamUnauthorized as exc:
            # Not an outage: the server wants a credential. Forwarding brings
            # the clients' own (tried with the next one at once); without it,
            # [upstream] headers must carry one, and retrying will not help.
            self._failure = f"the upstream refused the gateway's credential: {exc}"
            self._refusal = exc
            self.awaiting_credentials = self._forward
            if not self._forward:
                self._note_failure()
            log.error("upstream refused the credential", reason=str(exc))
        except TimeoutError:
            # (_open counted the failure for the backoff.)
            self._failure = await self._with_last_words(self.timeout_reason())
            log.error("upstream unavailable", reason=self._failure)
        except UpstreamError as exc:
            self._failure = await self._with_last_words(_describe(exc))
            log.error("upstream unavailable", reason=self._failure)
        finally:
            self._attempts += 1

    def timeout_reason(self) -> str:
        """Which bound ran out while a session was being opened, and on what."""
        return (
            f"no answer to {self._stage} within startup_timeout={self.config.startup_timeout:g} s"
        )

    async def _with_last_words(self, reason: str) -> str:
        """`reason`, with the end of the server's stderr if it said something
        (a server that dies at start usually says why there)."""
        process = self._last_process
        if not isinstance(process, LastWords):
            return reason
        summary = stderr_summary(await process.last_words())
        if not summary or summary in reason:
            return reason
        return f"{reason}; its stderr ends: {summary}"

    @property
    def failure(self) -> str | None:
        return self._failure

    async def ready(self, principal: str = "local", *, retry: bool = True) -> UpstreamProfile:
        """The upstream's profile once its era is settled. `retry`: after a
        failed start, try again if the backoff allows (a caller that waited
        for an attempt takes that attempt's verdict instead)."""
        seen = self._attempts
        await self._ready.wait()
        if self.profile is None and retry:
            async with self._settling:  # one attempt at a time
                if self.profile is None and (
                    (self.awaiting_credentials and principal in self._credentials)
                    or (self._attempts == seen and await self._retry_allowed())
                ):
                    # An outage is never a verdict (DESIGN §4): a sidecar that
                    # started before its upstream tries again, at most once per
                    # backoff delay, or at once when it can be reached again;
                    # a refused credential is tried again with this client's.
                    await self._settle_first(principal)
        if self.profile is None:
            if self._refusal is not None:
                raise UpstreamUnauthorized(self._refusal.reply)
            raise UpstreamUnavailable(self._failure or "upstream never became ready")
        return self.profile

    def remember_credential(self, principal: str, credential: str) -> None:
        """The Authorization value to forward for `principal` (the HTTP front
        names principals so that one principal has one credential)."""
        self._credentials[principal] = credential
        self._credentials.move_to_end(principal)
        if len(self._credentials) > CREDENTIALS_KEPT:
            self._credentials.popitem(last=False)

    # -- backoff -----------------------------------------------------------
    @property
    def restart_delay(self) -> float:
        """The backoff after the failures so far (0 once the upstream answered)."""
        cfg = self.config
        return backoff.delay(self._failures, cfg.restart_backoff_initial, cfg.restart_backoff_max)

    def _note_failure(self) -> None:
        self._failures += 1
        self._last_failure = self.clock()

    def _note_healthy(self) -> None:
        # The upstream started and answered its probe or handshake: whatever
        # failed before is over, and the next failure starts the backoff afresh.
        self._failures = 0

    def _backoff_left(self) -> float:
        return self._last_failure + self.restart_delay - self.clock()

    async def _reachable(self) -> bool:
        """An HTTP upstream that accepts a connection again is tried at once;
        a command has no such check (its start is the check)."""
        return self._http is not None and await self._http.reachable(
            min(REACHABLE_TIMEOUT, self.config.probe_timeout)
        )

    async def _retry_allowed(self) -> bool:
        return self._backoff_left() <= 0 or await self._reachable()

    async def _backoff(self) -> None:
        wait = self._backoff_left()
        if wait <= 0 or await self._reachable():
            return
        log.info("restarting upstream after backoff", delay=round(wait, 3))
        await self.sleep(wait)

    async def aclose(self) -> None:
        """Stop every upstream: close its stdin, wait `exit_grace`, then
        SIGTERM, then SIGKILL (2026-07-28 stdio "Shutdown")."""
        sessions = list(self._processes.items())
        self._processes.clear()
        self.sessions.clear()
        self._closing = [process for _, process in sessions]
        if self._hurried:
            self.hurry()
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for session, process in sessions:
                    session.close("gateway shutting down")
                    tg.start_soon(process.aclose, self.config.upstream_exit_grace)
            if self._http is not None:
                await self._http.aclose()

    def hurry(self) -> None:
        """Shutdown must finish now (a second signal): terminate the upstreams
        without waiting for them to notice their closed stdin."""
        self._hurried = True
        for process in [*self._closing, *self._processes.values()]:
            process.terminate()

    def cork(self) -> None:
        for process in self._processes.values():
            process.cork()

    def uncork(self) -> None:
        for process in list(self._processes.values()):
            process.uncork()

    # -- choosing a session ----------------------------------------------
    def _default_key(self, principal: str, dual_legacy: bool = False) -> SessionKey:
        return SessionKey(principal, era.CLIENT_FEATURES, dual_legacy)

    def key_for(
        self, principal: str, client_caps: dict[str, Any], legacy_client: bool = False
    ) -> SessionKey:
        dual_legacy = False
        if self.era is era.Era.MODERN:
            if not (legacy_client and self.legacy_side is not None):
                return SessionKey(principal, frozenset()) if self._forward else MODERN_KEY
            dual_legacy = True
        if self.config.max_sessions == 1:
            return self._default_key(principal, dual_legacy)
        features = era.CLIENT_FEATURES.intersection(client_caps)
        return SessionKey(principal, features, dual_legacy)

    def profile_for(self, legacy_client: bool) -> UpstreamProfile | None:
        """The side of the server a client meets: a legacy client of a
        dual-era server gets its legacy side, everyone else `profile`."""
        if legacy_client and self.legacy_side is not None:
            return self.legacy_side
        return self.profile

    @property
    def era_name(self) -> str | None:
        """The upstream's era as reported: modern, legacy or dual."""
        if self.legacy_side is not None or self.stateless_legacy_side is not None:
            return "dual"
        return self.era.value if self.era is not None else None

    def path_for(self, legacy_client: bool) -> str:
        """The era path a client's calls take, e.g. "legacy->legacy(dual)"."""
        client = "legacy" if legacy_client else "modern"
        profile = self.profile_for(legacy_client)
        if profile is None:
            return f"{client}->upstream"
        served = profile.era.value + ("(dual)" if self.era_name == "dual" else "")
        return f"{client}->{served}"

    def describe(self) -> dict[str, Any]:
        """The `probe` command's and /readyz's view of the upstream."""
        assert self.profile is not None
        legacy_side = self.legacy_side or self.stateless_legacy_side
        if legacy_side is None:
            return self.profile.describe()
        modern = {k: v for k, v in self.profile.describe().items() if k != "era"}
        legacy = {k: v for k, v in legacy_side.describe().items() if k != "era"}
        # Whether legacy clients get the legacy side natively (see _check_legacy).
        legacy["sessions"] = self.legacy_side is not None
        return {"era": "dual", "modern": modern, "legacy": legacy}

    @property
    def settled(self) -> bool:
        return self._ready.is_set() and self.profile is not None

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
            raise UpstreamUnavailable(await self._with_last_words(self.timeout_reason())) from None
        except UpstreamError as exc:
            if isinstance(exc, UpstreamBusy | UpstreamUnauthorized):
                raise
            raise UpstreamUnavailable(await self._with_last_words(_describe(exc))) from None

    def _claim(self, session: UpstreamSession) -> UpstreamSession:
        if session is self._unclaimed:
            self._unclaimed = None  # a client uses it now: no one else takes it over
        session.last_used = next(self._recency)
        return session

    def _adopt(self, key: SessionKey) -> UpstreamSession | None:
        """The start-up session, re-keyed for `key`, if no client used it yet
        and it declared exactly `key`'s features (it holds no client's state;
        with forwarded credentials it holds none of theirs, so never then)."""
        session, self._unclaimed = self._unclaimed, None
        if (
            session is None
            or not session.alive
            or session.key.features != key.features
            or session.key.dual_legacy != key.dual_legacy
        ):
            return None
        if self.sessions.get(session.key) is session:
            del self.sessions[session.key]
        log.info("start-up session taken over", principal=key.principal)
        session.key = key
        self.sessions[key] = session
        return session

    async def _make_room(self, key: SessionKey) -> None:
        """DESIGN §5.1.1: a legacy session is never shared across principals.
        `max_sessions` bounds one principal's sessions (one per declared
        feature set); `max_processes` bounds them all. Past a bound the least
        recently used idle session goes; a busy one never does."""
        if self.era is era.Era.MODERN and not key.dual_legacy:
            modern = [s for s in self._live(key) if not s.key.dual_legacy]
            await self._bound(modern, MODERN_CONNECTIONS, "upstream connections")
            return
        cfg = self.config
        # (A dual-era server's modern connections are not legacy sessions.)
        legacy = [s for s in self._live(key) if s.key.dual_legacy == key.dual_legacy]
        own = [s for s in legacy if s.key.principal == key.principal]
        await self._bound(own, cfg.max_sessions, "upstream sessions of this client (max_sessions)")
        await self._bound(legacy, cfg.max_processes, "upstream processes (max_processes)")

    def _live(self, key: SessionKey) -> list[UpstreamSession]:
        return [s for s in self.sessions.values() if s.alive and s.key != key]

    async def _bound(self, sessions: list[UpstreamSession], limit: int, what: str) -> None:
        if len(sessions) < limit:
            return
        idle = sorted((s for s in sessions if self._idle(s)), key=lambda s: s.last_used)
        if len(sessions) - len(idle) >= limit:
            raise UpstreamBusy(f"all {limit} {what} are busy")
        for session in idle[: len(sessions) - limit + 1]:
            log.info(
                "idle upstream session evicted to make room",
                session=session.label,
                principal=session.key.principal,
                bound=what,
            )
            await self._retire(session, "evicted to make room for another session")

    def _idle(self, session: UpstreamSession) -> bool:
        """Nothing runs on it (no call in flight, none parked for client
        input, no lease held) and nothing outside relies on it."""
        lease = session.lease
        return (
            not session.pending
            and lease.holder is None
            and not lease.readers
            and not self.in_use(session)
        )

    async def _retire(self, session: UpstreamSession, reason: str) -> None:
        session.close(reason)
        if self.sessions.get(session.key) is session:
            del self.sessions[session.key]
        process = self._processes.pop(session, None)
        if process is not None:
            await process.aclose(self.config.upstream_exit_grace)

    # -- opening ---------------------------------------------------------
    async def _open(self, key: SessionKey, *, first: bool) -> UpstreamSession:
        await self._backoff()
        # Every process this attempt starts (the probe may need a second one):
        # all of them go if it fails.
        self._opening = []
        try:
            session = await self._spawn(key)
            if not first and self.era is not None:
                try:
                    if self.era is era.Era.MODERN and not key.dual_legacy:
                        await self._discover(session, era.NEWEST_MODERN)
                    else:
                        await self._initialize(session, key)
                except Contradicted as exc:
                    # DESIGN §4: a cached verdict the server contradicts is re-probed
                    # (e.g. the server was upgraded between restarts).
                    log.warning("upstream era changed; probing again", reason=str(exc))
                    await self._retire(session, "era changed")
                    self.era = None
                    self.profile = None
                    self.legacy_side = None
                    self.stateless_legacy_side = None
                    session = await self._spawn(key)
            if first or self.era is None:
                session = await self._settle_era(session, key)
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
                self._note_failure()  # a credential refused is not an outage
            for started in self._opening:
                await self._retire(started, "failed to open")
            raise
        finally:
            self._opening = []
        self._note_healthy()
        self.sessions[key] = session
        return session

    async def _spawn_process(self) -> ServerConnection:
        cfg = self.config
        return await StdioServerProcess.spawn(
            cfg.command,
            max_bytes=cfg.max_message_bytes,
            env=cfg.env or None,
            cwd=cfg.cwd,
        )

    async def _connect_as(self, principal: str) -> ServerConnection:
        if self._forward and self._http is not None:
            credential = self._credentials.get(principal)
            return await self._http.connect({"Authorization": credential} if credential else None)
        return await self._connect()

    async def _spawn(self, key: SessionKey) -> UpstreamSession:
        self._stage = "the start-up probe"
        process = await self._connect_as(key.principal)
        self._last_process = process
        process.tap = self._tap
        session = UpstreamSession(process, key, label=f"pid {process.pid}")
        self._processes[session] = process
        self._opening.append(session)
        assert self._tg is not None
        self._tg.start_soon(process.run_background)
        self._tg.start_soon(self._supervise, session, process)
        self._tg.start_soon(session.run_sweeper, _sweep_interval(self.config.request_timeout))
        return session

    async def _supervise(self, session: UpstreamSession, process: ServerConnection) -> None:
        await session.run_reader(self._handler, self._corker)
        if self._processes.pop(session, None) is None:
            return  # retired on purpose
        opened = self.sessions.get(session.key) is session
        if opened:
            del self.sessions[session.key]
        code = await process.aclose(self.config.shutdown_grace)
        if opened:
            self._note_failure()  # (one that dies while opening is counted by _open)
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

    async def _open_legacy_side(self, key: SessionKey) -> UpstreamSession:
        session = await self._spawn(key)
        await self._initialize(session, key)
        return session

    async def _settle_era(self, session: UpstreamSession, key: SessionKey) -> UpstreamSession:
        started = time.monotonic()
        self.legacy_side = None
        self.stateless_legacy_side = None
        pinned = self.config.upstream_era
        legacy_reason: str | None = None
        if pinned == "legacy":
            verdict = era_probe.ProbeVerdict(era.Era.LEGACY, reason="pinned by config")
        elif pinned == "modern":
            verdict = era_probe.ProbeVerdict(era.Era.MODERN, reason="pinned by config")
        else:
            verdict = await self._probe(session)
            if verdict.retry_version is not None:
                verdict = await self._probe(session, verdict.retry_version)
        probe_seconds = time.monotonic() - started
        if verdict.era is era.Era.MODERN:
            version = verdict.retry_version or era.NEWEST_MODERN
            if verdict.discover is not None:
                self.profile = UpstreamProfile.from_discover(verdict.discover, version)
            else:
                await self._discover(session, version)
            session.profile = self.profile
            self.era = era.Era.MODERN
            if pinned != "modern":
                legacy_reason = await self._check_legacy(key.principal, probe_seconds)
        else:
            self.era = era.Era.LEGACY
            if not session.alive:
                # DESIGN §4: a process that dies during the probe is restarted
                # and treated as legacy.
                await self._retire(session, "died during the probe")
                session = await self._spawn(key)
            try:
                await self._initialize(session, key)
            except Contradicted as exc:
                if not verdict.silent:
                    raise
                # A modern server slower to start than probe_timeout (mcp 2.x
                # on a loaded machine) took the timed-out discover as its
                # first request and now refuses initialize: it is modern after
                # all, and up by now, so ask it again.
                log.warning("silent probe contradicted; probing again", reason=str(exc))
                self.era = None
                return await self._settle_slow_modern(session, key, started)
        self.probe_report = {"reason": verdict.reason}
        if legacy_reason is not None:
            # How each era was found out: the discover, then the legacy check.
            self.probe_report = {
                "reason": f"{verdict.reason}; {legacy_reason}",
                "modern": verdict.reason,
                "legacy": legacy_reason,
            }
        self.probe_report["elapsedMs"] = round((time.monotonic() - started) * 1000, 1)
        log.info(
            "upstream era settled",
            era=self.era_name,
            reason=self.probe_report["reason"],
            server=(self.profile.server_info if self.profile else None),
            **(
                {"legacyVersion": self.legacy_side.version, "modernVersion": self.profile.version}
                if self.legacy_side is not None and self.profile is not None
                else {}
            ),
        )
        return session

    async def _settle_slow_modern(
        self, session: UpstreamSession, key: SessionKey, started: float
    ) -> UpstreamSession:
        self._stage = "server/discover (the era probe, again)"
        await self._discover(session, era.NEWEST_MODERN)
        self.era = era.Era.MODERN
        reason = "DiscoverResult after a silent probe and a modern refusal of initialize"
        legacy_reason = None
        if self.config.upstream_era != "modern":
            legacy_reason = await self._check_legacy(key.principal, time.monotonic() - started)
        self.probe_report = {
            "reason": reason if legacy_reason is None else f"{reason}; {legacy_reason}"
        }
        if legacy_reason is not None:
            self.probe_report.update(modern=reason, legacy=legacy_reason)
        self.probe_report["elapsedMs"] = round((time.monotonic() - started) * 1000, 1)
        log.info("upstream era settled", era=self.era_name, reason=self.probe_report["reason"])
        return session

    async def _check_legacy(self, principal: str, probe_seconds: float = 0.0) -> str:
        """2026-07-28 "Dual-era": does this modern server serve legacy clients
        too? A process may fix its era by its first request (mcp 2.x does), so
        the check gets a connection of its own: a second process over stdio, a
        second session on the one endpoint over HTTP. When the answer is yes it
        stays open as the first legacy client's session; otherwise it closes
        (HTTP: DELETE). Returns how the legacy era was found out."""
        key = self._default_key(principal, dual_legacy=True)
        session = await self._spawn(key)
        params = legacy_handshake.initialize_params(
            capabilities_for(key.features), self.config.client_info
        )
        self._stage = "initialize (the legacy check)"
        try:
            # The check's process starts as slowly as the probe's did: give it
            # that long on top of probe_timeout, or a loaded machine would
            # make a dual-era server look modern-only.
            reply = await session.call(
                "initialize", params, timeout=self.config.probe_timeout + probe_seconds
            )
        except UpstreamTimeout:
            await self._retire(session, "no answer to the legacy check")
            return "no answer to initialize"
        except UpstreamGone as exc:
            await self._retire(session, "exited on the legacy check")
            return f"exited on initialize: {exc.reason}"
        _check_credential(reply)
        check = era_probe.judge_legacy_check(reply)
        if check.outage:
            # Nothing is settled until both eras are known.
            self.era = None
            self.profile = None
            raise UpstreamUnavailable(f"the legacy check failed: {check.reason}")
        if check.initialize is None:
            await self._retire(session, "the server serves modern clients only")
            return check.reason
        profile = UpstreamProfile.from_initialize(check.initialize)
        if getattr(self._processes.get(session), "session_id", "stdio") is None:
            # An HTTP server that answers `initialize` without an
            # Mcp-Session-Id serves legacy clients statelessly (the TS SDK
            # 2.x's `legacy: 'stateless'`): it forgets what they declared and
            # cannot send them requests. Its legacy clients lose less
            # translated onto its modern side, where the gateway bridges
            # input_required rounds into requests they can answer.
            self.stateless_legacy_side = profile
            await self._retire(session, "the server keeps no legacy sessions")
            return f"{check.reason} without a session (stateless legacy side)"
        await session.notify("notifications/initialized")
        session.profile = profile
        self.legacy_side = profile
        self.sessions[key] = session
        if not self._forward:
            self._unclaimed = session
        return check.reason

    async def _probe(
        self, session: UpstreamSession, version: str = era.NEWEST_MODERN
    ) -> era_probe.ProbeVerdict:
        self._stage = "server/discover (the era probe)"
        try:
            reply = await session.call(
                "server/discover",
                era_probe.discover_params(version, self.config.client_info),
                timeout=self.config.probe_timeout,
            )
        except UpstreamTimeout:
            return era_probe.ProbeVerdict(
                era.Era.LEGACY, reason="no answer to server/discover", silent=True
            )
        except UpstreamGone as exc:
            # The reader may not have seen the exit yet: the session is dead either way.
            session.close(exc.reason)
            return era_probe.ProbeVerdict(era.Era.LEGACY, reason=f"died during probe: {exc.reason}")
        _check_credential(reply)  # a 401 says nothing about the era
        return era_probe.judge(reply)

    async def _discover(self, session: UpstreamSession, version: str) -> None:
        self._stage = "server/discover"
        reply = await self._call(
            session,
            "server/discover",
            era_probe.discover_params(version, self.config.client_info),
        )
        verdict = era_probe.judge(reply)
        if verdict.era is era.Era.LEGACY:
            raise Contradicted(f"server/discover: {verdict.reason}")
        if verdict.discover is None:
            raise UpstreamUnavailable(f"server/discover failed: {verdict.reason}")
        self.profile = UpstreamProfile.from_discover(verdict.discover, version)
        session.profile = self.profile

    async def _initialize(self, session: UpstreamSession, key: SessionKey) -> None:
        caps = capabilities_for(key.features)
        params = legacy_handshake.initialize_params(caps, self.config.client_info)
        self._stage = "initialize"
        reply = await self._call(session, "initialize", params)
        if era_probe.judge(reply).era is era.Era.MODERN and "error" in reply:
            raise Contradicted(f"initialize refused with modern error {reply['error'].get('code')}")
        try:
            result = legacy_handshake.accept(reply)
        except legacy_handshake.HandshakeError as exc:
            raise UpstreamUnavailable(str(exc)) from None
        await session.notify("notifications/initialized")
        profile = UpstreamProfile.from_initialize(result)
        session.profile = profile
        # Every legacy session of one server reports the same server; the first
        # one's answer is the profile clients see.
        if key.dual_legacy:
            if self.legacy_side is None:
                self.legacy_side = profile
        elif self.profile is None or self.profile.era is not era.Era.LEGACY:
            self.profile = profile

    async def _call(
        self, session: UpstreamSession, method: str, params: dict[str, Any]
    ) -> wire.Message:
        try:
            reply = await session.call(method, params, timeout=self.config.startup_timeout)
        except UpstreamError as exc:  # it went away or did not answer
            raise UpstreamUnavailable(f"{method} failed: {exc}") from None
        _check_credential(reply)
        return reply

    async def rediscover(self, principal: str = "*") -> UpstreamProfile:
        """DESIGN §5.2.7: refresh a modern server's profile after a -32022."""
        session = await self.session_for(principal, {})
        async with self._lock:
            await self._discover(session, era.NEWEST_MODERN)
        assert self.profile is not None
        return self.profile


def _nothing_relies_on(session: UpstreamSession) -> bool:
    return False


def _check_credential(reply: wire.Message) -> None:
    if http_binding.auth_refusal(reply) is not None:
        raise UpstreamUnauthorized(reply)


def _sweep_interval(request_timeout: float) -> float:
    # Timeouts of fast-path calls are checked this often: fine enough for a
    # bound measured in seconds, cheap enough to ignore.
    return min(1.0, max(request_timeout / 10, 0.05))


def _describe(exc: UpstreamError) -> str:
    if isinstance(exc, UpstreamGone):
        return exc.reason
    return str(exc)
