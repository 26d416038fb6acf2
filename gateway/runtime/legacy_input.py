"""The MRTR bridge at work, legacy client → modern server (DESIGN §5.2.5).

A modern server's `input_required` becomes server requests to the legacy
client (sent concurrently, under gateway ids); their answers go back upstream
as `inputResponses` on a retry with a new id and the exact `requestState`,
until the server completes, in bounded rounds and time.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import structlog

from gateway import wire
from gateway.client_link import ClientLink, ForwardedServerRequest
from gateway.config import Config
from gateway.core import mrtr_bridge as core
from gateway.core import mrtr_shapes, upstream_checks
from gateway.core.routing import Forward
from gateway.runtime.upstream_session import UpstreamSession

log = structlog.get_logger("gateway.mrtr")

# link, what to send, where, timeout (None: the default), the client's id.
ForwardFn = Callable[
    [ClientLink, Forward, UpstreamSession, float | None, wire.RequestId],
    Awaitable[wire.Message],
]


class ClientRefused(Exception):
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
        """Drive `reply` (an input_required) to a final reply from upstream;
        what the gateway answers itself carries `client_id`, the client's id."""
        assert link.session is not None
        for _ in range(self.config.max_rounds):
            result = reply.get("result")
            if not mrtr_shapes.is_input_required(result):
                return reply
            problem = upstream_checks.input_required_problem(result)
            if problem is not None:
                return self._error(
                    client_id,
                    f"Upstream sent a malformed reply: {problem}",
                    upstream_checks.MALFORMED,
                )
            requests = core.requests_for_legacy_client(
                result.get("inputRequests") or {},
                link.session.capabilities,
                link.session.version,
                new_elicitation_id=lambda: str(uuid.uuid4()),
            )
            if isinstance(requests, str):
                return self._error(
                    client_id,
                    f"The server needs client input the gateway cannot get: {requests}",
                    "input-unavailable",
                )
            self.rounds += 1
            try:
                answers = await self._ask_all(link, requests)
            except ClientRefused as exc:
                return self._error(client_id, str(exc), "client-refused")
            except TimeoutError:
                return self._error(
                    client_id,
                    "The client did not answer the server's input requests within "
                    f"{self.config.request_timeout:g}s",
                    "client-timeout",
                )
            retry = Forward(
                decision.method,
                mrtr_shapes.retry_params(
                    decision.params, answers, result.get(mrtr_shapes.REQUEST_STATE)
                ),
                decision.shape,
                decision.client_era,
                decision.client_capabilities,
                decision.log_level,
            )
            reply = await self._forward(link, retry, session, None, client_id)
        return self._error(
            client_id,
            f"The server asked for input more than {self.config.max_rounds} times",
            "mrtr-rounds",
        )

    @staticmethod
    def _error(client_id: wire.RequestId, message: str, reason: str) -> wire.Message:
        return wire.gateway_error(client_id, wire.INTERNAL_ERROR, message, reason=reason)

    async def _ask_all(self, link: ClientLink, requests: dict[str, wire.Message]) -> dict[str, Any]:
        answers: dict[str, Any] = {}
        refusals: list[str] = []

        async def ask(key: str, request: wire.Message) -> None:
            try:
                answers[key] = await self._ask(link, request)
            except ClientRefused as exc:
                refusals.append(str(exc))

        with anyio.fail_after(self.config.request_timeout):
            async with anyio.create_task_group() as tg:
                for key, request in requests.items():
                    tg.start_soon(ask, key, request)
        if refusals:
            raise ClientRefused(refusals[0])
        return answers

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
            raise ClientRefused("The client went away before answering the server's request")
        answer = forwarded.reply
        if "error" in answer:
            err = answer["error"]
            raise ClientRefused(
                f"The client refused the server's {request['method']} request: "
                f"{err.get('code')} {err.get('message')}"
            )
        return answer.get("result")
