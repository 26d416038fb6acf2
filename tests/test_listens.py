"""subscriptions/listen across eras (2026-07-28 basic/patterns/subscriptions:
"Acknowledgment", "Receiving Notifications", "Multiple Concurrent
Subscriptions", "Cancellation", "Graceful Closure"; DESIGN §5.1.9)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway import era, wire
from tests.mock_clock import on_mock_clock
from tests.scripted import Recorder, ScriptedServer, gateway, legacy_server, modern_server

pytestmark = pytest.mark.anyio

META = {era.PROTOCOL_VERSION: "2026-07-28", era.CLIENT_CAPABILITIES: {}}
CAPS = {"tools": {"listChanged": True}, "prompts": {}, "resources": {"subscribe": True}}


async def ok(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {}


def listen(msg_id: int, **notifications: Any) -> wire.Message:
    return wire.request(
        msg_id, "subscriptions/listen", {"notifications": notifications, "_meta": dict(META)}
    )


def sub_id(msg: wire.Message) -> Any:
    return msg["params"]["_meta"][era.SUBSCRIPTION_ID]


async def test_listen_on_a_legacy_server() -> None:
    seen = Recorder()
    handlers = {"resources/subscribe": ok, "resources/unsubscribe": ok}
    async with gateway(legacy_server(handlers, capabilities=CAPS, log=seen)) as c:
        await c.send(
            listen(
                7, toolsListChanged=True, promptsListChanged=True, resourceSubscriptions=["a://1"]
            )
        )
        ack = await c.next()
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert sub_id(ack) == 7
        # The server cannot notify prompt changes: omitted from the acknowledged subset.
        assert ack["params"]["notifications"] == {
            "toolsListChanged": True,
            "resourceSubscriptions": ["a://1"],
        }
        assert (await seen.wait_for("resources/subscribe"))["params"] == {"uri": "a://1"}
        server = c.upstream.spawned[0]
        await server.emit(wire.notification("notifications/resources/updated", {"uri": "a://2"}))
        await server.emit(wire.notification("notifications/prompts/list_changed"))
        await server.emit(wire.notification("notifications/tools/list_changed"))
        await server.emit(wire.notification("notifications/resources/updated", {"uri": "a://1"}))
        first, second = await c.next(), await c.next()
        assert (first["method"], sub_id(first)) == ("notifications/tools/list_changed", 7)
        assert second["params"]["uri"] == "a://1" and sub_id(second) == 7
        await c.send(wire.notification("notifications/cancelled", {"requestId": 7}))
        assert (await seen.wait_for("resources/unsubscribe"))["params"] == {"uri": "a://1"}
        with pytest.raises(TimeoutError):
            await c.next(timeout=0.2)  # a cancelled listen gets no answer


@on_mock_clock
async def test_one_upstream_subscription_per_uri_across_listeners() -> None:
    seen = Recorder()
    handlers = {"resources/subscribe": ok, "resources/unsubscribe": ok}
    async with gateway(legacy_server(handlers, capabilities=CAPS, log=seen)) as c:
        await c.send(listen(1, resourceSubscriptions=["a://1"]))
        await c.next()
        await c.send(listen(2, resourceSubscriptions=["a://1", "a://2"]))
        await c.next()
        await c.send(wire.notification("notifications/cancelled", {"requestId": 1}))
        await anyio.sleep(0.05)
        await c.send(wire.notification("notifications/cancelled", {"requestId": 2}))
        await seen.wait_for("resources/unsubscribe")
        await anyio.sleep(0.05)
    subscribed = [m["params"]["uri"] for m in seen if m.get("method") == "resources/subscribe"]
    unsubscribed = [m["params"]["uri"] for m in seen if m.get("method") == "resources/unsubscribe"]
    assert subscribed == ["a://1", "a://2"]
    assert sorted(unsubscribed) == ["a://1", "a://2"]


async def test_shutdown_ends_a_listen_gracefully() -> None:
    async with gateway(legacy_server(capabilities=CAPS)) as c:
        await c.send(listen(5, toolsListChanged=True))
        await c.next()
        c.service.end_subscriptions()
        final = await c.next()
    assert final["id"] == 5
    assert final["result"] == {"resultType": "complete", "_meta": {era.SUBSCRIPTION_ID: 5}}


async def test_bad_filter_is_invalid_params() -> None:
    async with gateway(legacy_server(capabilities=CAPS)) as c:
        reply = await c.call("subscriptions/listen", {"notifications": {"toolsListChanged": 1}})
    assert reply["error"]["code"] == wire.INVALID_PARAMS


async def test_listen_on_a_modern_server_keeps_the_clients_id() -> None:
    async def listen_handler(server: ScriptedServer, msg: wire.Message) -> None:
        await server.emit(
            wire.notification(
                "notifications/subscriptions/acknowledged",
                {
                    "_meta": {era.SUBSCRIPTION_ID: msg["id"]},
                    "notifications": {"toolsListChanged": True},
                },
            )
        )
        await server.emit(
            wire.notification(
                "notifications/tools/list_changed", {"_meta": {era.SUBSCRIPTION_ID: msg["id"]}}
            )
        )
        await anyio.sleep_forever()

    async with gateway(modern_server({"subscriptions/listen": listen_handler})) as c:
        await c.send(listen(42, toolsListChanged=True))
        ack, changed = await c.next(), await c.next()
    assert sub_id(ack) == 42 and sub_id(changed) == 42
    assert changed["method"] == "notifications/tools/list_changed"


async def test_shutdown_ends_a_listen_on_a_modern_server_gracefully() -> None:
    """Issue defect: "A same-era modern `subscriptions/listen` open at shutdown
    ends with -32603 'The gateway is shutting down'; end it with the completion
    result the subscriptions pattern describes" (2026-07-28 subscriptions
    "Graceful Closure": a successful response carrying the subscription id).
    The server is told to drop it."""
    seen = Recorder()
    async with gateway(modern_server({"subscriptions/listen": acks_and_waits}, log=seen)) as c:
        await c.send(listen(42, toolsListChanged=True))
        ack = await c.next()
        assert sub_id(ack) == 42
        upstream_id = next(m["id"] for m in seen if m.get("method") == "subscriptions/listen")
        c.service.end_subscriptions()
        final = await c.next()
        cancel = await seen.wait_for("notifications/cancelled")
    assert final["id"] == 42
    assert final["result"] == {"resultType": "complete", "_meta": {era.SUBSCRIPTION_ID: 42}}
    assert cancel["params"]["requestId"] == upstream_id


async def test_a_modern_servers_closing_result_names_the_clients_listen() -> None:
    """2026-07-28 subscriptions "Graceful Closure": the closing result's
    subscriptionId "matches the JSON-RPC id of the originating
    subscriptions/listen request", which for the client is its own id."""

    async def closes(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        return {"_meta": {era.SUBSCRIPTION_ID: msg["id"], "x/keep": 1}}

    async with gateway(modern_server({"subscriptions/listen": closes})) as c:
        reply = await c.call("subscriptions/listen", {"notifications": {"toolsListChanged": True}})
    assert reply["result"]["_meta"] == {era.SUBSCRIPTION_ID: reply["id"], "x/keep": 1}


async def acks_and_waits(server: ScriptedServer, msg: wire.Message) -> None:
    ack = {"_meta": {era.SUBSCRIPTION_ID: msg["id"]}, "notifications": {"toolsListChanged": True}}
    await server.emit(wire.notification("notifications/subscriptions/acknowledged", ack))
    await anyio.sleep_forever()


# -- a legacy session of a modern server (DESIGN §5.2.6) ---------------------------


def modern_listener(seen: list[wire.Message]) -> Any:
    async def handler(server: ScriptedServer, msg: wire.Message) -> None:
        seen.append(msg)
        ack = {
            "_meta": {era.SUBSCRIPTION_ID: msg["id"]},
            "notifications": msg["params"]["notifications"],
        }
        await server.emit(wire.notification("notifications/subscriptions/acknowledged", ack))
        await anyio.sleep_forever()

    return handler


async def test_legacy_session_hears_list_changed_and_resource_updates() -> None:
    listens: list[wire.Message] = []
    upstream = Recorder()
    caps = {"tools": {"listChanged": True}, "resources": {"subscribe": True}}
    behaviour = modern_server(
        {"subscriptions/listen": modern_listener(listens)}, capabilities=caps, log=upstream
    )
    async with gateway(behaviour) as c:
        init = await c.initialize()
        assert init["result"]["capabilities"]["resources"] == {"subscribe": True}
        await upstream.wait_for("subscriptions/listen")
        with anyio.fail_after(2):
            while not listens:  # noqa: ASYNC110 - the handler runs in another task
                await anyio.sleep(0.01)
        server = c.upstream.spawned[0]
        first_id = listens[0]["id"]
        assert listens[0]["params"]["notifications"] == {"toolsListChanged": True}
        await server.emit(
            wire.notification(
                "notifications/tools/list_changed", {"_meta": {era.SUBSCRIPTION_ID: first_id}}
            )
        )
        changed = await c.next()
        assert changed == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        reply = await c.call("resources/subscribe", {"uri": "r://x"}, modern=False)
        assert reply["result"] == {}
        second = listens[-1]
        assert second["params"]["notifications"] == {
            "toolsListChanged": True,
            "resourceSubscriptions": ["r://x"],
        }
        cancel = await upstream.wait_for("notifications/cancelled")
        assert cancel["params"]["requestId"] == first_id  # the old listen, once replaced
        await server.emit(
            wire.notification(
                "notifications/resources/updated",
                {"uri": "r://x", "_meta": {era.SUBSCRIPTION_ID: second["id"]}},
            )
        )
        updated = await c.next()
    assert updated["params"] == {"uri": "r://x"}


async def test_subscriptions_survive_an_upstream_restart() -> None:
    seen = Recorder()
    handlers = {"resources/subscribe": ok, "resources/unsubscribe": ok}
    behaviour = legacy_server(handlers, capabilities=CAPS, log=seen)
    async with gateway(behaviour, restart_backoff_initial=0.01) as c:
        await c.send(listen(3, toolsListChanged=True, resourceSubscriptions=["a://1"]))
        await c.next()  # the acknowledgement
        c.upstream.spawned[0].die()
        changed = await c.next()
        # The new process is subscribed again, and the listener told to re-fetch.
        assert (changed["method"], sub_id(changed)) == ("notifications/tools/list_changed", 3)
        assert len(c.upstream.spawned) == 2
        subscribes = [m for m in seen if m.get("method") == "resources/subscribe"]
        assert [m["params"]["uri"] for m in subscribes] == ["a://1", "a://1"]
        await c.upstream.spawned[1].emit(
            wire.notification("notifications/resources/updated", {"uri": "a://1"})
        )
        updated = await c.next()
    assert updated["params"]["uri"] == "a://1" and sub_id(updated) == 3


async def test_a_listen_that_arrives_as_shutdown_begins_ends_gracefully() -> None:
    """A listen sent just before the client's input ends registers after the
    shutdown's end_subscriptions ran: it must still get its closing result
    (2026-07-28 subscriptions "Graceful Closure"), not wait out the shutdown
    grace and end with -32603."""
    async with gateway(legacy_server(capabilities=CAPS)) as c:
        c.service.end_subscriptions()
        await c.send(listen(9, toolsListChanged=True))
        ack, final = await c.next(), await c.next()
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert final["id"] == 9
    assert final["result"] == {"resultType": "complete", "_meta": {era.SUBSCRIPTION_ID: 9}}


async def test_a_listen_to_a_modern_server_after_shutdown_began_ends_gracefully() -> None:
    """The same race on the same-era path: nothing is opened upstream, and the
    client gets the closing result at once."""
    seen = Recorder()
    async with gateway(modern_server({"subscriptions/listen": acks_and_waits}, log=seen)) as c:
        await c.call("tools/list", {})  # the upstream is up and settled
        c.service.end_subscriptions()
        await c.send(listen(43, toolsListChanged=True))
        final = await c.next()
    assert final["id"] == 43
    assert final["result"] == {"resultType": "complete", "_meta": {era.SUBSCRIPTION_ID: 43}}
    assert not [m for m in seen if m.get("method") == "subscriptions/listen"]
