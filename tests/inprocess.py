"""The HTTP front in-process: HttpFront as an ASGI app over httpx's ASGI
transport, the service behind it on a scripted upstream. No process, no port."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import orjson

from gateway import era
from gateway.config import Config
from gateway.fronts.http_front import HttpFront
from gateway.fronts.metrics import Metrics
from gateway.runtime.service import GatewayService
from tests.scripted import Behaviour, ScriptedServer, Upstream

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

V = era.NEWEST_MODERN
ACCEPT = "application/json, text/event-stream"
MODERN_META = {era.PROTOCOL_VERSION: V, era.CLIENT_CAPABILITIES: {}}


@dataclass
class HttpGateway:
    front: HttpFront
    service: GatewayService
    client: httpx.AsyncClient
    upstream: Upstream
    _next_id: list[int] = field(default_factory=lambda: [0])

    async def post(
        self, body: bytes | dict[str, Any], headers: dict[str, str] | None = None
    ) -> httpx.Response:
        content = body if isinstance(body, bytes) else _dumps(body)
        return await self.client.post(
            "/mcp",
            content=content,
            headers={"accept": ACCEPT, "content-type": "application/json", **(headers or {})},
        )

    async def modern(self, method: str, params: dict[str, Any] | None = None) -> httpx.Response:
        """A well-formed modern request, headers and all."""
        self._next_id[0] += 1
        params = {**(params or {}), "_meta": {**MODERN_META, **(params or {}).get("_meta", {})}}
        headers = {"mcp-protocol-version": V, "mcp-method": method}
        if method in ("tools/call", "prompts/get"):
            headers["mcp-name"] = str(params.get("name"))
        elif method == "resources/read":
            headers["mcp-name"] = str(params.get("uri"))
        msg = {"jsonrpc": "2.0", "id": self._next_id[0], "method": method, "params": params}
        return await self.post(msg, headers)


def _dumps(value: object) -> bytes:
    return orjson.dumps(value)


@asynccontextmanager
async def http_gateway(
    behaviour: Behaviour, tracer_provider: TracerProvider | None = None, **config: Any
) -> AsyncIterator[HttpGateway]:
    """`tracer_provider`: tracing on, its spans going there (tests/test_tracing.py)."""
    cfg = Config(
        command=("scripted",),
        **{"probe_timeout": 0.5, "request_timeout": 5, "restart_backoff_initial": 0.01, **config},
    )
    spawned: list[ScriptedServer] = []
    try:
        async with anyio.create_task_group() as tg:
            upstream = Upstream(behaviour, tg, spawned)
            service = GatewayService(cfg, connect=upstream.connect, tracer_provider=tracer_provider)
            front = HttpFront(service, Metrics())
            front.tg = tg
            await service.start(tg)
            transport = httpx.ASGITransport(app=front)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1", timeout=10
            ) as client:
                yield HttpGateway(front, service, client, upstream)
            for session in list(front.sessions.values()):
                front.end_session(session, "test over")
            await service.aclose()
            tg.cancel_scope.cancel()
    finally:  # on every way out: hypothesis ends an example by raising in it
        for server in spawned:
            server.close_streams()


class Exchange:
    """One HTTP request and its response, as the ASGI app sees them: the
    body comes in one message, then `http.disconnect` once the test says
    the client went away (`gone`)."""

    def __init__(self, method: str, headers: dict[str, str], body: bytes = b"") -> None:
        self.scope: MutableMapping[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": "/mcp",
            "raw_path": b"/mcp",
            "query_string": b"",
            "headers": [
                (k.lower().encode("latin-1"), v.encode("latin-1"))
                for k, v in {"host": "127.0.0.1", **headers}.items()
            ],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 80),
        }
        self._body: bytes | None = body
        self.sent: list[MutableMapping[str, Any]] = []
        self.gone = anyio.Event()
        self.ended = anyio.Event()
        self._changed = anyio.Event()

    async def receive(self) -> MutableMapping[str, Any]:
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        assert not self.ended.is_set(), "sent after the end of the response"
        self.sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            self.ended.set()
        self._changed.set()
        self._changed = anyio.Event()

    async def run(self, app: HttpFront) -> None:
        await app(self.scope, self.receive, self.send)

    async def wait_until(self, done: Callable[[], bool], timeout: float = 60) -> None:
        with anyio.fail_after(timeout):
            while not done():  # each pass waits for the app's next write
                await self._changed.wait()

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    def header(self, name: bytes) -> bytes | None:
        return dict(self.sent[0]["headers"]).get(name)

    def body(self) -> bytes:
        chunks = [m.get("body", b"") for m in self.sent if m["type"] == "http.response.body"]
        return b"".join(chunks)

    def text(self) -> str:
        return self.body().decode()

    def events(self) -> list[dict[str, str]]:
        """The SSE events written so far (comments left out)."""
        events = []
        for block in self.text().split("\n\n"):
            fields = dict(
                line.partition(": ")[::2] for line in block.splitlines() if not line.startswith(":")
            )
            if fields:
                events.append(fields)
        return events

    def messages(self) -> list[dict[str, Any]]:
        return [orjson.loads(e["data"]) for e in self.events() if e.get("data")]
