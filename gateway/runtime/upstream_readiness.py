"""Whether the upstream is up (DESIGN §4): the start-up attempt and its
verdict, the attempts after a failed one, and the backoff between them. An
outage is never a verdict; a refused credential is not an outage."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio
import structlog

from gateway.config import Config
from gateway.core import backoff
from gateway.core.credentials import CredentialStore
from gateway.core.era_settlement import Settlement
from gateway.core.profile import UpstreamProfile
from gateway.upstream_errors import (
    ShuttingDown,
    UpstreamError,
    UpstreamGone,
    UpstreamUnauthorized,
    UpstreamUnavailable,
)

if TYPE_CHECKING:
    from gateway.backs.http_connector import HttpConnector

log = structlog.get_logger("gateway.pool")

# After an outage, how long the reachability check of an HTTP upstream may
# take before the backoff applies after all.
REACHABLE_TIMEOUT = 1.0

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
# Settle the era and open the first session, as `principal`.
OpenFirst = Callable[[str], Awaitable[None]]


class Readiness:
    def __init__(
        self,
        config: Config,
        settlement: Settlement,
        credentials: CredentialStore,
        http: HttpConnector | None,
        *,
        forward: bool,
        explain: Callable[[str], Awaitable[str]],
        timeout_reason: Callable[[], str],
        clock: Clock,
        sleep: Sleep,
    ) -> None:
        self.config = config
        self._settlement = settlement
        self._credentials = credentials
        self._http = http
        self._forward = forward
        # A reason, with what the server said on stderr as it died.
        self._explain = explain
        self._timeout_reason = timeout_reason
        # Injected so that tests drive the backoff without waiting.
        self.clock = clock
        self.sleep = sleep
        self.failure: str | None = None
        # The upstream refused the credential it was probed with; with
        # forwarding, the next client that brings one is probed with it.
        self.awaiting_credentials = False
        self._refusal: UpstreamUnauthorized | None = None
        self.failures = backoff.Failures()
        # Start-up attempts made; a request that waited for one takes its verdict.
        self._attempts = 0
        self._first_done = anyio.Event()
        # The first attempt ended (read on every request: a plain flag).
        self.first_done = False
        self._settling = anyio.Lock()

    async def start(self, open_first: OpenFirst) -> None:
        try:
            await self.attempt(open_first)
        finally:
            self.first_done = True
            self._first_done.set()

    async def attempt(self, open_first: OpenFirst, principal: str = "local") -> None:
        """One try at settling the era; its verdict is kept for the callers
        that waited for it."""
        try:
            with anyio.fail_after(self.config.startup_timeout):
                await open_first(principal)
            self.failure = None
            self._refusal = None
            self.awaiting_credentials = False
        except UpstreamUnauthorized as exc:
            # Not an outage: the server wants a credential. Forwarding brings
            # the clients' own (tried with the next one at once); without it,
            # [upstream] headers must carry one, and retrying will not help.
            self.failure = f"the upstream refused the gateway's credential: {exc}"
            self._refusal = exc
            self.awaiting_credentials = self._forward
            if not self._forward:
                self.failed()
            log.error("upstream refused the credential", reason=str(exc))
        except ShuttingDown:
            # Not an outage: the gateway stopped before the upstream was up.
            self.failure = "the gateway is shutting down"
            log.info("upstream start abandoned; the gateway is shutting down")
        except TimeoutError:
            # (the opening counted the failure for the backoff.)
            self.failure = await self._explain(self._timeout_reason())
            log.error("upstream unavailable", reason=self.failure)
        except UpstreamError as exc:
            self.failure = await self._explain(describe(exc))
            log.error("upstream unavailable", reason=self.failure)
        finally:
            self._attempts += 1

    async def ready(self, open_first: OpenFirst, principal: str, retry: bool) -> UpstreamProfile:
        """The upstream's profile once its era is settled. `retry`: after a
        failed start, try again if the backoff allows (a caller that waited
        for an attempt takes that attempt's verdict instead)."""
        seen = self._attempts
        settlement = self._settlement
        await self._first_done.wait()
        if settlement.profile is None and retry:
            async with self._settling:  # one attempt at a time
                if settlement.profile is None and (
                    (self.awaiting_credentials and principal in self._credentials)
                    or (self._attempts == seen and await self._retry_allowed())
                ):
                    # An outage is never a verdict (DESIGN §4): a sidecar that
                    # started before its upstream tries again, at most once per
                    # backoff delay, or at once when it can be reached again;
                    # a refused credential is tried again with this client's.
                    await self.attempt(open_first, principal)
        if settlement.profile is None:
            if self._refusal is not None:
                raise UpstreamUnauthorized(self._refusal.reply)
            raise UpstreamUnavailable(self.failure or "upstream never became ready")
        return settlement.profile

    # -- backoff -----------------------------------------------------------
    def failed(self) -> None:
        """A start failed or the upstream crashed: the backoff grows."""
        self.failures.failed(self.clock())

    def healthy(self) -> None:
        self.failures.healthy()

    @property
    def restart_delay(self) -> float:
        """The backoff after the failures so far (0 once the upstream answered)."""
        cfg = self.config
        return self.failures.delay(cfg.restart_backoff_initial, cfg.restart_backoff_max)

    def _backoff_left(self) -> float:
        cfg = self.config
        return self.failures.wait_left(
            self.clock(), cfg.restart_backoff_initial, cfg.restart_backoff_max
        )

    async def _reachable(self) -> bool:
        """An HTTP upstream that accepts a connection again is tried at once;
        a command has no such check (its start is the check)."""
        return self._http is not None and await self._http.reachable(
            min(REACHABLE_TIMEOUT, self.config.probe_timeout)
        )

    async def _retry_allowed(self) -> bool:
        return self._backoff_left() <= 0 or await self._reachable()

    async def backoff(self) -> None:
        """Wait out what is left of the backoff, unless the upstream can be
        reached again."""
        wait = self._backoff_left()
        if wait <= 0 or await self._reachable():
            return
        log.info("restarting upstream after backoff", delay=round(wait, 3))
        await self.sleep(wait)


def describe(exc: UpstreamError) -> str:
    if isinstance(exc, UpstreamGone):
        return exc.reason
    return str(exc)
