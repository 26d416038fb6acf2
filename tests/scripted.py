"""In-memory upstream servers and a client harness for runtime tests.

A ScriptedServer plays the upstream over memory streams: no process, no pipe,
no sleep. Tests write its behaviour as a coroutine, or use the ready-made
legacy and modern servers below.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import orjson
import trio
import trio.abc
import trio.lowlevel
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gateway import era, wire
from gateway.backs.server_output import ServerExited, ServerOutput
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.runtime.service import GatewayService

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

_pids = itertools.count(1000)
Behaviour = Callable[["ScriptedServer"], Awaitable[None]]

MODERN_META: dict[str, Any] = {era.PROTOCOL_VERSION: "2026-07-28", era.CLIENT_CAPABILITIES: {}}


class Recorder(list[wire.Message]):
    """What a scripted server received, with a way to wait for a method."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = anyio.Event()

    def append(self, msg: wire.Message) -> None:
        super().append(msg)
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, method: str, timeout: float = 2) -> wire.Message:
        return await self.wait_until(lambda msg: msg.get("method") == method, timeout)

    async def wait_until(
        self, matches: Callable[[wire.Message], bool], timeout: float = 2
    ) -> wire.Message:
        with anyio.fail_after(timeout):
            while True:  # each pass waits for a new message
                for msg in self:
                    if matches(msg):
                        return msg
                await self._changed.wait()

    async def wait_for_reply(self, msg_id: wire.RequestId, timeout: float = 2) -> wire.Message:
        """The gateway's answer to the script's request `msg_id`."""
        with anyio.fail_after(timeout):
            while True:  # each pass waits for a new message
                for msg in self:
                    if "method" not in msg and msg.get("id") == msg_id:
                        return msg
                await self._changed.wait()


