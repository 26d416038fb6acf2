"""The MRTR bridge end to end over scripted peers (2026-07-28 basic/patterns/mrtr;
DESIGN §5.1.6-5.1.8, §5.2.5)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway import wire
from gateway.core.mrtr_hold_events import Expiry, OutcomeDue, WindDown
from gateway.core.request_state import Claims, Sealer, params_digest
from tests.mrtr_calls import (
    ELICIT,
    accept,
    ask_name,
    meta,
    mrtr_tool,
    retry,
    send_and_wait,
    start,
)
from tests.scripted import Recorder, ScriptedServer, gateway, legacy_server, modern_server

pytestmark = pytest.mark.anyio


async def two_at_once(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    results: dict[str, Any] = {}

    async def one(method: str, params: dict[str, Any]) -> None:
        results[method] = await server.ask(method, params)

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, "elicitation/create", ELICIT)
        tg.start_soon(one, "sampling/createMessage", {"messages": [], "maxTokens": 3})
    text = (
        f"{results['elicitation/create']['result']['content']['name']} / "
        f"{results['sampling/createMessage']['result']['content']['text']}"
    )
    return {"content": [{"type": "text", "text": text}]}


async def two_rounds(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    first = await server.ask("elicitation/create", ELICIT)
    roots = await server.ask("roots/list")
    text = f"{first['result']['content']['name']} @ {roots['result']['roots'][0]['uri']}"
    return {"content": [{"type": "text", "text": text}]}


# -- modern client → legacy server ------------------------------------------------


async def test_elicitation_round_trip() -> None:
    seen = Recorder()
    async with gateway(legacy_server({"tools/call": ask_name}, log=seen)) as c:
        first = await start(c, "ask_name")
        result = first["result"]
        assert result["resultType"] == "input_required"
        assert result["inputRequests"] == {
            "input-1": {"method": "elicitation/create", "params": ELICIT}
        }
        final = await retry(c, first, {"input-1": accept("Ada")}, msg_id=2)
        answer = next(m for m in seen if m.get("id") == "srv-1" and "result" in m)
    assert final["id"] == 2
    assert final["result"]["content"][0]["text"] == "Hello, Ada"
    assert final["result"]["resultType"] == "complete"
    assert answer["result"] == accept("Ada")
    calls = [m for m in seen if m.get("method") == "tools/call"]
    assert len(calls) == 1  # hold mode: the original call was never re-sent
    assert "inputResponses" not in calls[0]["params"]


async def roots_then_name(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    # server-everything asks roots/list 350 ms after initialized, inside
    # whatever call then runs; here inside the call, before its own question.
    roots = await server.ask("roots/list")
    answer = await server.ask("elicitation/create", ELICIT)
    code = (roots.get("error") or {}).get("code")
    return {"content": [{"type": "text", "text": f"{answer['result']['content']['name']} {code}"}]}


async def test_a_held_call_is_not_failed_for_a_roots_list_its_client_did_not_declare() -> None:
    """A call of a client that declared elicitation (not roots) holds the
    session; the server's roots/list during it belongs to the session, not
    to the call: refused upstream (-32601, as outside any call), and the
    call goes on to its own elicitation round. It used to fail -32021."""
    seen = Recorder()
    caps: dict[str, Any] = {"elicitation": {"form": {}}}
    async with gateway(legacy_server({"tools/call": roots_then_name}, log=seen)) as c:
        first = await start(c, "roots_then_name", caps=caps)
        result = first["result"]
        assert result["resultType"] == "input_required", first
        assert [r["method"] for r in result["inputRequests"].values()] == ["elicitation/create"]
        (key,) = result["inputRequests"]
        params = {
            "name": "roots_then_name",
            "arguments": {},
            "_meta": meta(caps),
            "inputResponses": {key: accept("Ada")},
            "requestState": result["requestState"],
        }
        final = await send_and_wait(c, wire.request(2, "tools/call", params), None)
        refusal = next(m for m in seen if m.get("id") == "srv-1")
    assert final["result"]["content"][0]["text"] == f"Ada {wire.METHOD_NOT_FOUND}"
    assert "roots belong to the session" in refusal["error"]["message"]


async def test_concurrent_server_requests_go_out_in_one_input_required() -> None:
    async with gateway(legacy_server({"tools/call": two_at_once})) as c:
        first = await start(c, "two")
        keys = first["result"]["inputRequests"]
        assert sorted(r["method"] for r in keys.values()) == [
            "elicitation/create",
            "sampling/createMessage",
        ]
        answers = {
            k: accept("Bo")
            if r["method"] == "elicitation/create"
            else {"role": "assistant", "content": {"type": "text", "text": "sampled"}, "model": "m"}
            for k, r in keys.items()
        }
        final = await retry(c, first, answers, msg_id=2, name="two")
    assert final["result"]["content"][0]["text"] == "Bo / sampled"


async def test_bad_retries_are_rejected_and_leave_the_call_intact() -> None:
    """2026-07-28 MRTR "Error Handling": a requestState that does not verify,
    comes from another gateway instance, is not a string, or is presented with
    other params is -32602, nothing reaches the server, and the parked call
    still takes a correct retry. The decisions are playbooks in
    test_mrtr_hold.py (test_forged_states_are_rejected_and_leave_the_call_parked,
    test_bad_retries_are_rejected_and_leave_the_call_parked,
    test_a_state_already_used_is_rejected, test_a_parked_call_is_continued_by_its_retry);
    this is the wiring: the state and params as the client sent them."""
    seen = Recorder()
    async with gateway(
        legacy_server({"tools/call": ask_name}, log=seen), state_key="k" * 32, instance_id="gw-1"
    ) as c:
        first = await start(c, "ask_name")
        before = len(seen)
        state = first["result"]["requestState"]
        tampered = state[:-3] + ("AAA" if not state.endswith("AAA") else "BBB")
        other = Sealer(b"k" * 32, "gw-2").seal(
            Claims("gw-2", "local", "tools/call", "x", 1, 2**62, handle="h")
        )
        cases = [
            (tampered, {"input-1": accept("x")}, "verification"),
            (other, {"input-1": accept("x")}, "another gateway instance"),
            (42, {"input-1": accept("x")}, "must be a string"),
        ]
        for n, (bad_state, responses, why) in enumerate(cases, start=10):
            bad = await retry(c, first, responses, msg_id=n, state=bad_state)
            assert bad["error"]["code"] == wire.INVALID_PARAMS, bad
            assert why in bad["error"]["message"]
        # Different params under the same state: another request.
        other_params = await retry(c, first, {"input-1": accept("x")}, msg_id=20, name="other")
        assert "other params" in other_params["error"]["message"]
        assert len(seen) == before  # nothing upstream was touched
        final = await retry(c, first, {"input-1": accept("Di")}, msg_id=30)
        assert final["result"]["content"][0]["text"] == "Hello, Di"


async def test_a_gateway_rolling_its_key_seals_with_the_first_and_opens_with_any() -> None:
    """Issue #13: "State-key rotation without downtime: several keys, the
    first seals and all open". The wiring of `[mrtr] state_key = [new, old]`:
    the state the gateway issues is sealed with the new key, and the same
    claims sealed with the old key (as a replica not yet rolled issues them)
    continue the parked call."""
    new, old = "n" * 32, "o" * 32
    async with gateway(
        legacy_server({"tools/call": ask_name}), state_key=(new, old), instance_id="gw-1"
    ) as c:
        first = await start(c, "ask_name")
        state = first["result"]["requestState"]
        claims = Sealer(new.encode(), "gw-1").open(
            state,
            principal="local",
            method="tools/call",
            digest=params_digest({"name": "ask_name", "arguments": {}}),
            now_ms=0,
        )
        by_old_key = Sealer(old.encode(), "gw-1").seal(claims)
        assert by_old_key != state
        final = await retry(c, first, {"input-1": accept("Ro")}, msg_id=2, state=by_old_key)
    assert final["result"]["content"][0]["text"] == "Hello, Ro"


async def test_state_of_another_principal_is_rejected() -> None:
    """A requestState is bound to the principal it was issued to (DESIGN
    §5.1.6): the wiring of the link's principal into the check (the decision:
    test_mrtr_hold.py::test_forged_states_are_rejected_and_leave_the_call_parked)."""
    # Sessions are never shared across principals: mallory gets her own.
    async with gateway(legacy_server({"tools/call": ask_name}), max_sessions=2) as c:
        first = await start(c, "ask_name")
        mallory, _ = c.open_link(principal="mallory")
        stolen = await retry(c, first, {"input-1": accept("M")}, msg_id=2, link=mallory)
        assert "another principal" in stolen["error"]["message"]
        final = await retry(c, first, {"input-1": accept("Al")}, msg_id=3)
    assert final["result"]["content"][0]["text"] == "Hello, Al"


async def test_a_parked_call_that_is_never_retried_is_cleaned_up() -> None:
    """A parked call whose state expires is refused upstream and cleaned up.

    Issue defect: "100 parked MRTR calls expiring at once kill the mcp 1.30
    upstream". The gateway used to cancel the call as well, so the
    cancellation reached the server while it wrote the result the refusal had
    produced; the server now hears only the refusal when that ends the call.
    """
    seen = Recorder()
    async with gateway(legacy_server({"tools/call": ask_name}, log=seen)) as c:
        first = await start(c, "ask_name")
        assert c.service.bridge.held
        (entry,) = c.service.bridge.held.values()
        c.service.bridge.fire_timer(Expiry(entry.key))  # the state_ttl timer fires
        refused = await seen.wait_until(lambda m: m.get("id") == "srv-1", timeout=3)
        assert refused["error"]["code"] == wire.INTERNAL_ERROR
        # The server ended the call itself on hearing no answer would come, so
        # it is not cancelled as well (see test_expiry_* below).
        with anyio.fail_after(3):
            await entry.finished.wait()
        assert not any(m.get("method") == "notifications/cancelled" for m in seen)
        assert not c.service.bridge.held
        session = next(iter(c.service.pool.sessions.values()))
        assert session.lease.holder is None and not session.pending
        late = await retry(c, first, {"input-1": accept("Z")}, msg_id=2)
        assert late["error"]["code"] == wire.INVALID_PARAMS
        # The session is free for the next call.
        nxt = await start(c, "ask_name", msg_id=3)
        assert nxt["result"]["resultType"] == "input_required"


async def test_a_bridged_call_with_no_outcome_ends_at_request_timeout() -> None:
    """request_timeout bounds the wait for a result or an input request (the
    OutcomeDue timer, fired here by the test): the client hears a clear
    upstream-timeout error with its own id, and the call is cancelled upstream
    once the wind-down has passed (its WindDown timer, fired by the test)."""
    seen = Recorder()

    async def silent(server: ScriptedServer, msg: wire.Message) -> None:
        await anyio.sleep_forever()

    async with gateway(legacy_server({"tools/call": silent}, log=seen)) as c:
        params = {"name": "silent", "arguments": {}, "_meta": meta()}
        await c.send(wire.request(7, "tools/call", params))
        await seen.wait_for("tools/call")
        (key,) = c.service.bridge.entries
        c.service.bridge.fire_timer(OutcomeDue(key))
        reply = await c.next()
        assert not any(m.get("method") == "notifications/cancelled" for m in seen)
        c.service.bridge.fire_timer(WindDown(key))  # started before the reply went out
        await seen.wait_for("notifications/cancelled")
    assert reply["id"] == 7
    assert reply["error"]["data"]["reason"] == "upstream-timeout"
    assert reply["error"]["message"].startswith("Upstream did not answer within")


async def test_a_retry_that_waited_for_the_session_while_its_call_ended_frees_the_session() -> None:
    """A retry checks its state, then waits for the session another bridged
    call holds; meanwhile the parked call ends upstream by itself. On main the
    retry then took the session for a call that had already ended, and
    nothing gave it back: every later call on that session waited for it and
    failed session-busy. The retry is answered, and the session is free."""
    seen = Recorder()
    quit_asking = anyio.Event()
    unblock = anyio.Event()

    async def tools(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        name = msg["params"]["name"]
        if name == "asks_then_quits":
            await server.emit(wire.request("srv-q", "elicitation/create", ELICIT))
            await quit_asking.wait()
            text = "gave up asking"
        elif name == "blocks":
            await unblock.wait()
            text = "done"
        else:
            text = "ok"
        return {"content": [{"type": "text", "text": text}]}

    async with gateway(legacy_server({"tools/call": tools}, log=seen)) as c:
        first = await start(c, "asks_then_quits")  # parked: the session is free
        (parked,) = c.service.bridge.held.values()
        blocks = {"name": "blocks", "arguments": {}, "_meta": meta()}
        await c.send(wire.request(2, "tools/call", blocks))
        await seen.wait_until(lambda m: (m.get("params") or {}).get("name") == "blocks")
        params = {
            "name": "asks_then_quits",
            "arguments": {},
            "_meta": meta(),
            "inputResponses": {"input-1": accept("Q")},
            "requestState": first["result"]["requestState"],
        }
        await c.send(wire.request(3, "tools/call", params))
        await anyio.wait_all_tasks_blocked()  # the retry waits for the session
        quit_asking.set()
        with anyio.fail_after(3):
            await parked.finished.wait()  # the parked call ended while its retry waited
        unblock.set()
        answers: dict[Any, wire.Message] = {}
        while len(answers) < 2:
            msg = await c.next()
            if "method" not in msg:
                answers[msg["id"]] = msg
        (session,) = c.service.pool.sessions.values()
        assert session.lease.holder is None
        later = await start(c, "ok", msg_id=4, caps={"elicitation": {"form": {}}})
    assert answers[3]["result"]["content"][0]["text"] == "gave up asking"
    assert answers[2]["result"]["content"][0]["text"] == "done"
    assert later["result"]["content"][0]["text"] == "ok"


async def test_cancelling_a_retry_cancels_the_call_upstream() -> None:
    """2026-07-28 "Cancellation": the client's notifications/cancelled for its
    retry closes the parked call, and a call still running once the wind-down
    has passed (its WindDown timer, fired by the test) is cancelled upstream.
    The decisions: test_mrtr_hold.py::test_a_cancelled_retry_closes_the_call."""
    seen = Recorder()

    async def hangs_after_answer(server: ScriptedServer, msg: wire.Message) -> None:
        await server.ask("elicitation/create", ELICIT)
        await anyio.sleep_forever()

    async with gateway(legacy_server({"tools/call": hangs_after_answer}, log=seen)) as c:
        first = await start(c, "hang")
        (entry,) = c.service.bridge.held.values()
        params = {
            "name": "hang",
            "arguments": {},
            "_meta": meta(),
            "inputResponses": {"input-1": accept("Q")},
            "requestState": first["result"]["requestState"],
        }
        await c.send(wire.request(2, "tools/call", params))
        await seen.wait_for("notifications/initialized")
        await seen.wait_until(lambda m: m.get("id") == "srv-1")  # the answer went upstream
        await c.send(wire.notification("notifications/cancelled", {"requestId": 2}))
        await anyio.wait_all_tasks_blocked()  # the retry's task has ended
        assert not c.service.bridge.held  # closed before the wind-down began
        assert WindDown(entry.key) in c.service.bridge.runner.timers
        assert not any(m.get("method") == "notifications/cancelled" for m in seen)
        c.service.bridge.fire_timer(WindDown(entry.key))
        await seen.wait_for("notifications/cancelled")


async def test_a_call_needing_an_undeclared_capability_gets_32021() -> None:
    """2026-07-28 "Per-request protocol fields": a server MUST answer -32021 when
    processing needs a capability the client did not declare; the gateway
    answers so for the legacy server, whose request is refused. A server that
    then ends the call itself is not also sent a cancellation (the issue's
    expiry defect: the two together break mcp 1.30).

    A client that declared no feature at all is not the bridge's (the service
    answers for it); one that declared some is, and its case is a playbook:
    test_mrtr_hold.py::test_an_undeclared_capability_is_32021_and_the_call_is_wound_down."""
    seen = Recorder()
    async with gateway(legacy_server({"tools/call": ask_name}, log=seen)) as c:
        reply = await start(c, "ask_name", caps={})
        refused = await seen.wait_until(lambda m: m.get("id") == "srv-1")
        await c.call("tools/list", {})  # the tool's own end is in by now
    assert reply["error"]["code"] == wire.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert reply["error"]["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}
    assert refused["error"]["code"] == wire.METHOD_NOT_FOUND
    assert not any(m.get("method") == "notifications/cancelled" for m in seen)


async def test_a_32021_call_the_server_keeps_running_is_cancelled_after_the_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The -32021 paths bound the upstream call like an expiry does: refusal
    first, cancellation once WIND_DOWN has passed. Here the client that declared
    no feature (the service's); the bridge's case is a playbook:
    test_mrtr_hold.py::test_an_undeclared_capability_in_a_call_the_server_keeps_running."""
    monkeypatch.setattr("gateway.runtime.upstream_session.WIND_DOWN", 0, raising=False)

    async def stubborn(server: ScriptedServer, msg: wire.Message) -> None:
        await server.ask("elicitation/create", ELICIT)
        await anyio.sleep_forever()

    seen = Recorder()
    async with gateway(legacy_server({"tools/call": stubborn}, log=seen)) as c:
        reply = await start(c, "stubborn", caps={})
        await seen.wait_for("notifications/cancelled", timeout=3)
    assert reply["error"]["code"] == wire.MISSING_REQUIRED_CLIENT_CAPABILITY
    order = [m.get("method") or m.get("id") for m in seen]
    assert order.index("srv-1") < order.index("notifications/cancelled")


