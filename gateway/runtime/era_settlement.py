"""Finding out the upstream's era, and the handshakes that open its sessions
(2026-07-28 stdio "Backward Compatibility", "Dual-era"; DESIGN §4, §5.3):
the probe, the legacy check, `server/discover` and `initialize` sent and
awaited. What each answer means is the core's (`era_probe`,
`era_settlement`); which session is kept where is the pool's."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from gateway import era, wire
from gateway.config import Config
from gateway.core import credentials, era_probe, legacy_handshake
from gateway.core.era_settlement import (
    Settlement,
    initialize_contradiction,
    legacy_side,
    pinned_verdict,
    probe_report,
)
from gateway.core.profile import UpstreamProfile
from gateway.core.session_choice import SessionKey, capabilities_for, default_key
from gateway.runtime.upstream_session import UpstreamSession
from gateway.runtime.upstream_supervisor import UpstreamSupervisor
from gateway.upstream_errors import (
    Contradicted,
    UpstreamError,
    UpstreamGone,
    UpstreamTimeout,
    UpstreamUnavailable,
)

log = structlog.get_logger("gateway.pool")

Retire = Callable[[UpstreamSession, str], Awaitable[None]]
# Told of a dual-era server's legacy session that the legacy check opened and
# that stays open for the first legacy client.
KeepLegacySession = Callable[[SessionKey, UpstreamSession], None]


class EraSettler:
    """Settles the era on the pool's first session and runs the handshakes
    of every later one, keeping what it learns in the shared `Settlement`."""

    def __init__(
        self,
        config: Config,
        settlement: Settlement,
        supervisor: UpstreamSupervisor,
        *,
        retire: Retire,
        keep_legacy_session: KeepLegacySession,
    ) -> None:
        self.config = config
        self.settlement = settlement
        self._supervisor = supervisor
        self._retire = retire
        self._keep_legacy_session = keep_legacy_session
        # What opening a session is waiting for now, for the timeout's message.
        self.stage = "the start-up probe"

    def timeout_reason(self) -> str:
        """Which bound ran out while a session was being opened, and on what."""
        return f"no answer to {self.stage} within startup_timeout={self.config.startup_timeout:g} s"

    async def spawn(self, key: SessionKey) -> UpstreamSession:
        self.stage = "the start-up probe"
        return await self._supervisor.spawn(key)

    async def settle(self, session: UpstreamSession, key: SessionKey) -> UpstreamSession:
        """Probe the server on `session` and settle its era (for a modern one,
        check for a legacy side too); the session that serves `key` now (a
        legacy server's may be a fresh one)."""
        started = time.monotonic()
        state = self.settlement
        state.legacy_side = None
        state.stateless_legacy_side = None
        pinned = self.config.upstream_era
        legacy_reason: str | None = None
        verdict = pinned_verdict(pinned)
        if verdict is None:
            verdict = await self._probe(session)
            if verdict.retry_version is not None:
                verdict = await self._probe(session, verdict.retry_version)
        probe_seconds = time.monotonic() - started
        if verdict.era is era.Era.MODERN:
            version = verdict.retry_version or era.NEWEST_MODERN
            if verdict.discover is not None:
                state.profile = UpstreamProfile.from_discover(verdict.discover, version)
            else:
                await self.discover(session, version)
            session.profile = state.profile
            state.era = era.Era.MODERN
            if pinned != "modern":
                legacy_reason = await self._check_legacy(key.principal, probe_seconds)
        else:
            state.era = era.Era.LEGACY
            if not session.alive:
                # DESIGN §4: a process that dies during the probe is restarted
                # and treated as legacy.
                await self._retire(session, "died during the probe")
                session = await self.spawn(key)
            try:
                await self.initialize(session, key)
            except Contradicted as exc:
                if not verdict.silent:
                    raise
                # A modern server slower to start than probe_timeout (mcp 2.x
                # on a loaded machine) took the timed-out discover as its
                # first request and now refuses initialize: it is modern after
                # all, and up by now, so ask it again.
                log.warning("silent probe contradicted; probing again", reason=str(exc))
                state.era = None
                return await self._settle_slow_modern(session, key, started)
        state.probe_report = probe_report(verdict.reason, legacy_reason, time.monotonic() - started)
        log.info(
            "upstream era settled",
            era=state.era_name,
            reason=state.probe_report["reason"],
            server=(state.profile.server_info if state.profile else None),
            **(
                {"legacyVersion": state.legacy_side.version, "modernVersion": state.profile.version}
                if state.legacy_side is not None and state.profile is not None
                else {}
            ),
        )
        return session

    async def _settle_slow_modern(
        self, session: UpstreamSession, key: SessionKey, started: float
    ) -> UpstreamSession:
        state = self.settlement
        self.stage = "server/discover (the era probe, again)"
        await self.discover(session, era.NEWEST_MODERN)
        state.era = era.Era.MODERN
        reason = "DiscoverResult after a silent probe and a modern refusal of initialize"
        legacy_reason = None
        if self.config.upstream_era != "modern":
            legacy_reason = await self._check_legacy(key.principal, time.monotonic() - started)
        state.probe_report = probe_report(reason, legacy_reason, time.monotonic() - started)
        log.info("upstream era settled", era=state.era_name, reason=state.probe_report["reason"])
        return session

    async def _check_legacy(self, principal: str, probe_seconds: float = 0.0) -> str:
        """2026-07-28 "Dual-era": does this modern server serve legacy clients
        too? A process may fix its era by its first request (mcp 2.x does), so
        the check gets a connection of its own: a second process over stdio, a
        second session on the one endpoint over HTTP. When the answer is yes it
        stays open as the first legacy client's session; otherwise it closes
        (HTTP: DELETE). Returns how the legacy era was found out."""
        state = self.settlement
        key = default_key(principal, dual_legacy=True)
        session = await self.spawn(key)
        params = legacy_handshake.initialize_params(
            capabilities_for(key.features), self.config.client_info
        )
        self.stage = "initialize (the legacy check)"
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
        credentials.check_reply(reply)
        check = era_probe.judge_legacy_check(reply)
        if check.outage:
            # Nothing is settled until both eras are known.
            state.era = None
            state.profile = None
            raise UpstreamUnavailable(f"the legacy check failed: {check.reason}")
        # Over HTTP, a connection that got no Mcp-Session-Id has None here.
        session_id = getattr(self._supervisor.processes.get(session), "session_id", "stdio")
        side = legacy_side(check, keeps_sessions=session_id is not None)
        if side.closing is not None:
            state.stateless_legacy_side = side.profile
            await self._retire(session, side.closing)
            return side.reason
        await session.notify("notifications/initialized")
        session.profile = side.profile
        state.legacy_side = side.profile
        self._keep_legacy_session(key, session)
        return side.reason

    async def _probe(
        self, session: UpstreamSession, version: str = era.NEWEST_MODERN
    ) -> era_probe.ProbeVerdict:
        self.stage = "server/discover (the era probe)"
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
        _screen(reply)  # a 401, or no server reached, says nothing about the era
        return era_probe.judge(reply)

    async def discover(self, session: UpstreamSession, version: str) -> None:
        """A modern server's profile, afresh (a new connection, a -32022)."""
        self.stage = "server/discover"
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
        self.settlement.profile = UpstreamProfile.from_discover(verdict.discover, version)
        session.profile = self.settlement.profile

    async def initialize(self, session: UpstreamSession, key: SessionKey) -> None:
        """The legacy handshake that opens a session declaring `key`'s features."""
        caps = capabilities_for(key.features)
        params = legacy_handshake.initialize_params(caps, self.config.client_info)
        self.stage = "initialize"
        reply = await self._call(session, "initialize", params)
        contradiction = initialize_contradiction(reply)
        if contradiction is not None:
            raise Contradicted(contradiction)
        try:
            result = legacy_handshake.accept(reply)
        except legacy_handshake.HandshakeError as exc:
            raise UpstreamUnavailable(str(exc)) from None
        await session.notify("notifications/initialized")
        profile = UpstreamProfile.from_initialize(result)
        session.profile = profile
        self.settlement.take_legacy_profile(profile, key.dual_legacy)

    async def _call(
        self, session: UpstreamSession, method: str, params: dict[str, Any]
    ) -> wire.Message:
        try:
            reply = await session.call(method, params, timeout=self.config.startup_timeout)
        except UpstreamError as exc:  # it went away or did not answer
            raise UpstreamUnavailable(f"{method} failed: {exc}") from None
        _screen(reply)
        return reply


def _screen(reply: wire.Message) -> None:
    """Raise for an answer that is not the server's word on the era: a
    credential challenge (credentials.check_reply), or the HTTP back's own
    answer that no server was reached (UpstreamUnavailable, saying why)."""
    credentials.check_reply(reply)
    unreachable = era_probe.unreachable(reply)
    if unreachable is not None:
        raise UpstreamUnavailable(unreachable)