class ScriptedServer:
    """The gateway's view: a ServerConnection. The script's view: recv/send."""

    def __init__(self, max_bytes: int = 4 * 1024 * 1024) -> None:
        self.pid = next(_pids)
        self.tap: Callable[[str, wire.Message], None] | None = None
        self._in_send, self._in_recv = anyio.create_memory_object_stream[wire.Message](math.inf)
        self._out_send, self._out_recv = anyio.create_memory_object_stream[wire.Message | bytes](
            math.inf
        )
        # What the script writes goes through the stdio back's own framing and
        # screening, so a script can be as hostile as a real process.
        self._output = ServerOutput(max_bytes, self._answered, label=f"pid {self.pid}")
        self.closed = False
        # Set by a test: every write to the server fails, as to a broken pipe.
        self.fail_writes = False
        self._asked: dict[wire.RequestId, tuple[anyio.Event, list[wire.Message]]] = {}
        # The era a dual-era script fixed by its first request.
        self.era: str | None = None
        self._next_ask = 0

    # gateway side
    async def send(self, msg: wire.Message) -> None:
        if self.fail_writes:
            raise ServerExited(None)
        try:
            await self._in_send.send(msg)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise ServerExited(1) from exc

    def send_nowait(self, msg: wire.Message) -> None:
        if self.fail_writes:
            raise ServerExited(None)
        try:
            self._in_send.send_nowait(msg)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise ServerExited(1) from exc

    def cork(self) -> None:
        return None

    def uncork(self) -> None:
        return None

    def _answered(self, msg: wire.Message) -> None:
        """The gateway's answer to a malformed request of the script's."""
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._in_send.send_nowait(msg)

    async def receive_batch(self) -> list[wire.Message]:
        batch: list[wire.Message] = []
        while not batch:  # each pass takes what one pipe read would
            try:
                items = [await self._out_recv.receive()]
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                self._out_recv.close()
                raise ServerExited(1) from None
            while True:
                try:
                    items.append(self._out_recv.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                    break
            for item in items:
                data = item if isinstance(item, bytes) else wire.encode(item)
                batch += self._output.feed(data)
        return batch

    async def run_background(self) -> None:
        return None

    def terminate(self) -> None:
        self.die()

    async def aclose(self, grace: float = 5.0) -> int | None:
        self.closed = True
        self.close_streams()
        return 0

    # script side
    async def recv(self) -> wire.Message:
        return await self._in_recv.receive()

    async def emit(self, msg: wire.Message) -> None:
        await self._out_send.send(msg)

    async def emit_raw(self, data: bytes) -> None:
        """Write bytes as they are (junk, half lines, huge or deep JSON)."""
        await self._out_send.send(data)

    async def ask(self, method: str, params: dict[str, Any] | None = None) -> wire.Message:
        """Send a server-to-client request; the script's main loop routes the reply."""
        self._next_ask += 1
        msg_id = f"srv-{self._next_ask}"
        done, box = anyio.Event(), list[wire.Message]()
        self._asked[msg_id] = (done, box)
        await self.emit(wire.request(msg_id, method, params))
        with anyio.fail_after(5):
            await done.wait()
        return box[0]

    def route_reply(self, msg: wire.Message) -> bool:
        """Deliver a reply to a pending `ask`; False if it is not a reply."""
        if "method" in msg:
            return False
        msg_id = msg.get("id")
        waiting = self._asked.pop(msg_id, None) if isinstance(msg_id, str | int) else None
        if waiting is not None:
            waiting[1].append(msg)
            waiting[0].set()
        return True

    def close_streams(self) -> None:
        """Close every end (a server whose script never ran still has them)."""
        for stream in (self._in_send, self._in_recv, self._out_send, self._out_recv):
            stream.close()

    def die(self) -> None:
        """Exit abruptly: the gateway sees end of stream."""
        self._out_send.close()
        self._in_recv.close()


@dataclass
class Upstream:
    """Spawns ScriptedServers running `behaviour`; remembers each one."""

    behaviour: Behaviour
    tg: TaskGroup
    spawned: list[ScriptedServer] = field(default_factory=list)
    max_bytes: int = 4 * 1024 * 1024

    async def connect(self) -> ScriptedServer:
        server = ScriptedServer(self.max_bytes)
        self.spawned.append(server)

        async def run() -> None:
            try:
                await self.behaviour(server)
            except* (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass  # the gateway closed the pipe: the script ends
            finally:
                server.die()

        self.tg.start_soon(run)
        return server

    def close(self) -> None:
        """Close the streams of every server spawned (at the gateway's end)."""
        for server in self.spawned:
            server.close_streams()


Handler = Callable[[ScriptedServer, wire.Message], Awaitable[dict[str, Any] | wire.Message | None]]
# A table of handlers by method. A Mapping, not a dict: a table of handlers
# that each return a result (never None) is one too.
Handlers = Mapping[str, Handler]


def legacy_server(
    handlers: Handlers | None = None,
    *,
    capabilities: dict[str, Any] | None = None,
    version: str = "2025-11-25",
    log: list[wire.Message] | None = None,
    on_initialized: Callable[[ScriptedServer], Coroutine[Any, Any, None]] | None = None,
) -> Behaviour:
    """A legacy server: errors before initialize, then serves `handlers`.

    A handler returns a result dict, a full message (an error), or None to
    stay silent. Everything received is appended to `log`. `on_initialized`
    runs as a task when `notifications/initialized` arrives (a server that
    asks its client something at session start).
    """
    handlers = handlers or {}

    async def behaviour(server: ScriptedServer, server_tasks: TaskGroup) -> None:
        initialized = False
        while True:
            msg = await server.recv()
            if log is not None:
                log.append(msg)
            if on_initialized is not None and msg.get("method") == "notifications/initialized":
                server_tasks.start_soon(on_initialized, server)
            if server.route_reply(msg) or "id" not in msg:
                continue
            method = msg["method"]
            if method == "initialize":
                initialized = True
                await server.emit(
                    wire.result_response(
                        msg["id"],
                        {
                            "protocolVersion": version,
                            "capabilities": capabilities
                            if capabilities is not None
                            else {"tools": {}},
                            "serverInfo": {"name": "scripted-legacy", "version": "1"},
                        },
                    )
                )
                continue
            if not initialized:
                await server.emit(
                    wire.error_response(msg["id"], -32602, "Invalid request parameters")
                )
                continue
            handler = handlers.get(method)
            if handler is None:
                await server.emit(
                    wire.error_response(msg["id"], -32601, f"Method not found: {method}")
                )
                continue

            async def answer(m: wire.Message = msg, h: Handler = handler) -> None:
                out = await h(server, m)
                if out is None:
                    return
                if "jsonrpc" in out:
                    await server.emit({**out, "id": m["id"]})
                else:
                    await server.emit(wire.result_response(m["id"], out))

            server_tasks.start_soon(answer)

    async def wrapped(server: ScriptedServer) -> None:
        async with anyio.create_task_group() as server_tasks:
            await behaviour(server, server_tasks)

    return wrapped


def modern_server(
    handlers: Handlers | None = None,
    *,
    capabilities: dict[str, Any] | None = None,
    log: list[wire.Message] | None = None,
) -> Behaviour:
    """A modern-only server: answers server/discover, requires `_meta`."""
    handlers = dict(handlers or {})
    discover = {
        "resultType": "complete",
        "supportedVersions": ["2026-07-28"],
        "capabilities": capabilities if capabilities is not None else {"tools": {}},
        "_meta": {era.SERVER_INFO: {"name": "scripted-modern", "version": "2"}},
        "ttlMs": 0,
        "cacheScope": "public",
    }

    async def behaviour(server: ScriptedServer) -> None:
        async with anyio.create_task_group() as tasks:
            while True:
                msg = await server.recv()
                if log is not None:
                    log.append(msg)
                if server.route_reply(msg) or "id" not in msg:
                    continue
                if not era.is_modern(msg):
                    await server.emit(
                        wire.error_response(
                            msg["id"],
                            -32022,
                            "Unsupported protocol version",
                            {"supported": ["2026-07-28"], "requested": "legacy"},
                        )
                    )
                    continue
                if msg["method"] == "server/discover":
                    await server.emit(wire.result_response(msg["id"], discover))
                    continue
                handler = handlers.get(msg["method"])
                if handler is None:
                    await server.emit(wire.error_response(msg["id"], -32601, "Method not found"))
                    continue

                async def answer(m: wire.Message = msg, h: Handler = handler) -> None:
                    out = await h(server, m)
                    if out is None:
                        return
                    if "jsonrpc" in out:
                        await server.emit({**out, "id": m["id"]})
                    else:
                        await server.emit(
                            wire.result_response(m["id"], {"resultType": "complete", **out})
                        )

                tasks.start_soon(answer)

    return behaviour


def dual_server(legacy: Behaviour, modern: Behaviour) -> Behaviour:
    """A dual-era server as mcp 2.x runs one over stdio (PEERS.md "Wire
    facts"): each process fixes its era by its first request, a modern one
    (`_meta` with a protocol version) making it `modern`, anything else
    (`initialize`) making it `legacy`."""

    async def behaviour(server: ScriptedServer) -> None:
        first = await server.recv()
        receive = server.recv
        waiting = [first]

        async def recv() -> wire.Message:
            return waiting.pop() if waiting else await receive()

        server.recv = recv  # type: ignore[method-assign]
        server.era = "modern" if era.is_modern(first) else "legacy"
        await (modern if server.era == "modern" else legacy)(server)

    return behaviour


@dataclass
class Client:
    """The downstream side: send messages in, read what the gateway sends out."""

    service: GatewayService
    link: ClientLink
    inbox: MemoryObjectReceiveStream[wire.Message]
    requests: TaskGroup
    upstream: Upstream
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _streams: list[
        MemoryObjectSendStream[wire.Message] | MemoryObjectReceiveStream[wire.Message]
    ] = field(default_factory=list)

    def open_link(
        self, buffer: float = math.inf, **fields: Any
    ) -> tuple[ClientLink, MemoryObjectReceiveStream[wire.Message]]:
        """Another client on the same gateway: its link (added to the service)
        and its inbox; both ends are closed when the gateway is."""
        send, receive = anyio.create_memory_object_stream[wire.Message](buffer)
        self._streams += [send, receive]
        link = ClientLink.over_stream(send, **{"transport": "test", **fields})
        self.service.links.add(link)
        return link, receive

    def close_streams(self) -> None:
        for stream in self._streams:
            stream.close()

    async def send(self, msg: wire.Message) -> None:
        await self.service.handle_client_message(self.link, msg, self.requests)

    async def next(self, timeout: float = 5) -> wire.Message:
        with anyio.fail_after(timeout):
            return await self.inbox.receive()

    async def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        modern: bool = True,
        timeout: float = 5,
    ) -> wire.Message:
        """Send a request and return its answer (other messages are skipped)."""
        msg_id = next(self._ids)
        if modern:
            params = {**(params or {}), "_meta": {**MODERN_META, **(params or {}).get("_meta", {})}}
        await self.send(wire.request(msg_id, method, params))
        with anyio.fail_after(timeout):
            while True:
                msg = await self.inbox.receive()
                if msg.get("id") == msg_id and "method" not in msg:
                    return msg

    async def initialize(
        self, capabilities: dict[str, Any] | None = None, version: str = "2025-11-25"
    ) -> wire.Message:
        reply = await self.call(
            "initialize",
            {
                "protocolVersion": version,
                "capabilities": capabilities or {},
                "clientInfo": {"name": "legacy-test-client", "version": "1"},
            },
            modern=False,
        )
        await self.send(wire.notification("notifications/initialized"))
        return reply


def encoding_link(
    stream: MemoryObjectSendStream[wire.Message], principal: str = "local"
) -> ClientLink:
    """A link that puts each message through JSON, as the real fronts do: what
    the gateway cannot encode fails here as it would on stdout or HTTP."""

    async def send(msg: wire.Message) -> None:
        await stream.send(orjson.loads(wire.encode(msg)))

    def send_nowait(msg: wire.Message) -> None:
        stream.send_nowait(orjson.loads(wire.encode(msg)))

    return ClientLink(send=send, send_nowait=send_nowait, transport="test", principal=principal)


@asynccontextmanager
async def gateway(
    behaviour: Behaviour,
    *,
    encode: bool = False,
    tracer_provider: TracerProvider | None = None,
    **config: Any,
) -> AsyncIterator[Client]:
    """`encode=True`: the client's messages go through JSON (see encoding_link).
    `tracer_provider`: tracing on, its spans going there (tests/test_tracing.py)."""
    cfg = Config(
        command=("scripted",),
        **{"probe_timeout": 0.5, "request_timeout": 5, "restart_backoff_initial": 0.01, **config},
    )
    spawned: list[ScriptedServer] = []
    try:
        async with anyio.create_task_group() as tg:
            upstream = Upstream(behaviour, tg, spawned, max_bytes=cfg.max_message_bytes)
            service = GatewayService(cfg, connect=upstream.connect, tracer_provider=tracer_provider)
            send, receive = anyio.create_memory_object_stream[wire.Message](math.inf)
            link = encoding_link(send) if encode else ClientLink.over_stream(send, transport="test")
            service.links.add(link)
            await service.start(tg)
            with send, receive:
                async with anyio.create_task_group() as requests:
                    client = Client(service, link, receive, requests, upstream)
                    try:
                        yield client
                    finally:
                        client.close_streams()
                    requests.cancel_scope.cancel()
                await service.aclose()
            tg.cancel_scope.cancel()
    finally:  # on every way out: hypothesis ends an example by raising in it
        for server in spawned:
            server.close_streams()


def tables(service: GatewayService, links: list[ClientLink]) -> dict[str, Any]:
    """Every table that must be empty once no call is in progress: pending
    upstream calls, progress routes, session leases, server requests being
    served, parked calls, in-flight client calls, server requests forwarded
    to clients."""
    out: dict[str, Any] = {"held": list(service.bridge.held)}
    for session in service.pool.sessions.values():
        out[f"{session.label} pending"] = [c.method for c in session.pending.values()]
        out[f"{session.label} progress"] = list(session.progress)
        out[f"{session.label} holder"] = session.lease.holder
        out[f"{session.label} readers"] = session.lease.readers
        out[f"{session.label} serving"] = session.serving
    for link in links:
        out[f"link {link.id} inflight"] = list(link.inflight)
        out[f"link {link.id} server requests"] = list(link.server_requests)
    return out


async def wait_tables_empty(service: GatewayService, links: list[ClientLink], bound: float) -> None:
    """Wait (at most `bound`: parked calls and forwarded server requests end
    on their own timers) for every table to be empty; fail saying what is left.

    Runs on trio (see tests/mock_clock.py): the tables are checked after
    every step of every task, so the wait ends on the step that empties the
    last one, and on the mock clock the gateway's timers and the bound take
    no wall-clock time."""
    emptied = anyio.Event()
    watch = _EmptyTables(service, links, emptied)
    trio.lowlevel.add_instrument(watch)
    try:
        with anyio.move_on_after(bound):
            if watch.empty():
                return
            await emptied.wait()
            return
    finally:
        trio.lowlevel.remove_instrument(watch)
    left = {k: v for k, v in tables(service, links).items() if v}
    raise AssertionError(f"still held: {left}")


class _EmptyTables(trio.abc.Instrument):
    """Sets `emptied` after the task step that leaves every table empty."""

    def __init__(
        self, service: GatewayService, links: list[ClientLink], emptied: anyio.Event
    ) -> None:
        self._service = service
        self._links = links
        self._emptied = emptied

    def empty(self) -> bool:
        return not any(tables(self._service, self._links).values())

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.empty():
            self._emptied.set()
