"""The MRTR bridge at work, legacy client → modern server (DESIGN §5.2.5),
and the tasks a modern server answers a legacy client's call with.

core/legacy_input.py decides each step of a call's loop; this asks the legacy
client (the round's requests at once, under gateway ids, bounded by
request_timeout), sends the retries upstream and polls a task; a task the
loop leaves open (the client went away, the gateway gave up) is cancelled
upstream.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
import structlog

from gateway import wire
from gateway.client_link import MRTR_ROUND, ClientLink, ForwardedServerRequest
from gateway.config import Config
from gateway.core import legacy_input as core
from gateway.core.engine import Event
from gateway.core.routing import Forward
from gateway.runtime.upstream_session import UpstreamSession
from gateway.upstream_errors import UpstreamError

log = structlog.get_logger("gateway.mrtr")

# link, what to send, where, timeout (None: the default), the client's id.
ForwardFn = Callable[
    [ClientLink, Forward, UpstreamSession, float | None, wire.RequestId],
    Awaitable[wire.Message],
]


class _Refused(Exception):
    pass


class AskingHook(Protocol):
    """Whoever runs the call as a task of the client's own (runtime/legacy_task_runner.py)."""

    def asking(self, now: bool) -> None:
        """The client is asked for input now (True), or has answered (False)."""

    def related(self, request: wire.Message) -> wire.Message:
        """The request as the client gets it, naming its task."""


class LegacyInputLoop:
    def __init__(self, config: Config, forward: ForwardFn) -> None:
        self.config = config
        self._forward = forward
        self.rounds = 0
        self.polling = core.TaskPolling(
            default_interval=config.tasks_poll_interval, max_wait=config.tasks_max_wait
        )
        self.tasks_polled = 0  # tasks a legacy client's call was answered through

    async def complete(
        self,
        link: ClientLink,
        decision: Forward,
        session: UpstreamSession,
        reply: wire.Message,
        client_id: wire.RequestId,
        asking: AskingHook | None = None,
    ) -> wire.Message:
        """Drive `reply` (an input_required or a task) to a final reply from
        upstream. `asking`: told when the client is asked for input and when
        it has answered (a 2025-11-25 task of the client's shows
        input_required meanwhile); its `related` names the task the requests
        belong to."""
        assert link.session is not None
        call = core.LegacyInputCall(
            decision,
            client_id,
            link.session.capabilities,
            link.session.version,
            self.config.max_rounds,
            new_elicitation_id=lambda: str(uuid.uuid4()),
            polling=self.polling,
        )
        try:
            return await self._drive(call, link, session, reply, client_id, asking)
        finally:
            await self._cancel_open_task(call, link, session, client_id)

    async def _drive(
        self,
        call: core.LegacyInputCall,
        link: ClientLink,
        session: UpstreamSession,
        reply: wire.Message,
        client_id: wire.RequestId,
        asking: AskingHook | None,
    ) -> wire.Message:
        event: Event = core.UpstreamReplied(reply, anyio.current_time())
        polled = False
        while True:  # one step a pass; ends within max_rounds, or a task's ttl / max_wait
            [command] = call.handle(event)
            if isinstance(command, core.Finish):
                return command.reply
            if isinstance(command, core.AskClient):
                self.rounds += 1
                requests = command.requests
                if asking is not None:
                    asking.asking(True)
                    requests = {k: asking.related(r) for k, r in requests.items()}
                try:
                    event = await self._ask_all(link, requests)
                finally:
                    if asking is not None:
                        asking.asking(False)
                continue
            if isinstance(command, core.PollUpstream):
                if not polled:
                    polled = True
                    self.tasks_polled += 1
                    log.debug("call answered with a task: polling it", task=call.open_task)
                await anyio.sleep(command.delay)
                forward = command.forward
            else:
                assert isinstance(command, core.RetryUpstream)
                MRTR_ROUND.set(call.rounds)  # for the retry's span (runtime/tracing.py)
                forward = command.forward
            answer = await self._forward(link, forward, session, None, client_id)
            event = core.UpstreamReplied(answer, anyio.current_time())

    async def _cancel_open_task(
        self,
        call: core.LegacyInputCall,
        link: ClientLink,
        session: UpstreamSession,
        client_id: wire.RequestId,
    ) -> None:
        """tasks/cancel for a task the call no longer waits for, so that the
        server's work stops; shielded (the call may be ending by
        cancellation) and bounded."""
        cancel = call.cancel_request()
        if cancel is None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.config.request_timeout):
            try:
                await self._forward(link, cancel, session, None, client_id)
            except (UpstreamError, TimeoutError) as exc:
                log.info("could not cancel the server's task", task=call.open_task, why=str(exc))
                return
            log.info("server's task cancelled", task=call.open_task)

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
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            # Refused by the client's queue (it does not read what it is
            # sent, gateway/flow_control.py) or gone: the call ends now.
            raise _Refused(
                "The client did not take the server's request: it is gone or not reading"
            ) from exc
        finally:
            link.server_requests.pop(gateway_id, None)
        if forwarded.reply is None:
            raise _Refused("The client went away before answering the server's request")
        why = core.refusal(request["method"], forwarded.reply)
        if why is not None:
            raise _Refused(why)
        return forwarded.reply.get("result")
