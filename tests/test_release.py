"""Every counter, lease and slot a client call takes is given back on every
way out (issue, "Make it a property": "Every counter, lease and slot is
released on every path ... proved by tests that inject a failure at each
step"). Each test breaks one step, then checks that the in-flight table
(`max_inflight_per_client` counts it), the session lease, the upstream's
pending and progress tables and the HTTP in-progress count are back to
zero, and that the next request is served."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from gateway import wire
from gateway.fronts import http_calls
from gateway.fronts.http_output import HttpOutput
from gateway.runtime.service import GatewayService
from gateway.runtime.upstream_session import UpstreamSession
from gateway.upstream_errors import UpstreamGone, UpstreamNotReading, UpstreamTimeout
from tests.held_counts import NOTHING_HELD, held
from tests.inprocess import HttpGateway, http_gateway
from tests.scripted import MODERN_META, Client, ScriptedServer, gateway, legacy_server

pytestmark = pytest.mark.anyio


class Injected(Exception):
    """A failure no step expects."""


def _is_injected(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return any(_is_injected(e) for e in exc.exceptions)
    return isinstance(exc, Injected)


async def echo(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "ok"}]}


async def settle(c: Client) -> UpstreamSession:
    """One good call, so the era is settled and the session is up."""
    assert "result" in await c.call("tools/call", {"name": "x", "arguments": {}})
    session = c.service.pool.session_now("local", {})
    assert session is not None
    return session


async def call_with_token(c: Client, msg_id: int) -> None:
    params: dict[str, Any] = {
        "name": "x",
        "arguments": {},
        "_meta": {"progressToken": f"p{msg_id}"},
    }
    await c.send(
        wire.request(msg_id, "tools/call", {**params, "_meta": {**MODERN_META, **params["_meta"]}})
    )


async def answer_to(c: Client, msg_id: int) -> wire.Message:
    with anyio.fail_after(5):
        while True:  # ends with the answer (or the bound)
            msg = await c.inbox.receive()
            if msg.get("id") == msg_id and "method" not in msg:
                return msg


async def wait_released(service: GatewayService) -> None:
    """Releases happen in the call's task as it unwinds: let it run."""
    with anyio.fail_after(2):
        while held(service) != NOTHING_HELD:  # ends when all is released (or the bound)
            await anyio.lowlevel.checkpoint()


# -- a call sent at once (no task): a step that fails gives the lease share back ------


