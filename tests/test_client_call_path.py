"""A client call's one path (issue #30, "Runtime: one call path"): a call
with nothing to wait for is sent from the front's own read and answered
from the upstream reader, with no task; a task takes over only at a step
that waits, and comes to the same answer. Every upstream call, awaited or
not, is bounded by the session's deadlines (runtime/deadlines.py), which
the tests fire instead of sleeping. 2026-07-28 "Cancellation": a cancelled
request gets no answer and its server is told."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway import era, wire
from gateway.core import call_plan, task_shapes
from gateway.core.call_plan import Next, Served
from gateway.core.routing import Forward, Shape
from gateway.runtime.client_call import ClientCall
from gateway.runtime.upstream_session import UpstreamSession
from gateway.upstream_errors import UpstreamTimeout
from tests.scripted import MODERN_META, Client, ScriptedServer, gateway, legacy_server

pytestmark = pytest.mark.anyio


async def echo(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": msg["params"]["name"]}]}


async def silent(server: ScriptedServer, msg: wire.Message) -> None:
    return None


def count_tasks(monkeypatch: pytest.MonkeyPatch) -> list[ClientCall]:
    """The calls that went on in a task."""
    waited: list[ClientCall] = []
    real = ClientCall.wait_in_task

    def wait_in_task(self: ClientCall, step: Any) -> None:
        waited.append(self)
        real(self, step)

    monkeypatch.setattr(ClientCall, "wait_in_task", wait_in_task)
    return waited


async def settled(c: Client) -> UpstreamSession:
    assert "result" in await c.call("tools/call", {"name": "first", "arguments": {}})
    session = c.service.pool.session_now("local", {})
    assert session is not None
    return session


def tool_call(msg_id: int, name: str) -> wire.Message:
    return wire.request(msg_id, "tools/call", {"name": name, "arguments": {}, "_meta": MODERN_META})


async def only_pending(session: UpstreamSession) -> int:
    await anyio.wait_all_tasks_blocked()
    (upstream_id,) = session.pending
    return upstream_id


async def test_a_call_with_nothing_to_wait_for_takes_no_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with gateway(legacy_server({"tools/call": echo})) as c:
        await settled(c)
        waited = count_tasks(monkeypatch)
        for n in range(1, 6):
            reply = await c.call("tools/call", {"name": f"t{n}", "arguments": {}})
            assert reply["result"]["content"][0]["text"] == f"t{n}"
        assert waited == []
        assert not c.link.inflight


async def test_a_call_that_waits_for_the_lease_goes_on_in_a_task_to_the_same_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DESIGN §5.1.6: a call that must wait for the session's lease waits in
    a task; once the lease is free it is sent, and answered as any other."""
    async with gateway(legacy_server({"tools/call": echo})) as c:
        session = await settled(c)
        at_once = await c.call("tools/call", {"name": "same", "arguments": {}})
        waited = count_tasks(monkeypatch)
        holder = object()
        await session.lease.acquire_exclusive(holder)
        await c.send(tool_call(40, "same"))
        await anyio.wait_all_tasks_blocked()
        assert len(waited) == 1 and not session.pending  # waiting, not sent
        session.lease.release_exclusive(holder)
        reply = await c.next()
        assert reply["id"] == 40
        assert reply["result"] == at_once["result"]
        await anyio.wait_all_tasks_blocked()
        assert not c.link.inflight and session.lease.readers == 0


async def test_a_call_cancelled_while_upstream_tells_the_server_and_gets_no_answer() -> None:
    log: list[wire.Message] = []
    async with gateway(legacy_server({"tools/call": silent}, log=log)) as c:
        s = await settled_silently(c)
        await c.send(tool_call(7, "slow"))
        upstream_id = await only_pending(s)
        await c.send(wire.notification("notifications/cancelled", {"requestId": 7}))
        await anyio.wait_all_tasks_blocked()
        cancels = [m for m in log if m.get("method") == "notifications/cancelled"]
        assert [m["params"]["requestId"] for m in cancels] == [upstream_id]
        assert not s.pending and not s.deadlines and not c.link.inflight
        assert c.inbox.statistics().current_buffer_used == 0  # no answer


async def test_a_call_past_its_bound_fails_under_the_clients_id_and_the_server_is_told() -> None:
    log: list[wire.Message] = []
    async with gateway(legacy_server({"tools/call": silent}, log=log), request_timeout=5) as c:
        session = await settled_silently(c)
        await c.send(tool_call(8, "slow"))
        upstream_id = await only_pending(session)
        session.deadlines.fire_now(upstream_id)
        reply = await c.next()
        assert reply["id"] == 8
        assert reply["error"]["data"]["reason"] == "upstream-timeout"
        assert "within 5s" in reply["error"]["message"]
        await anyio.wait_all_tasks_blocked()
        (cancel,) = [m for m in log if m.get("method") == "notifications/cancelled"]
        assert cancel["params"] == {"requestId": upstream_id, "reason": "no reply within 5s"}
        assert not session.pending and not c.link.inflight


async def settled_silently(c: Client) -> UpstreamSession:
    """The era settled on a server that never answers tools/call."""
    await c.call("tools/list", {})
    session = c.service.pool.session_now("local", {})
    assert session is not None
    return session


