"""The front's own server answering a POST without its ASGI task
(fronts/limited_protocol.py, fronts/direct_answer.py; issue #12: "task
spawning per request" — the plain call costs no task, and HTTP/1.1 framing,
keep-alive, pipelining, 100-continue, chunked bodies and graceful shutdown
stay what uvicorn makes them). Fed bytes in process; the front's side is a
stand-in that records what it was offered."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import orjson

from gateway.fronts import http_limits
from gateway.fronts.direct_answer import CycleAnswer
from gateway.fronts.port import Readiness
from tests.fake_transport import FakeTransport, ok_app, settle
from tests.port_stand_in import StandIn

POST = b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: %d\r\n%s\r\n%s"


def post(body: bytes = b"{}", extra: bytes = b"") -> bytes:
    return POST % (len(body), extra, body)


class Front:
    """Takes what `take` says; answers when the test says."""

    def __init__(self, take: bool = True, raises: Exception | None = None) -> None:
        self.taking = take
        self.raises = raises
        self.offers: list[tuple[bytes, CycleAnswer]] = []
        self.failures: list[Exception] = []

    def offered(self, scope: Any) -> bool:
        return bool(scope["method"] == "POST" and scope["path"] == "/mcp")

    def take(self, scope: Any, body: bytes, answer: CycleAnswer) -> bool:
        if self.raises is not None:
            raise self.raises
        if self.taking:
            self.offers.append((body, answer))
        return self.taking

    def failed(self, exc: Exception) -> None:
        self.failures.append(exc)


class App:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:  # ends with the last body chunk
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(body)
        await ok_app(scope, _done, send)


async def _done() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


def connection(front: Front, app: Any) -> tuple[Any, FakeTransport]:
    from uvicorn.config import Config as UvicornConfig
    from uvicorn.server import ServerState

    limits = http_limits.HttpLimits()
    guard = http_limits.ConnectionGuard(limits, http_limits.RefusalLog(), lambda status: None)
    config = UvicornConfig(app, lifespan="off", log_level="warning", proxy_headers=False)
    config.load()
    state = ServerState()
    state.default_headers = [(b"date", b"Tue, 01 Dec 2026 23:30:00 GMT"), (b"server", b"uvicorn")]
    proto = http_limits.protocol_class(guard, front)(config, state, {})  # type: ignore[arg-type]
    transport = FakeTransport()
    proto.connection_made(transport)
    return proto, transport


def responses(transport: FakeTransport) -> list[bytes]:
    return [b"HTTP/1.1 " + r for r in transport.written.split(b"HTTP/1.1 ")[1:]]


async def test_a_post_is_offered_with_its_whole_body_and_answered_in_one_write() -> None:
    front, app = Front(), App()
    proto, transport = connection(front, app)
    request = post(b'{"jsonrpc": "2.0"}')
    proto.data_received(request[:40])  # the body comes in pieces
    proto.data_received(request[40:])
    await settle()
    assert app.bodies == [] and len(front.offers) == 1
    body, answer = front.offers[0]
    assert body == b'{"jsonrpc": "2.0"}'
    answer.respond(200, ((b"content-type", b"application/json"),), b'{"ok":1}')
    (written,) = responses(transport)
    head, _, payload = written.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\ncontent-type: application/json" in head
    assert b"\r\ncontent-length: 8" in head and b"\r\nserver: uvicorn" in head  # uvicorn's own
    assert b"\r\ndate: Tue, 01 Dec 2026" in head
    assert b"connection: close" not in head and payload == b'{"ok":1}'
    assert not transport.closed  # kept alive
    answer.respond(500, (), b"again")  # a second answer is never written
    assert len(responses(transport)) == 1


async def test_a_declined_post_runs_as_an_asgi_request_with_its_body() -> None:
    front, app = Front(take=False), App()
    proto, transport = connection(front, app)
    proto.data_received(post(b'{"a": 1}'))
    await settle()
    assert app.bodies == [b'{"a": 1}']
    assert responses(transport)[0].startswith(b"HTTP/1.1 200")


async def test_what_is_not_offered_runs_as_asgi_requests() -> None:
    """Other paths, a chunked body, `Expect: 100-continue` (the client waits
    for the 100 before it sends the body): uvicorn's own way."""
    chunked = (
        b"POST /mcp HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    )
    expect = b"POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nexpect: 100-continue\r\n\r\n"
    for request in (post().replace(b"/mcp", b"/other"), chunked, expect):
        front, app = Front(), App()
        proto, transport = connection(front, app)
        proto.data_received(request)
        await settle()
        if request is expect:
            assert transport.written == b"HTTP/1.1 100 Continue\r\n\r\n"
            proto.data_received(b"{}")
            await settle()
        assert front.offers == [] and app.bodies == [b"{}"], request


async def test_a_pipelined_request_waits_for_the_direct_answer_before_it() -> None:
    front, app = Front(), App()
    proto, transport = connection(front, app)
    proto.data_received(post(b"[1]") + post(b"[2]"))
    await settle()
    assert [body for body, _ in front.offers] == [b"[1]"]
    front.offers[0][1].respond(200, (), b"one")
    assert len(front.offers) == 1  # not from inside the answer's own callback
    await settle()
    assert [body for body, _ in front.offers] == [b"[1]", b"[2]"]
    front.offers[1][1].respond(200, (), b"two")
    assert [r.rpartition(b"\r\n\r\n")[2] for r in responses(transport)] == [b"one", b"two"]


async def test_the_client_leaving_is_told_and_nothing_is_written() -> None:
    front, app = Front(), App()
    proto, transport = connection(front, app)
    proto.data_received(post())
    await settle()
    answer = front.offers[0][1]
    told: list[bool] = []
    answer.gone.listener = lambda: told.append(True)
    proto.connection_lost(None)
    assert told == [True] and answer.gone.gone
    transport.written = b""
    answer.respond(200, (), b"late")
    assert transport.written == b""


async def test_graceful_shutdown_closes_after_the_direct_answer() -> None:
    """uvicorn's shutdown asks a connection with a request in progress to
    close once it is answered: `connection: close`, then closed."""
    front, app = Front(), App()
    proto, transport = connection(front, app)
    proto.data_received(post())
    await settle()
    proto.shutdown()
    assert not transport.closed
    front.offers[0][1].respond(200, (), b"{}")
    assert b"\r\nconnection: close\r\n" in responses(transport)[0]
    assert transport.closed


async def test_hand_over_answers_the_rest_as_an_asgi_request() -> None:
    front, app = Front(), App()
    proto, transport = connection(front, app)
    proto.data_received(post(b"[7]"))
    await settle()
    seen: list[bytes] = []

    async def rest(scope: Any, receive: Any, send: Any) -> None:
        seen.append((await receive())["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"streamed", "more_body": False})

    front.offers[0][1].hand_over(rest)
    await settle()
    assert seen == [b"[7]"] and app.bodies == []
    assert responses(transport)[0].endswith(b"streamed\r\n0\r\n\r\n")  # chunked, by uvicorn
    proto.data_received(post(b"[8]"))  # the connection goes on
    await settle()
    assert [body for body, _ in front.offers] == [b"[7]", b"[8]"]


async def test_a_defect_in_taking_is_a_500_and_the_connection_goes_on() -> None:
    front, app = Front(raises=KeyError("boom")), App()
    proto, transport = connection(front, app)
    proto.data_received(post())
    await settle()
    (written,) = responses(transport)
    assert written.startswith(b"HTTP/1.1 500") and written.endswith(b"Internal Server Error")
    assert [type(e) for e in front.failures] == [KeyError] and not transport.closed
    front.raises = None
    proto.data_received(post())
    await settle()
    assert len(front.offers) == 1


class HoldingPort(StandIn):
    """The gateway as the fronts see it, recording what the direct path asks of it."""

    def __init__(self) -> None:
        super().__init__(Readiness(True, era="legacy"))
        self.log: list[str] = []

    def take_request(self, link: Any, msg: Any, tg: Any) -> None:
        self.log.append(f"take {msg['id']}")

    def hold_upstream_writes(self) -> None:
        self.log.append("hold")

    def release_upstream_writes(self) -> None:
        self.log.append("release")


def modern_call(msg_id: int) -> bytes:
    from gateway import era

    meta = {era.PROTOCOL_VERSION: "2026-07-28", era.CLIENT_CAPABILITIES: {}}
    params = {"name": "echo", "arguments": {}, "_meta": meta}
    body = orjson.dumps({"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": params})
    head = (
        b"content-type: application/json\r\naccept: application/json, text/event-stream\r\n"
        b"mcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\nmcp-name: echo\r\n"
    )
    return post(body, head)


async def test_calls_read_in_one_loop_step_go_upstream_in_one_write() -> None:
    """Issue #12 ("per-request ... work"): calls that arrive together, on
    several connections, while others are in flight are held and written
    upstream at the end of the loop step (one pipe write, one wake-up of the
    server); a lone call is written at once, so holding costs it nothing."""
    from gateway.fronts.http_front import HttpFront
    from gateway.fronts.metrics import Metrics

    port = HoldingPort()
    front = HttpFront(port, Metrics())
    async with anyio.create_task_group() as tg:
        front.tg = tg
        protos = [connection(front.direct, App())[0] for _ in range(4)]  # type: ignore[arg-type]
        protos[0].data_received(modern_call(1))
        assert port.log == ["take 1"]  # nothing else in flight: written at once
        await settle()
        assert port.log == ["take 1"]
        protos[1].data_received(modern_call(2))  # one step: three ready connections
        protos[2].data_received(modern_call(3))
        assert port.log == ["take 1", "hold", "take 2", "take 3"]
        await asyncio.sleep(0)  # the end of the step
        assert port.log == ["take 1", "hold", "take 2", "take 3", "release"]
        protos[3].data_received(modern_call(4))  # another step: held again
        await asyncio.sleep(0)
        assert port.log[5:] == ["hold", "take 4", "release"]
        tg.cancel_scope.cancel()
