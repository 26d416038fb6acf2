"""A modern server's task answered for a legacy client, as playbooks
(issue #16: "A legacy client that does not use tasks but calls a tool the
modern server answers with a task gets the final result as an ordinary
`tools/call` result (the gateway polls, honouring `pollIntervalMilliseconds`)";
SEP-2663 "Task Polling", "Task Update Requests", "Task Cancellation"). No
sockets, no sleeps: the runtime's clock comes in the events."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway import era, translate, wire
from gateway.core import routing, task_shapes
from gateway.core.legacy_input import (
    AskClient,
    ClientAnswered,
    Finish,
    LegacyInputCall,
    PollUpstream,
    RetryUpstream,
    TaskPolling,
    UpstreamReplied,
)
from gateway.core.profile import UpstreamProfile
from gateway.core.routing import Forward, LegacyClientSession, Shape
from tests.gateway_error_finish import gateway_error
from tests.playbook import Playbook

META = {
    era.PROTOCOL_VERSION: "2026-07-28",
    era.CLIENT_CAPABILITIES: {"extensions": {task_shapes.EXTENSION: {}}},
}
CALL = Forward(
    "tools/call", {"name": "slow", "arguments": {}, "_meta": META}, Shape.TO_LEGACY, era.Era.LEGACY
)
ELICIT = {"method": "elicitation/create", "params": {"message": "name?", "requestedSchema": {}}}
POLLING = TaskPolling(default_interval=1.0, min_interval=0.05, max_interval=30.0, max_wait=600)


def task(status: str = "working", **fields: Any) -> dict[str, Any]:
    return {
        "taskId": "t-1",
        "status": status,
        "createdAt": "2026-12-02T00:00:00Z",
        "lastUpdatedAt": "2026-12-02T00:00:00Z",
        "ttlMs": 60_000,
        "pollIntervalMs": 200,
        **fields,
    }


def created(**fields: Any) -> wire.Message:
    return wire.result_response(90, {"resultType": "task", **task(**fields)})


def polled(status: str = "working", **fields: Any) -> wire.Message:
    return wire.result_response(91, {"resultType": "complete", **task(status, **fields)})


def tasks_request(method: str, **fields: Any) -> Forward:
    return Forward(
        method, {"taskId": "t-1", **fields, "_meta": META}, Shape.TO_LEGACY, era.Era.LEGACY
    )


GET = tasks_request("tasks/get")


def loop(max_rounds: int = 3) -> LegacyInputCall:
    ids = itertools.count(1)
    return LegacyInputCall(
        CALL,
        "client-1",
        {"elicitation": {}},
        "2025-11-25",
        max_rounds,
        new_elicitation_id=lambda: f"e{next(ids)}",
        polling=POLLING,
    )


def is_gateway_error(command: object, reason: str, text: str) -> bool:
    """A Finish with the gateway's own error of this reason, its message
    containing `text` (outside a playbook)."""
    if not isinstance(command, Finish):
        return False
    error = command.reply.get("error") or {}
    data = error.get("data") or {}
    return (
        command.reply.get("id") == "client-1"
        and data == {"source": wire.GATEWAY_SOURCE, "reason": reason}
        and text in error.get("message", "")
    )


RESULT = {"content": [{"type": "text", "text": "done"}], "isError": False}


def test_a_task_is_polled_at_its_interval_until_its_result() -> None:
    """ "Clients SHOULD respect the pollIntervalMs": tasks/get after 0.2 s,
    with the call's `_meta` (the extension declared); the completed task's
    inlined result is the call's result, under the client's id."""
    call = loop()
    assert (
        Playbook(call)
        >> UpstreamReplied(created(), now=0.0)
        << PollUpstream(GET, 0.2)
        >> UpstreamReplied(polled("working", pollIntervalMs=1500), now=0.3)
        << PollUpstream(GET, 1.5)
        >> UpstreamReplied(polled("completed", result=RESULT), now=2.0)
        << Finish(wire.result_response("client-1", RESULT))
    )
    assert call.open_task is None and call.cancel_request() is None and call.polls == 2


def test_a_failed_task_is_the_calls_error() -> None:
    """ "failed: The request failed due to a JSON-RPC error": the client gets
    that error, as the call itself would have failed."""
    error = {"code": -32603, "message": "boom", "data": {"x": 1}}
    assert (
        Playbook(loop())
        >> UpstreamReplied(created(), now=0.0)
        << PollUpstream(GET, 0.2)
        >> UpstreamReplied(polled("failed", error=error), now=1.0)
        << Finish(wire.error_response("client-1", -32603, "boom", {"x": 1}))
    )


def test_a_task_the_server_cancelled_is_a_clear_error() -> None:
    assert (
        Playbook(loop())
        >> UpstreamReplied(created(status="cancelled"), now=0.0)
        << gateway_error("task-cancelled", "cancelled its task t-1")
    )


def test_input_during_the_task_is_asked_of_the_client_and_sent_with_tasks_update() -> None:
    """ "Task Update Requests": the task's inputRequests become server
    requests to the legacy client; its answers go back in tasks/update; the
    acknowledgement is "eventually consistent", so the gateway polls at once."""
    answers = {"name": {"action": "accept", "content": {"name": "Ada"}}}
    assert (
        Playbook(loop())
        >> UpstreamReplied(created(), now=0.0)
        << PollUpstream(GET, 0.2)
        >> UpstreamReplied(polled("input_required", inputRequests={"name": ELICIT}), now=0.5)
        << AskClient({"name": ELICIT})
        >> ClientAnswered(answers)
        << RetryUpstream(tasks_request("tasks/update", inputResponses=answers))
        >> UpstreamReplied(wire.result_response(92, {"resultType": "complete"}), now=0.6)
        << PollUpstream(GET, 0.0)
        >> UpstreamReplied(polled("completed", result=RESULT), now=0.7)
        << Finish(wire.result_response("client-1", RESULT))
    )


def test_input_before_the_task_then_the_task() -> None:
    """SEP-2663: a server may resolve MRTR rounds before it creates the task
    ("Task Creation"); both happen in one call's loop."""
    first = wire.result_response(
        90, {"resultType": "input_required", "inputRequests": {"n": ELICIT}, "requestState": "s"}
    )
    answers = {"n": {"action": "accept", "content": {"name": "Ada"}}}
    retry_params = {**(CALL.params or {}), "inputResponses": answers, "requestState": "s"}
    assert (
        Playbook(loop())
        >> UpstreamReplied(first, now=0.0)
        << AskClient({"n": ELICIT})
        >> ClientAnswered(answers)
        << RetryUpstream(Forward("tools/call", retry_params, Shape.TO_LEGACY, era.Era.LEGACY))
        >> UpstreamReplied(created(), now=0.1)
        << PollUpstream(GET, 0.2)
    )