async def test_an_awaited_call_is_bounded_and_cancelled_by_the_same_deadlines() -> None:
    log: list[wire.Message] = []
    async with gateway(legacy_server({"tools/call": silent}, log=log)) as c:
        session = await settled_silently(c)
        failed: list[BaseException] = []

        async def awaited() -> None:
            try:
                await session.call("tools/call", {"name": "x"}, timeout=30)
            except UpstreamTimeout as exc:
                failed.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(awaited)
            upstream_id = await only_pending(session)
            session.deadlines.fire_now(upstream_id)
        assert "within 30s" in str(failed[0])

        async with anyio.create_task_group() as tg:
            tg.start_soon(awaited)
            second = await only_pending(session)
            tg.cancel_scope.cancel()  # the caller gives up
        await anyio.wait_all_tasks_blocked()
        reasons = [m["params"] for m in log if m.get("method") == "notifications/cancelled"]
        assert reasons == [
            {"requestId": upstream_id, "reason": "no reply within 30s"},
            {"requestId": second, "reason": "cancelled by the client"},
        ]
        assert not session.pending and not session.deadlines


UNSUPPORTED = wire.error_response(1, wire.UNSUPPORTED_PROTOCOL_VERSION, "Unsupported version")
INPUT = wire.result_response(1, {"resultType": "input_required", "inputRequests": {}})
PLAIN = wire.result_response(1, {"content": []})


@pytest.mark.parametrize(
    ("shaped_for_legacy", "reply", "retried", "turn"),
    [
        (False, UNSUPPORTED, False, Next.DONE),  # a modern client sees its server's error
        (False, INPUT, False, Next.DONE),  # ... and its input requests
        (True, PLAIN, False, Next.DONE),
        (True, UNSUPPORTED, False, Next.REDISCOVER),  # DESIGN §5.2.7
        (True, UNSUPPORTED, True, Next.DONE),  # retried once only
        (True, INPUT, False, Next.INPUT_LOOP),  # DESIGN §5.2.5
        (True, INPUT, True, Next.INPUT_LOOP),
    ],
)
def test_what_comes_after_a_reply(
    shaped_for_legacy: bool, reply: wire.Message, retried: bool, turn: Next
) -> None:
    assert call_plan.after_reply(shaped_for_legacy, reply, retried) is turn


# -- how a routed call is served (call_plan.served_by) ---------------------------------

TASKS_ON = call_plan.ServeSettings(tasks_for_legacy=True, tasks_for_modern=True)
TASK_CAPS: dict[str, Any] = {"extensions": {task_shapes.EXTENSION: {}}}


def forward(method: str, shape: Shape, caps: dict[str, Any] | None = None) -> Forward:
    return Forward(method, {}, shape, era.Era.MODERN, caps or {})


@pytest.mark.parametrize(
    ("decision", "params", "server_caps", "served"),
    [
        (forward("tools/call", Shape.TO_MODERN), {}, {}, Served.FORWARD),
        (forward("tools/list", Shape.TO_LEGACY), {}, {}, Served.FORWARD),
        # DESIGN §5.2.6 and §5.1.9
        (forward("resources/subscribe", Shape.TO_LEGACY), {}, {}, Served.SESSION_SUBSCRIPTION),
        (forward("subscriptions/listen", Shape.TO_MODERN), {}, {}, Served.LISTEN),
        # 2025-11-25 tasks for a legacy client, on a modern server's
        (forward("tasks/get", Shape.TO_LEGACY), {}, {}, Served.LEGACY_TASK_METHOD),
        (forward("tools/call", Shape.TO_LEGACY), {"task": {}}, TASK_CAPS, Served.LEGACY_TASK_CALL),
        (forward("tools/call", Shape.TO_LEGACY), {"task": {}}, {}, Served.FORWARD),
        # DESIGN §5.4: the gateway's own tasks for a modern client
        (forward("tasks/get", Shape.TO_MODERN), {}, {}, Served.TASK_METHOD),
        (
            forward("tools/call", Shape.TO_MODERN, {"extensions": {task_shapes.EXTENSION: {}}}),
            {},
            {},
            Served.TASK_CALL,
        ),
        # DESIGN §5.1.6: a client that can be asked for input, or a retry
        (forward("tools/call", Shape.TO_MODERN, {"sampling": {}}), {}, {}, Served.MRTR),
        (forward("tools/call", Shape.TO_MODERN), {"requestState": "s"}, {}, Served.MRTR),
        (forward("tools/list", Shape.TO_MODERN, {"sampling": {}}), {}, {}, Served.FORWARD),
    ],
)
def test_how_a_routed_call_is_served(
    decision: Forward, params: dict[str, Any], server_caps: dict[str, Any], served: Served
) -> None:
    got = call_plan.served_by(decision, params, TASKS_ON, server_caps, lambda p: True, "local")
    assert got is served


def test_a_principal_past_its_share_of_tasks_is_served_as_any_call() -> None:
    """DESIGN §5.4: past its share a call is answered as any call (here the
    bridge's, its client declared sampling), and the share is asked only of
    a call that could become a task."""
    asked: list[bool] = []

    def no_room(principal: str) -> bool:
        asked.append(principal == "alice")
        return False

    caps: dict[str, Any] = {"sampling": {}, "extensions": {task_shapes.EXTENSION: {}}}
    decision = forward("tools/call", Shape.TO_MODERN, caps)
    assert call_plan.served_by(decision, {}, TASKS_ON, {}, no_room, "alice") is Served.MRTR
    assert asked == [True]
    call_plan.served_by(forward("tools/list", Shape.TO_MODERN), {}, TASKS_ON, {}, no_room, "alice")
    assert asked == [True]