async def test_static_roots_answer_roots_outside_any_call() -> None:
    roots = ({"uri": "file:///srv", "name": "srv"},)

    async def asks_roots(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        answer = await server.ask("roots/list")
        return {"content": [{"type": "text", "text": str(answer.get("result"))}]}

    async with gateway(legacy_server({"tools/call": asks_roots}), static_roots=roots) as c:
        reply = await c.call("tools/call", {"name": "r"})  # a client with no roots capability
    assert "file:///srv" in reply["result"]["content"][0]["text"]


async def test_url_elicitation_required_error_becomes_input_required() -> None:
    calls = 0

    async def needs_url(server: ScriptedServer, msg: wire.Message) -> dict[str, Any] | wire.Message:
        nonlocal calls
        calls += 1
        if calls != 2:
            return wire.error_response(
                0,
                wire.URL_ELICITATION_REQUIRED,
                "auth needed",
                {
                    "elicitations": [
                        {
                            "mode": "url",
                            "elicitationId": "e-9",
                            "url": "https://x/auth",
                            "message": "Sign in",
                        }
                    ]
                },
            )
        return {"content": [{"type": "text", "text": "authorised"}]}

    async with gateway(legacy_server({"tools/call": needs_url})) as c:
        first = await start(c, "needs_url")
        req = first["result"]["inputRequests"]["url-1"]
        assert req == {
            "method": "elicitation/create",
            "params": {"mode": "url", "url": "https://x/auth", "message": "Sign in"},
        }
        declined = await retry(
            c, first, {"url-1": {"action": "decline"}}, msg_id=5, name="needs_url"
        )
        assert declined["error"]["data"]["reason"] == "elicitation-declined"
        assert calls == 1  # a declined link is not re-sent
        final = await retry(c, first, {"url-1": {"action": "accept"}}, msg_id=2, name="needs_url")
        no_url = await start(c, "needs_url", msg_id=3, caps={"elicitation": {}})
    assert final["result"]["content"][0]["text"] == "authorised"
    assert calls == 3
    # -32042 never reaches a modern client (2026-07-28 "Error Codes").
    assert no_url["error"]["code"] == wire.MISSING_REQUIRED_CLIENT_CAPABILITY


async def test_replay_mode_parks_nothing_and_reruns_the_call() -> None:
    """DESIGN §5.1.8 end to end: the run is stopped after its input_required and
    the retry re-runs the call upstream. A state is honoured once, and a
    refused retry leaves it usable: test_mrtr_hold.py (test_a_replay_state_is_honoured_once,
    test_a_refused_replay_retry_leaves_the_state_usable)."""
    seen = Recorder()
    async with gateway(
        legacy_server({"tools/call": ask_name}, log=seen), replay_tools=("ask_*",)
    ) as c:
        first = await start(c, "ask_name")
        (key,) = first["result"]["inputRequests"]
        assert key.startswith("replay-")
        assert not c.service.bridge.held
        await seen.wait_until(lambda m: m.get("id") == "srv-1" and "error" in m)
        final = await retry(c, first, {key: accept("Ed")}, msg_id=2, name="ask_name")
    assert final["result"]["content"][0]["text"] == "Hello, Ed"
    assert len([m for m in seen if m.get("method") == "tools/call"]) == 2


async def test_many_clients_each_get_their_own_answer() -> None:
    async with gateway(legacy_server({"tools/call": ask_name})) as c:
        results: dict[int, str] = {}

        async def client(n: int) -> None:
            link, _ = c.open_link()  # one principal: one shared upstream session
            first = await start(c, "ask_name", msg_id=1, link=link)
            final = await retry(c, first, {"input-1": accept(f"n{n}")}, msg_id=2, link=link)
            results[n] = final["result"]["content"][0]["text"]

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for n in range(32):
                    tg.start_soon(client, n)
    assert results == {n: f"Hello, n{n}" for n in range(32)}


# -- legacy client → modern server -----------------------------------------------


async def test_input_required_becomes_requests_to_the_legacy_client() -> None:
    seen = Recorder()
    needs = {
        "who": {"method": "elicitation/create", "params": ELICIT},
        "llm": {"method": "sampling/createMessage", "params": {"messages": []}},
    }
    async with gateway(modern_server({"tools/call": mrtr_tool(needs)}, log=seen)) as c:
        await c.initialize({"elicitation": {}, "sampling": {}})
        await c.send(wire.request(9, "tools/call", {"name": "t"}))
        asked = [await c.next(), await c.next()]  # both before either is answered
        assert {m["method"] for m in asked} == {"elicitation/create", "sampling/createMessage"}
        for m in asked:
            await c.send(
                wire.result_response(
                    m["id"],
                    {"action": "accept", "content": {"n": 1}}
                    if m["method"] == "elicitation/create"
                    else {"role": "assistant", "content": {}},
                )
            )
        final = await c.next()
    assert final["id"] == 9 and "resultType" not in final["result"]
    calls = [m for m in seen if m.get("method") == "tools/call"]
    assert len(calls) == 2 and calls[0]["id"] != calls[1]["id"]
    assert calls[1]["params"]["requestState"] == "state-0"  # echoed exactly
    assert set(calls[1]["params"]["inputResponses"]) == {"who", "llm"}


async def test_input_the_legacy_client_cannot_give_is_a_clear_error() -> None:
    needs = {"r": {"method": "roots/list"}}
    async with gateway(modern_server({"tools/call": mrtr_tool(needs)})) as c:
        await c.initialize({"sampling": {}})
        reply = await c.call("tools/call", {"name": "t"}, modern=False)
    assert reply["error"]["data"]["reason"] == "input-unavailable"
    assert "roots/list" in reply["error"]["message"]


async def test_a_refusing_legacy_client_ends_the_call_with_a_clear_error() -> None:
    needs = {"r": {"method": "roots/list"}}
    async with gateway(modern_server({"tools/call": mrtr_tool(needs)})) as c:
        await c.initialize({"roots": {}})
        await c.send(wire.request(4, "tools/call", {"name": "t"}))
        asked = await c.next()
        await c.send(wire.error_response(asked["id"], -32601, "no roots here"))
        reply = await c.next()
    assert reply["id"] == 4 and reply["error"]["data"]["reason"] == "client-refused"


async def test_url_elicitation_gets_an_id_for_2025_11_25_and_is_refused_for_older() -> None:
    needs = {
        "u": {
            "method": "elicitation/create",
            "params": {"mode": "url", "url": "https://a", "message": "go"},
        }
    }
    async with gateway(modern_server({"tools/call": mrtr_tool(needs)})) as c:
        await c.initialize({"elicitation": {"url": {}}})
        await c.send(wire.request(4, "tools/call", {"name": "t"}))
        asked = await c.next()
        assert isinstance(asked["params"]["elicitationId"], str)
        await c.send(wire.result_response(asked["id"], {"action": "accept"}))
        assert "result" in await c.next()
    async with gateway(modern_server({"tools/call": mrtr_tool(needs)})) as c:
        await c.initialize({"elicitation": {}}, version="2025-06-18")
        reply = await c.call("tools/call", {"name": "t"}, modern=False)
    assert "URL elicitation" in reply["error"]["message"]