def test_a_task_that_outlives_its_ttl_is_given_up_and_cancelled() -> None:
    """ "If the task has a non-null ttlMs, clients MAY treat the TTL as a
    backstop": past it the client gets a clear error, and the loop leaves
    the task open for the runtime to cancel (tasks/cancel)."""
    call = loop()
    assert (
        Playbook(call)
        >> UpstreamReplied(created(ttlMs=1000), now=0.0)
        << PollUpstream(GET, 0.2)
        >> UpstreamReplied(polled("working"), now=1.5)
        << gateway_error("task-timeout", "did not end")
    )
    assert call.cancel_request() == tasks_request("tasks/cancel")


def test_without_a_ttl_the_gateways_max_wait_bounds_the_task() -> None:
    call = loop()
    call.handle(UpstreamReplied(created(ttlMs=None), now=0.0))
    [still] = call.handle(UpstreamReplied(polled("working", ttlMs=None), now=599.0))
    assert isinstance(still, PollUpstream)
    [over] = call.handle(UpstreamReplied(polled("working", ttlMs=None), now=600.0))
    assert is_gateway_error(over, "task-timeout", "did not end")


def test_a_task_the_server_lost_is_a_clear_error_and_not_cancelled() -> None:
    """ "Servers SHOULD return a JSON-RPC error if the taskId does not
    correspond to a known task" (expired, say): nothing to cancel."""
    call = loop()
    call.handle(UpstreamReplied(created(), now=0.0))
    lost = wire.error_response(91, wire.INVALID_PARAMS, "Task not found: t-1")
    [finish] = call.handle(UpstreamReplied(lost, now=1.0))
    assert is_gateway_error(finish, "task-lost", "Task not found")
    assert call.cancel_request() is None