async def test_fast_path_start_failure_releases_the_lease_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fast path took a lease share and a progress route, then the
    upstream write failed with an error nothing expects: before the fix the
    share stayed taken, so an exclusive call (MRTR) could never get the session."""
    async with gateway(legacy_server({"tools/call": echo})) as c:
        session = await settle(c)

        def broken(*args: Any, **kwargs: Any) -> int:
            raise Injected("write failed")

        monkeypatch.setattr(session, "start_call", broken)
        with pytest.raises(Injected):
            await call_with_token(c, 10)
        assert held(c.service) == NOTHING_HELD
        monkeypatch.undo()
        assert "result" in await c.call("tools/call", {"name": "x", "arguments": {}})
        assert held(c.service) == NOTHING_HELD


async def test_a_session_gone_as_the_call_is_sent_fails_it_and_releases(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with gateway(legacy_server({"tools/call": echo})) as c:
        session = await settle(c)
        real = session.start_call
        calls = []

        def gone_once(*args: Any, **kwargs: Any) -> int:
            calls.append(1)
            if len(calls) == 1:
                raise UpstreamGone("exited")
            return real(*args, **kwargs)

        monkeypatch.setattr(session, "start_call", gone_once)
        await call_with_token(c, 11)
        reply = await answer_to(c, 11)
        assert "result" in reply or reply["error"]["data"]["source"] == wire.GATEWAY_SOURCE
        await wait_released(c.service)


# -- each step of the one path that can fail -----------------------------------------


def _fail_session_for(service: GatewayService, session: UpstreamSession) -> None:
    async def session_for(*args: Any, **kwargs: Any) -> UpstreamSession:
        raise UpstreamGone("upstream exited during start-up")

    service.pool.session_now = lambda *args, **kwargs: None  # type: ignore[method-assign]
    service.pool.session_for = session_for  # type: ignore[method-assign]


def _fail_lease_wait(service: GatewayService, session: UpstreamSession) -> None:
    async def acquire_shared() -> None:
        raise TimeoutError

    session.lease.can_share_now = lambda: False  # type: ignore[method-assign]
    session.lease.acquire_shared = acquire_shared  # type: ignore[method-assign]


def _fail_send(service: GatewayService, session: UpstreamSession) -> None:
    def start_call(*args: Any, **kwargs: Any) -> int:
        raise UpstreamNotReading("the server has not read the 9 bytes queued for it")

    session.start_call = start_call  # type: ignore[method-assign]


def _fail_call(service: GatewayService, session: UpstreamSession) -> None:
    """The call is sent, and fails before the server answers (its bound
    passes as it is sent, the hardest moment)."""
    real = session.start_call

    def start_call(*args: Any, **kwargs: Any) -> int:
        msg_id = real(*args, **kwargs)
        session.pending[msg_id].fail(UpstreamTimeout("upstream did not answer tools/call in 5s"))
        return msg_id

    session.start_call = start_call  # type: ignore[method-assign]


def _fail_answer(service: GatewayService, session: UpstreamSession) -> None:
    def send_nowait(msg: wire.Message) -> None:
        raise anyio.BrokenResourceError

    async def send(msg: wire.Message) -> None:
        raise anyio.BrokenResourceError

    for link in service.links:
        link.send, link.send_nowait = send, send_nowait


STEPS = {
    "session_for": _fail_session_for,
    "lease": _fail_lease_wait,
    "upstream write": _fail_send,
    "upstream call": _fail_call,
    "answer to the client": _fail_answer,
}


@pytest.mark.parametrize("step", list(STEPS))
async def test_a_failure_at_each_step_releases_everything(
    step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # More failures than max_inflight_per_client: a leaked slot would show.
    async with gateway(legacy_server({"tools/call": echo}), max_inflight_per_client=2) as c:
        session = await settle(c)
        send, send_nowait = c.link.send, c.link.send_nowait
        STEPS[step](c.service, session)
        for msg_id in (20, 21, 22):
            await call_with_token(c, msg_id)
            if step != "answer to the client":
                reply = await answer_to(c, msg_id)
                assert reply["error"]["data"]["source"] == wire.GATEWAY_SOURCE, reply
                assert reply["error"]["data"]["reason"] != "inflight-limit", reply
            await wait_released(c.service)
        for name in ("session_for", "session_now"):
            c.service.pool.__dict__.pop(name, None)
        session.__dict__.pop("start_call", None)
        session.lease.__dict__.pop("acquire_shared", None)
        session.lease.__dict__.pop("can_share_now", None)
        c.link.send, c.link.send_nowait = send, send_nowait
        assert "result" in await c.call("tools/call", {"name": "x", "arguments": {}})
        assert held(c.service) == NOTHING_HELD


async def test_a_call_cancelled_while_it_waits_for_the_lease_releases_everything() -> None:
    """2026-07-28 "Cancellation": the client gives up while the call waits
    for a session another call holds alone."""
    async with gateway(legacy_server({"tools/call": echo})) as c:
        session = await settle(c)
        blocker = object()
        await session.lease.acquire_exclusive(blocker)
        await call_with_token(c, 30)
        assert 30 in c.link.inflight  # waiting for the lease, as a task
        await anyio.lowlevel.checkpoint()
        await c.send(wire.notification("notifications/cancelled", {"requestId": 30}))
        session.lease.release_exclusive(blocker)
        await wait_released(c.service)
        assert "result" in await c.call("tools/call", {"name": "x", "arguments": {}})


# -- the HTTP front: the in-progress count and the request's link ----------------------


def _break_open(monkeypatch: pytest.MonkeyPatch, g: HttpGateway) -> None:
    def open_(self: HttpOutput, msg: wire.Message) -> Any:
        raise Injected("open")

    monkeypatch.setattr(HttpOutput, "open", open_)


def _break_handle(monkeypatch: pytest.MonkeyPatch, g: HttpGateway) -> None:
    async def handle(*args: Any, **kwargs: Any) -> None:
        raise Injected("handle")

    monkeypatch.setattr(g.service, "handle_client_message", handle)


def _break_answer(monkeypatch: pytest.MonkeyPatch, g: HttpGateway) -> None:
    async def answer(*args: Any, **kwargs: Any) -> None:
        raise Injected("answer")

    monkeypatch.setattr(http_calls, "answer_request", answer)


HTTP_STEPS = {"open the stream": _break_open, "hand over": _break_handle, "answer": _break_answer}


@pytest.mark.parametrize("step", list(HTTP_STEPS))
async def test_http_failure_at_each_step_releases_the_in_progress_count(
    step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue defect 3: a failure between counting a request and answering it
    leaked `HttpFront._busy`; after `http_max_concurrent` of them the
    principal got 429 for good."""
    async with http_gateway(legacy_server({"tools/call": echo}), http_max_concurrent=2) as g:
        assert (await g.modern("tools/call", {"name": "x"})).status_code == 200
        links = set(g.service.links)
        HTTP_STEPS[step](monkeypatch, g)
        for _ in range(3):
            with pytest.raises((Injected, BaseExceptionGroup)) as caught:
                await g.modern("tools/call", {"name": "x"})
            assert _is_injected(caught.value)
        assert g.front.access.busy == {}
        monkeypatch.undo()
        await wait_released(g.service)
        assert g.service.links == links
        for _ in range(3):
            assert (await g.modern("tools/call", {"name": "x"})).status_code == 200
        assert g.front.access.busy == {}
