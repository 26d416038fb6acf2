"""The upstream pool under several principals, after crashes and at a failed
start (issue "Nothing a client, a server or a connection sends can crash,
wedge or exhaust the gateway": the pool's defects)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway import era, wire
from gateway.client_link import ClientLink
from tests.mrtr_calls import accept, ask_name, retry, send_and_wait, start
from tests.scripted import Client, ScriptedServer, gateway, legacy_server

pytestmark = pytest.mark.anyio

PLAIN = {era.PROTOCOL_VERSION: "2026-07-28", era.CLIENT_CAPABILITIES: {}}


def counting() -> Callable[[ScriptedServer, wire.Message], Awaitable[dict[str, Any]]]:
    """A tool that counts its calls per process: the state a restart loses."""
    counts: dict[int, int] = {}

    async def count(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        counts[server.pid] = counts.get(server.pid, 0) + 1
        return {"content": [{"type": "text", "text": str(counts[server.pid])}]}

    return count


def principal(c: Client, name: str) -> ClientLink:
    link, _ = c.open_link(principal=name)
    return link


_ids = iter(range(1000, 100_000))


async def call_as(c: Client, link: ClientLink, name: str = "count") -> wire.Message:
    msg = wire.request(
        next(_ids), "tools/call", {"name": name, "arguments": {}, "_meta": dict(PLAIN)}
    )
    return await send_and_wait(c, msg, link)


def text(reply: wire.Message) -> str:
    return str(reply["result"]["content"][0]["text"])


# -- several principals, no churn ------------------------------------------------


async def test_two_principals_alternating_keep_their_processes_and_state() -> None:
    """Issue: "ten calls alternating between two principals start nine upstream
    processes (0.37 s and all server state lost each time)". Each principal
    keeps its own process (DESIGN §5.1.1, never shared), and both stay."""
    count = counting()
    async with gateway(legacy_server({"tools/call": count})) as c:
        alice, bob = principal(c, "alice"), principal(c, "bob")
        seen: dict[str, list[str]] = {"alice": [], "bob": []}
        for _ in range(5):
            for link in (alice, bob):
                seen[link.principal].append(text(await call_as(c, link)))
        spawned = list(c.upstream.spawned)
        closed = [s.closed for s in spawned]
        owners = sorted(s.key.principal for s in c.service.pool.sessions.values())
    # The start-up process went to alice; bob got one of his own; no more.
    assert len(spawned) == 2
    assert closed == [False, False]
    assert owners == ["alice", "bob"]
    assert seen == {"alice": ["1", "2", "3", "4", "5"], "bob": ["1", "2", "3", "4", "5"]}


async def test_a_parked_call_does_not_lock_out_another_principal() -> None:
    """Issue: "one principal's parked call locks the other out ("all 1
    upstream sessions are busy")"."""
    count = counting()

    async def tools(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        if msg["params"]["name"] == "ask_name":
            return await ask_name(server, msg)
        return await count(server, msg)

    async with gateway(legacy_server({"tools/call": tools})) as c:
        c.link.principal = "alice"
        first = await start(c, "ask_name")
        assert first["result"]["resultType"] == "input_required"
        bob = principal(c, "bob")
        other = await call_as(c, bob)
        final = await retry(c, first, {"input-1": accept("Al")}, msg_id=2)
    assert text(other) == "1"
    assert text(final) == "Hello, Al"


async def test_past_max_processes_the_least_recently_used_idle_session_goes() -> None:
    """The global bound: a new principal's session replaces the idle session
    used longest ago; the others keep their process and state."""
    count = counting()
    async with gateway(legacy_server({"tools/call": count}), max_processes=2) as c:
        alice, bob, carol = (principal(c, n) for n in ("alice", "bob", "carol"))
        await call_as(c, alice)
        await call_as(c, bob)
        await call_as(c, alice)  # bob is now the least recently used
        await call_as(c, carol)
        assert text(await call_as(c, alice)) == "3"  # alice's process lived on
        spawned = list(c.upstream.spawned)
        owners = sorted(s.key.principal for s in c.service.pool.sessions.values())
    assert len(spawned) == 3
    assert owners == ["alice", "carol"]
    assert spawned[1].closed  # bob's


async def test_when_every_process_is_busy_a_new_principal_gets_upstream_busy() -> None:
    """Sessions with a parked call are never evicted; the call that finds no
    room gets a clear gateway error, and the room comes back when one is idle."""

    async def tools(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        if msg["params"]["name"] == "ask_name":
            return await ask_name(server, msg)
        return {"content": [{"type": "text", "text": "ok"}]}

    async with gateway(legacy_server({"tools/call": tools}), max_processes=2) as c:
        c.link.principal = "alice"
        parked_a = await start(c, "ask_name", msg_id=1)
        bob = principal(c, "bob")
        parked_b = await send_and_wait(
            c,
            wire.request(
                2,
                "tools/call",
                {
                    "name": "ask_name",
                    "arguments": {},
                    "_meta": {
                        era.PROTOCOL_VERSION: "2026-07-28",
                        era.CLIENT_CAPABILITIES: {"elicitation": {}},
                    },
                },
            ),
            bob,
        )
        assert parked_b["result"]["resultType"] == "input_required"
        carol = principal(c, "carol")
        refused = await call_as(c, carol, "plain")
        done = await retry(c, parked_a, {"input-1": accept("Al")}, msg_id=3)
        admitted = await call_as(c, carol, "plain")
    error = refused["error"]
    assert error["data"] == {"source": "mcp-era-gateway", "reason": "upstream-busy"}
    assert "max_processes" in error["message"]
    assert text(done) == "Hello, Al"
    assert text(admitted) == "ok"


async def test_max_sessions_bounds_one_principal_not_all() -> None:
    """`max_sessions` keeps its meaning per principal: with 2, one principal's
    third feature set replaces its own idle session, not another's."""
    count = counting()
    async with gateway(legacy_server({"tools/call": count}), max_sessions=2) as c:
        alice = c.link
        alice.principal = "alice"
        bob = principal(c, "bob")
        await call_as(c, bob)
        features: list[dict[str, Any]] = [{"sampling": {}}, {"roots": {}}, {}]
        for caps in features:
            meta = {era.PROTOCOL_VERSION: "2026-07-28", era.CLIENT_CAPABILITIES: caps}
            msg = wire.request(
                next(_ids), "tools/call", {"name": "x", "arguments": {}, "_meta": meta}
            )
            await send_and_wait(c, msg, alice)
        keys = sorted(
            (s.key.principal, sorted(s.key.features)) for s in c.service.pool.sessions.values()
        )
    # (The start-up session, declaring every feature, waits for a taker.)
    assert keys == [
        ("alice", []),
        ("alice", ["roots"]),
        ("bob", []),
        ("local", ["elicitation", "roots", "sampling"]),
    ]