def test_malformed_tasks_are_refused() -> None:
    """A hostile server: a task without an id, a status nobody defined, a
    completed task without its result, another task's state."""
    for bad in (
        created(taskId=""),
        created(status="sleeping"),
        created(status="completed"),
        created(taskId="x" * 2000),
    ):
        [finish] = loop().handle(UpstreamReplied(bad, now=0.0))
        assert is_gateway_error(finish, "upstream-malformed", "malformed"), bad
    call = loop()
    call.handle(UpstreamReplied(created(), now=0.0))
    other = wire.result_response(91, {"resultType": "complete", **task(taskId="t-2")})
    [finish] = call.handle(UpstreamReplied(other, now=1.0))
    assert is_gateway_error(finish, "upstream-malformed", "another task")
    assert call.cancel_request() == tasks_request("tasks/cancel")  # t-1 is still open


def test_task_input_rounds_are_bounded() -> None:
    call = loop(max_rounds=1)
    call.handle(UpstreamReplied(created(), now=0.0))
    asking = polled("input_required", inputRequests={"name": ELICIT})
    assert isinstance(call.handle(UpstreamReplied(asking, now=0.1))[0], AskClient)
    call.handle(ClientAnswered({"name": {"action": "decline"}}))
    call.handle(UpstreamReplied(wire.result_response(92, {"resultType": "complete"}), now=0.2))
    [finish] = call.handle(UpstreamReplied(asking, now=0.3))
    assert is_gateway_error(finish, "mrtr-rounds", "more than 1 times")


@given(
    interval=st.one_of(
        st.none(),
        st.booleans(),
        st.text(max_size=3),
        st.integers(min_value=-(10**12), max_value=10**12),
        st.floats(allow_nan=True, allow_infinity=True),
    )
)
def test_the_poll_delay_stays_within_its_bounds(interval: object) -> None:
    """Whatever a server says its interval is, the gateway neither polls in
    a tight loop nor waits without end."""
    delay = task_shapes.poll_delay({"pollIntervalMs": interval}, 1.0, 0.05, 30.0)
    assert 0.05 <= delay <= 30.0


NO_HINT = translate.CacheHint(0, "private")


def _route(
    profile_caps: dict[str, Any], method: str = "tools/call", on: bool = True
) -> dict[str, Any]:
    profile = UpstreamProfile(
        era.Era.MODERN, "2026-07-28", capabilities=profile_caps, server_info={}
    )
    session = LegacyClientSession("2025-11-25", {"elicitation": {}}, None, initialized=True)
    msg = wire.request(1, method, {"name": "slow", "arguments": {}})
    decision = routing.route_request(msg, session, profile, NO_HINT, tasks_for_legacy=on)
    assert isinstance(decision, Forward), decision
    meta = (decision.params or {})["_meta"]
    caps: dict[str, Any] = meta[era.CLIENT_CAPABILITIES]
    return caps


def test_the_extension_is_declared_for_a_legacy_clients_tools_call() -> None:
    """SEP-2663 "Capability Negotiation": a server MUST NOT answer with a task
    a request that did not declare the extension, and answers -32021 for a
    tool that needs one; the gateway polls for the legacy client, so it
    declares it, on tools/call only, to a server that offers it, when
    `[tasks] for_legacy_clients` is on."""
    offers: dict[str, Any] = {"extensions": {task_shapes.EXTENSION: {}}, "tools": {}}
    assert _route(offers)["extensions"] == {task_shapes.EXTENSION: {}}
    assert _route(offers)["elicitation"] == {}
    assert "extensions" not in _route({"tools": {}})
    assert "extensions" not in _route(offers, on=False)
    assert "extensions" not in _route(offers, method="prompts/get")
