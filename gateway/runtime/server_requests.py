"""Carries out core/server_requests.py's decisions on a legacy server's
requests to its client, and the legacy client's side of them: the request
under a gateway id, its answer, the server's cancellation."""

from __future__ import annotations

import anyio
import structlog

from gateway import era, wire
from gateway.client_link import ClientLink, ForwardedServerRequest
from gateway.config import Config
from gateway.core import server_notifications as notes
from gateway.core.engine import Command, Log
from gateway.core.server_requests import (
    AskClient,
    Claim,
    FailClientCall,
    HandToHeldCall,
    OwnerCall,
    RespondToServer,
    ServerRequestArrived,
    ServerRequests,
    ServerRequestSettings,
)
from gateway.core.session_choice import MODERN_KEY
from gateway.log_limit import LogLimiter
from gateway.runtime.mrtr_bridge import HeldEntry, MrtrBridge
from gateway.runtime.upstream_session import UpstreamSession

log = structlog.get_logger("gateway")


class ServerRequestDesk:
    def __init__(self, config: Config, links: set[ClientLink], bridge: MrtrBridge) -> None:
        self.config = config
        self.links = links
        self.bridge = bridge
        self.engine: ServerRequests[ClientLink] = ServerRequests(
            ServerRequestSettings(config.max_inflight_per_client, tuple(config.static_roots))
        )
        # What a misbehaving server sends can repeat without end: one line a minute.
        self._limited_log = LogLimiter(log)

    async def on_request(
        self, session: UpstreamSession, msg: wire.Message, tg: anyio.abc.TaskGroup
    ) -> None:
        """Runs on the upstream reader: decides at once, in wire order, and
        leaves only the waiting for a client to a task."""
        event = ServerRequestArrived(
            msg,
            self._claim(session),
            dual_legacy=session.key.dual_legacy,
            server_is_modern=session.profile is not None and session.profile.era is era.Era.MODERN,
            waiting=session.serving,
            outside_calls=session.outside_calls(msg["id"]),
            session_features=session.key.features,
        )
        for command in self.engine.handle(event):
            await self._carry_out(command, session, tg)

    async def _carry_out(
        self, command: Command, session: UpstreamSession, tg: anyio.abc.TaskGroup
    ) -> None:
        if isinstance(command, RespondToServer):
            await session.respond(command.reply)
        elif isinstance(command, FailClientCall):
            if command.upstream_id in session.pending:
                session.fail_call(command.upstream_id, command.reply)
        elif isinstance(command, AskClient):
            session.serving += 1
            tg.start_soon(self._ask_client, command.client, session, command.request)
        elif isinstance(command, HandToHeldCall):
            assert isinstance(command.held_call, HeldEntry)
            session.serving += 1
            tg.start_soon(self._hand_to_held_call, command.held_call, session, command.request)
        elif isinstance(command, Log):
            limited = self._limited_log
            emit = limited.warning if command.level == "warning" else limited.info
            emit(command.message, **command.fields, session=session.label)
        else:  # pragma: no cover - the engine returns only the commands above
            raise AssertionError(command)

    def _claim(self, session: UpstreamSession) -> Claim[ClientLink]:
        holder = session.lease.holder
        client = holder if isinstance(holder, ClientLink) else None
        sole = self._sole_owner(session)
        owner = client or sole
        calls: tuple[OwnerCall, ...] = ()
        if owner is not None:
            calls = tuple(
                OwnerCall(i, session.pending[i].method, session.pending[i].client_id)
                for i in session.calls_of(owner)
            )
        if isinstance(holder, HeldEntry):
            features = era.CLIENT_FEATURES.intersection(holder.call.client_caps)
            return Claim(holder, client, sole, calls, frozenset(features))
        return Claim(None, client, sole, calls)

    def _sole_owner(self, session: UpstreamSession) -> ClientLink | None:
        """The one client a server request can belong to, if there is one.

        With no call in progress, a lone client of the session's principal is
        still unambiguous: a legacy server may ask for roots right after
        initialized, as server-everything does. Never another principal's.
        """
        owners: set[ClientLink] = session.owners()
        if not owners and session.key != MODERN_KEY:
            owners = {link for link in self.links if link.principal == session.key.principal}
        return next(iter(owners)) if len(owners) == 1 else None

    async def _hand_to_held_call(
        self, held: HeldEntry, session: UpstreamSession, msg: wire.Message
    ) -> None:
        try:
            await self.bridge.on_server_request(held, msg)
        finally:
            session.serving -= 1

    async def _ask_client(
        self, link: ClientLink, session: UpstreamSession, msg: wire.Message
    ) -> None:
        try:
            reply = await self._ask_legacy_client(link, session, msg)
            if reply is not None:
                await session.respond(reply)
        finally:
            session.serving -= 1

    async def _ask_legacy_client(
        self, link: ClientLink, session: UpstreamSession, msg: wire.Message
    ) -> wire.Message | None:
        """Pass a legacy server's request to a legacy client under a gateway id.

        None means the server cancelled it meanwhile and wants no answer.
        """
        gateway_id = link.next_server_request_id()
        forwarded = ForwardedServerRequest(session, msg["id"])
        link.server_requests[gateway_id] = forwarded
        try:
            await link.send(wire.request(gateway_id, msg["method"], msg.get("params")))
            with anyio.fail_after(self.config.request_timeout):
                await forwarded.done.wait()
        except TimeoutError:
            return wire.error_response(
                msg["id"], wire.INTERNAL_ERROR, "the client did not answer in time"
            )
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return wire.error_response(msg["id"], wire.INTERNAL_ERROR, "the client went away")
        finally:
            link.server_requests.pop(gateway_id, None)
        if forwarded.cancelled:
            return None
        if forwarded.reply is None:
            # The client went away (drop_link) without answering: the server
            # still needs an answer, or it waits for one forever.
            return wire.error_response(msg["id"], wire.INTERNAL_ERROR, "the client went away")
        answer = dict(forwarded.reply)
        answer["id"] = msg["id"]
        return answer

    def client_answered(self, link: ClientLink, msg: wire.Message) -> None:
        msg_id = msg.get("id")
        forwarded = link.server_requests.get(msg_id) if isinstance(msg_id, str) else None
        if forwarded is None:
            log.warning("client answered no request of ours", id=msg_id, link=link.id)
            return
        forwarded.reply = msg
        forwarded.done.set()

    async def server_cancelled(self, session: UpstreamSession, msg: wire.Message) -> None:
        """The server gave up on a request it sent; tell the client we passed it to."""
        target = (msg.get("params") or {}).get("requestId")
        if isinstance(session.lease.holder, HeldEntry):
            self.bridge.on_server_cancel(session.lease.holder, target)
        for link in list(self.links):
            for gateway_id, forwarded in list(link.server_requests.items()):
                if forwarded.session is session and forwarded.upstream_id == target:
                    forwarded.cancelled = True
                    forwarded.done.set()
                    await send_quietly(link, notes.cancelled_for_client(msg, gateway_id))


async def send_quietly(link: ClientLink, msg: wire.Message) -> None:
    try:
        await link.send(msg)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        log.debug("notification to a departed client dropped", link=link.id)