async def test_a_session_a_listen_relies_on_is_not_evicted() -> None:
    """DESIGN §5.1.9: a listen's upstream subscriptions live on its session;
    evicting it would silently end the listen's notifications."""

    async def ok(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        return {}

    handlers = {"resources/subscribe": ok, "resources/unsubscribe": ok, "tools/call": ok}
    caps = {"tools": {}, "resources": {"subscribe": True}}
    async with gateway(legacy_server(handlers, capabilities=caps), max_processes=1) as c:
        c.link.principal = "alice"
        await c.send(
            wire.request(
                1,
                "subscriptions/listen",
                {"notifications": {"resourceSubscriptions": ["a://1"]}, "_meta": dict(PLAIN)},
            )
        )
        assert (await c.next())["method"] == "notifications/subscriptions/acknowledged"
        refused = await call_as(c, principal(c, "bob"))
        alive = [not s.closed for s in c.upstream.spawned]
    assert refused["error"]["data"]["reason"] == "upstream-busy"
    assert alive == [True]


# -- backoff ---------------------------------------------------------------------


class FakeTime:
    """The pool's clock and sleep, driven by the test: a sleep is recorded and
    moves the clock on at once."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds
        await anyio.lowlevel.checkpoint()

    def drive(self, c: Client) -> None:
        c.service.pool.readiness.clock = self.clock
        c.service.pool.readiness.sleep = self.sleep


async def until(predicate: Any) -> None:
    """Let the gateway's tasks run until `predicate()` holds (no sleeping)."""
    with anyio.fail_after(2):
        while not predicate():  # each pass lets every ready task run once
            await anyio.lowlevel.checkpoint()


def failing_spawns(dead: range, handlers: dict[str, Any]) -> Any:
    """Spawns whose number is in `dead` exit at once; the others serve."""
    inner = legacy_server(handlers)
    spawns = 0

    async def behaviour(server: ScriptedServer) -> None:
        nonlocal spawns
        spawns += 1
        if spawns in dead:
            server.die()
            return
        await inner(server)

    return behaviour


async def test_the_backoff_starts_afresh_once_the_upstream_answers_again() -> None:
    """Issue: "the restart backoff grows to ~10 s and only resets after 30 s
    of health". A restart whose handshake succeeds resets it: the next crash
    waits restart_backoff_initial again, not the maximum."""
    count = counting()
    upstream = failing_spawns(range(2, 8), {"tools/call": count})
    args = {"name": "count", "arguments": {}}
    async with gateway(upstream, restart_backoff_initial=0.25, restart_backoff_max=10) as c:
        time = FakeTime()
        time.drive(c)
        pool = c.service.pool
        c.upstream.spawned[0].die()
        await until(lambda: pool.restarts == 1)
        outage = [await c.call("tools/call", args) for _ in range(6)]
        back = await c.call("tools/call", args)
        waits_during_outage = list(time.waits)
        exits = pool.restarts  # the outage's spawns count, as they exit while starting
        c.upstream.spawned[-1].die()
        await until(lambda: pool.restarts == exits + 1)
        after = await c.call("tools/call", args)
    assert all(r["error"]["data"]["reason"] == "upstream-failed" for r in outage)
    assert waits_during_outage == [0.25, 0.5, 1, 2, 4, 8, 10]
    assert text(back) == "1" and text(after) == "1"
    assert time.waits[7:] == [0.25]


async def test_an_http_upstream_that_accepts_connections_again_is_retried_at_once() -> None:
    """Issue: "an HTTP upstream back in 0.4 s still waits 10 s". A connect
    decides: reachable → try now; refused → wait out the backoff."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    upstream = failing_spawns(range(1, 4), {"tools/call": counting()})
    args = {"name": "count", "arguments": {}}
    async with gateway(
        upstream,
        upstream_url=f"http://127.0.0.1:{port}/mcp",
        restart_backoff_initial=30,
        restart_backoff_max=60,
    ) as c:
        time = FakeTime()
        time.drive(c)
        pool = c.service.pool
        assert pool.failure is not None  # the start failed: the backoff is 30 s
        first = await c.call("tools/call", args)  # reachable: retried at once
        exits = pool.restarts
        c.upstream.spawned[-1].die()
        await until(lambda: pool.restarts == exits + 1)
        again = await c.call("tools/call", args)  # reachable again: no wait
        waits_while_reachable = list(time.waits)
        await listener.aclose()
        exits = pool.restarts
        c.upstream.spawned[-1].die()
        await until(lambda: pool.restarts == exits + 1)
        refused = await c.call("tools/call", args)  # unreachable: the backoff applies
    assert text(first) == "1" and text(again) == "1" and text(refused) == "1"
    assert waits_while_reachable == []
    assert time.waits == [30]


async def test_over_http_two_token_principals_alternate_without_restarts(tmp_path: Path) -> None:
    """The issue's own scenario, through the HTTP front with [http] tokens and
    the default max_sessions = 1: ten calls alternating between two principals
    each reach their principal's one process (the flaky server answers with its
    pid), never a fresh one."""
    from tests.http_gateway_process import call as http_call
    from tests.http_gateway_process import gateway as http_gateway
    from tests.http_gateway_process import modern_headers

    tokens = '[http]\ntokens = { alice = "alice-token", bob = "bob-token" }\n'
    pids: dict[str, set[str]] = {"alice": set(), "bob": set()}
    async with http_gateway(tmp_path, config=tokens) as c:
        for i in range(10):
            who = "alice" if i % 2 == 0 else "bob"
            headers = {
                **modern_headers("tools/call", "pid"),
                "authorization": f"Bearer {who}-token",
            }
            reply = await c.post(
                "/mcp", json=http_call(i, "tools/call", name="pid"), headers=headers
            )
            pids[who].add(reply.json()["result"]["content"][0]["text"])
    assert len(pids["alice"]) == 1 and len(pids["bob"]) == 1
    assert pids["alice"] != pids["bob"]


async def test_a_failed_start_stops_every_process_it_started() -> None:
    """DESIGN §4: a process that dies in the probe is replaced and treated as
    legacy. When that second process then fails its handshake, it was left
    running (every process, lease and slot is released on every path)."""
    spawns = 0

    async def dies_then_refuses(server: ScriptedServer) -> None:
        nonlocal spawns
        spawns += 1
        if spawns == 1:
            server.die()
            return
        while True:  # ends when the gateway closes the pipe
            msg = await server.recv()
            if "id" in msg:
                await server.emit(wire.error_response(msg["id"], wire.INTERNAL_ERROR, "no"))

    async with gateway(dies_then_refuses) as c:
        failure = c.service.pool.failure
        closed = [s.closed for s in c.upstream.spawned]
    assert failure is not None
    assert closed == [True, True]
