"""A legacy session's change notifications from a modern server (DESIGN
§5.2.6): one upstream `subscriptions/listen` per session, whose filter follows
the session's `resources/subscribe` calls and opts in to the list_changed
kinds the server declares. A new filter opens a new listen first and closes
the old one only once the new one is acknowledged, so nothing is lost while
it is reopened; a listen that drops is reopened with backoff."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup

from gateway import era, translate, wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.core import backoff
from gateway.core import subscriptions as subs
from gateway.runtime.upstream_session import UpstreamSession
from gateway.upstream_errors import UpstreamError

log = structlog.get_logger("gateway.listen")


@dataclass(eq=False)
class _Stream:
    owner: SessionListen
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    acked: anyio.Event = field(default_factory=anyio.Event)

    async def on_notification(self, msg: wire.Message) -> None:
        await self.owner.on_notification(self, msg)


class SessionListen:
    def __init__(
        self,
        config: Config,
        link: ClientLink,
        tg: TaskGroup,
        session_for: Callable[[], Awaitable[UpstreamSession]],
    ) -> None:
        self.config = config
        self.link = link
        self._tg = tg
        self._session_for = session_for
        self.uris: set[str] = set()
        self.current: _Stream | None = None
        self._lock = anyio.Lock()
        self._failures = 0
        self.closed = False

    def _filter(self, session: UpstreamSession) -> dict[str, Any]:
        caps = session.profile.capabilities if session.profile else {}
        wanted = subs.Filter(frozenset(subs.LIST_CHANGED), tuple(sorted(self.uris)))
        return subs.supported(wanted, caps).as_params()

    async def subscription_call(
        self, session: UpstreamSession, msg: wire.Message, params: dict[str, Any] | None
    ) -> wire.Message:
        """The answer to a legacy client's resources/(un)subscribe, served by
        this listen (DESIGN §5.2.6)."""
        uri = (params or {}).get("uri")
        add, limit = msg["method"] == "resources/subscribe", self.config.max_listen_uris
        if add and uri not in self.uris and len(self.uris) >= limit:
            # Each one more widens the session's upstream listen filter.
            return wire.gateway_error(
                msg["id"],
                wire.INTERNAL_ERROR,
                f"Too many resource subscriptions on this session "
                f"(at most {limit}, [upstream] max_listen_uris)",
                reason="subscription-limit",
            )
        await self.change(session, uri, add)
        return wire.result_response(msg["id"], {})

    async def change(self, session: UpstreamSession, uri: str | None, add: bool) -> None:
        if uri is not None:
            (self.uris.add if add else self.uris.discard)(uri)
        await self.reopen(session)

    async def reopen(self, session: UpstreamSession) -> None:
        async with self._lock:
            notifications = self._filter(session)
            if not notifications or self.closed:
                old, self.current = self.current, None
                if old is not None:
                    old.scope.cancel()
                return
            new = _Stream(self)
            self._tg.start_soon(self._run, new, session, notifications)
            # The new stream takes over when acknowledged (on_notification);
            # until then the old one keeps delivering.
            with anyio.move_on_after(self.config.request_timeout):
                await new.acked.wait()
            if not new.acked.is_set():
                log.warning("upstream listen not acknowledged in time; keeping the old one")
                new.scope.cancel()

    async def _run(
        self, stream: _Stream, session: UpstreamSession, notifications: dict[str, Any]
    ) -> None:
        assert self.link.session is not None
        legacy = self.link.session
        params = translate.add_modern_meta(
            {"notifications": notifications},
            version=session.profile.version if session.profile else era.NEWEST_MODERN,
            capabilities=legacy.modern_capabilities(),
            client_info=legacy.client_info,
            log_level=None,
        )
        ended_by_server = False
        with stream.scope:
            try:
                await session.call(
                    "subscriptions/listen",
                    params,
                    timeout=self.config.listen_timeout,
                    owner=self.link,
                    tag=stream,
                )
                ended_by_server = True
            except UpstreamError as exc:
                log.info("upstream listen dropped", error=str(exc))
                ended_by_server = True
        if ended_by_server and self.current is stream and not self.closed:
            # Reopen after a drop, with backoff (and a fresh session if it died).
            self._failures += 1
            cfg = self.config
            await anyio.sleep(
                backoff.delay(self._failures, cfg.restart_backoff_initial, cfg.restart_backoff_max)
            )
            self._tg.start_soon(self._reopen_later)

    async def _reopen_later(self) -> None:
        try:
            session = await self._session_for()
        except UpstreamError as exc:  # the upstream is down: the next change retries
            log.warning("cannot reopen the upstream listen", error=str(exc))
            return
        await self.reopen(session)

    async def on_notification(self, stream: _Stream, msg: wire.Message) -> None:
        if msg.get("method") == "notifications/subscriptions/acknowledged":
            self._failures = 0
            old, self.current = self.current, stream
            stream.acked.set()
            if old is not None and old is not stream:
                old.scope.cancel()
            return
        if stream is not self.current:
            return  # a stream being replaced: the new one carries this too
        params = dict(msg.get("params") or {})
        meta = {
            k: v for k, v in (params.pop("_meta", None) or {}).items() if k != era.SUBSCRIPTION_ID
        }
        if meta:
            params["_meta"] = meta
        try:
            await self.link.send(wire.notification(msg["method"], params or None))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self.close()

    def close(self) -> None:
        self.closed = True
        if self.current is not None:
            self.current.scope.cancel()
            self.current = None
