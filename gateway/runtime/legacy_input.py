"""The MRTR bridge at work, legacy client → modern server (DESIGN §5.2.5).

core/legacy_input.py decides each step of a call's loop; this asks the legacy
client (the round's requests at once, under gateway ids, bounded by
request_timeout) and sends the retries upstream.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import structlog

from gateway import wire
from gateway.client_link import MRTR_ROUND, ClientLink, ForwardedServerRequest
from gateway.config import Config
from gateway.core import legacy_input as core
from gateway.core.engine import Event
from gateway.core.routing import Forward
from gateway.runtime.upstream_session import UpstreamSession

log = structlog.get_logger("gateway.mrtr")

# link, what to send, where, timeout (None: the default), the client's id.
ForwardFn = Callable[
    [ClientLink, Forward, UpstreamSession, float | None, wire.RequestId],
    Awaitable[wire.Message],
]


class _Refused(Exception):
    pass


class LegacyInputLoop:
    def __init__(self, config: Config, forward: ForwardFn) -> None:
        self.config = config
        self._forward = forward
        self.rounds = 0

    async def complete(
        self,
        link: ClientLink,
        decision: Forward,
        session: UpstreamSession,
        reply: wire.Message,
        client_id: wire.RequestId,
    ) -> wire.Message:
        """Drive `reply` (an input_required) to a final reply from upstream."""
        assert link.session is not None
        call = core.LegacyInputCall(
            decision,
            client_id,
            link.session.capabilities,
            link.session.version,
            self.config.max_rounds,
            new_elicitation_id=lambda: str(uuid.uuid4()),
        )
        event: Event = core.UpstreamReplied(reply)
        while True:  # one round a pass; the machine finishes after max_rounds at most
            [command] = call.handle(event)
            if isinstance(command, core.Finish):
                return command.reply
            if isinstance(command, core.AskClient):
                self.rounds += 1
                event = await self._ask_all(link, command.requests)
            else:
                assert isinstance(command, core.RetryUpstream)
                MRTR_ROUND.set(call.rounds)  # for the retry's span (runtime/tracing.py)
                retry = await self._forward(link, command.forward, session, None, client_id)
                event = core.UpstreamReplied(retry)

    async def _ask_all(self, link: ClientLink, requests: dict[str, wire.Message]) -> Event:
        answers: dict[str, Any] = {}
        refusals: list[str] = []

        async def ask(key: str, request: wire.Message) -> None:
            try:
                answers[key] = await self._ask(link, request)
            except _Refused as exc:
                refusals.append(str(exc))

        timeout = self.config.request_timeout
        try:
            with anyio.fail_after(timeout):
                async with anyio.create_task_group() as tg:
                    for key, request in requests.items():
                        tg.start_soon(ask, key, request)
        except TimeoutError:
            return core.ClientTimedOut(timeout)
        if refusals:
            return core.ClientRefused(refusals[0])
        return core.ClientAnswered(answers)

    async def _ask(self, link: ClientLink, request: wire.Message) -> Any:
        gateway_id = link.next_server_request_id()
        forwarded = ForwardedServerRequest(None, gateway_id)
        link.server_requests[gateway_id] = forwarded
        try:
            await link.send(wire.request(gateway_id, request["method"], request.get("params")))
            await forwarded.done.wait()
        finally:
            link.server_requests.pop(gateway_id, None)
        if forwarded.reply is None:
            raise _Refused("The client went away before answering the server's request")
        why = core.refusal(request["method"], forwarded.reply)
        if why is not None:
            raise _Refused(why)
        return forwarded.reply.get("result")
