"""What one principal's upstream session says stays with that principal.

Sessions upstream are keyed by principal (DESIGN §5.1.1): clients with
different tokens never share one. A legacy server's notifications that name
no call (log messages, list changes, resource updates) go to the legacy
clients of the session they came from, never to another principal's clients,
who share nothing with that server session (2025-11-25 logging and
notifications are per session)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway import wire
from tests.scripted import Behaviour, Client, ScriptedServer, gateway, legacy_server, modern_server

pytestmark = pytest.mark.anyio

SECRET_LOG = wire.notification("notifications/message", {"level": "info", "data": "alice's secret"})
UPDATED = wire.notification("notifications/resources/updated", {"uri": "file:///alice/notes"})


async def _talkative_call(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    await server.emit(SECRET_LOG)
    await server.emit(UPDATED)
    return {"content": [{"type": "text", "text": "done"}]}


@pytest.mark.parametrize(
    "behaviour",
    [
        legacy_server({"tools/call": _talkative_call}, capabilities={"logging": {}, "tools": {}}),
        modern_server({"tools/call": _talkative_call}, capabilities={"logging": {}, "tools": {}}),
    ],
    ids=["legacy-server", "modern-server"],
)
async def test_a_principals_notifications_never_reach_another_principal(
    behaviour: Behaviour,
) -> None:
    """Alice's call makes the server log and update a resource; bob, a legacy
    client of another principal who asked for every log level, sees none of
    it, whether the server is legacy (a session per principal) or modern
    (one session for all). Fails on main: bob got both."""
    async with gateway(behaviour) as alice:
        bob_link, inbox = alice.open_link(principal="bob")
        bob = Client(alice.service, bob_link, inbox, alice.requests, alice.upstream)
        await alice.initialize()
        await bob.initialize()
        for client in (alice, bob):
            await client.call("logging/setLevel", {"level": "debug"}, modern=False)
        done = await alice.call("tools/call", {"name": "t", "arguments": {}}, modern=False)
        assert done["result"]["content"][0]["text"] == "done"
        # Routed on the upstream reader before alice's reply: a leak is queued by now.
        seen_by_bob = _drain(bob)
    assert all("alice" not in str(m) for m in seen_by_bob), seen_by_bob


async def test_a_server_request_never_goes_to_another_principals_lone_client() -> None:
    """A server request with no call in progress goes to the one client it
    can belong to: of the session's principal, never another's. Alice's
    session outlives her link; bob, another principal and the only client
    left, must not be asked for alice's session's roots (fails on main)."""
    go, answered = anyio.Event(), anyio.Event()
    answers: list[wire.Message] = []
    instances: list[ScriptedServer] = []

    async def at_start(server: ScriptedServer) -> None:
        instances.append(server)
        if len(instances) == 1:  # alice's session, the gateway's first
            await go.wait()
            answers.append(await server.ask("roots/list"))
            answered.set()

    async with gateway(legacy_server({}, on_initialized=at_start)) as alice:
        bob_link, inbox = alice.open_link(principal="bob")
        alice.service.links.discard(bob_link)  # bob connects once alice has left
        await alice.initialize({"roots": {}})
        alice.service.drop_link(alice.link)
        alice.service.links.add(bob_link)
        bob = Client(alice.service, bob_link, inbox, alice.requests, alice.upstream)
        await bob.initialize({"roots": {}})
        go.set()
        with anyio.fail_after(5):
            await answered.wait()
        seen_by_bob = _drain(bob)
    assert not any(m.get("method") == "roots/list" for m in seen_by_bob), seen_by_bob
    assert "error" in answers[0], answers


def _drain(client: Client) -> list[wire.Message]:
    """What a client has been sent and not read yet."""
    seen: list[wire.Message] = []
    while True:  # ends when the inbox is empty
        try:
            seen.append(client.inbox.receive_nowait())
        except anyio.WouldBlock:
            return seen
