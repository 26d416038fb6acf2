"""`subscriptions/listen` at work (DESIGN §5.1.9): for a legacy upstream the
gateway acknowledges, subscribes the shared session to the URIs (once per URI,
however many listeners), and delivers the server's change notifications
tagged with each listener's subscription id; for a modern upstream it maps the
server's subscription ids back to the clients'."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
import structlog

from gateway import wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.core import subscriptions as subs
from gateway.runtime.upstream_session import UpstreamSession
from gateway.upstream_errors import UpstreamError

log = structlog.get_logger("gateway.listen")


@dataclass(eq=False)
class ActiveListen:
    listener: subs.Listener
    link: ClientLink
    session: UpstreamSession
    ended: anyio.Event = field(default_factory=anyio.Event)


class Listens:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.table = subs.SubscriptionTable()
        self.active: dict[subs.Listener, ActiveListen] = {}
        # Shutdown has begun: a listen that registers now (it arrived just
        # before the client's input ended) is ended as soon as it is acknowledged.
        self.ending = False

    async def listen(
        self, link: ClientLink, msg: wire.Message, session: UpstreamSession
    ) -> wire.Message:
        """Serve one listen on a legacy session until the client cancels it
        (its task is cancelled) or the gateway ends it gracefully."""
        msg_id = msg["id"]
        try:
            wanted = subs.parse_filter(msg.get("params"))
        except subs.BadFilter as exc:
            return wire.error_response(msg_id, wire.INVALID_PARAMS, f"Invalid params: {exc}")
        limit = self.config.max_listen_uris
        if len(wanted.uris) > limit:  # each is a resources/subscribe upstream
            return wire.error_response(
                msg_id,
                wire.INVALID_PARAMS,
                f"Invalid params: {len(wanted.uris)} resourceSubscriptions in one listen "
                f"(at most {limit}, [upstream] max_listen_uris)",
            )
        profile = session.profile
        granted = subs.supported(wanted, profile.capabilities if profile else {})
        listener = subs.Listener(link, msg_id, granted)
        active = ActiveListen(listener, link, session)
        self.active[listener] = active
        if self.ending:
            active.ended.set()
        try:
            for uri in self.table.add(listener):
                reply = await session.call(
                    "resources/subscribe", {"uri": uri}, timeout=self.config.request_timeout
                )
                if "error" in reply:
                    log.warning(
                        "upstream refused resources/subscribe", uri=uri, error=reply["error"]
                    )
            await link.send(subs.acknowledgement(granted, msg_id))
            log.info("listening", subscription=msg_id, filter=granted.as_params())
            await active.ended.wait()
            return wire.result_response(msg_id, subs.closing_result(msg_id))
        finally:
            del self.active[listener]
            gone = self.table.remove(listener)
            if gone and session.alive:
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    for uri in gone:
                        await session.call(
                            "resources/unsubscribe",
                            {"uri": uri},
                            timeout=self.config.request_timeout,
                        )

    def holds(self, session: UpstreamSession) -> bool:
        """Whether a listen relies on `session` (its upstream subscriptions)."""
        return any(active.session is session for active in self.active.values())

    async def deliver(self, session: UpstreamSession, msg: wire.Message) -> None:
        """A legacy server's change notification, to every listener that asked."""
        for listener in self.table.matching(msg):
            active = self.active.get(listener)
            if active is None or active.session is not session:
                continue
            try:
                await active.link.send(subs.tagged(msg, listener.subscription_id))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                active.ended.set()

    async def session_lost(
        self, dead: UpstreamSession, replace: Callable[[], Awaitable[UpstreamSession]]
    ) -> None:
        """DESIGN §5.1.9 / issue: listens outlive an upstream restart. The new
        session is subscribed to the same URIs, and every listener is told the
        lists changed, since it cannot know what changed meanwhile."""
        moved = [a for a in self.active.values() if a.session is dead]
        if not moved:
            return
        try:
            session = await replace()
        except UpstreamError as exc:  # still down: the listeners keep waiting
            log.warning("cannot re-establish subscriptions after an upstream exit", error=str(exc))
            return
        for uri in sorted(self.table.uri_refs):
            reply = await session.call(
                "resources/subscribe", {"uri": uri}, timeout=self.config.request_timeout
            )
            if "error" in reply:
                log.warning("upstream refused resources/subscribe", uri=uri, error=reply["error"])
        for active in moved:
            active.session = session
            listener = active.listener
            for kind in sorted(listener.filter.kinds):
                note = wire.notification(subs.LIST_CHANGED[kind][1])
                try:
                    await active.link.send(subs.tagged(note, listener.subscription_id))
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    active.ended.set()
        log.info("subscriptions re-established after an upstream restart", listeners=len(moved))

    def end_all(self) -> None:
        """Shutdown: every listen gets its graceful closing result, and so
        does every listen that registers from now on."""
        self.ending = True
        for active in self.active.values():
            active.ended.set()
