"""The HTTP front in-process: HttpFront as an ASGI app over httpx's ASGI
transport, the service behind it on a scripted upstream. No process, no port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import orjson

from gateway import era
from gateway.config import Config
from gateway.fronts.http_front import HttpFront
from gateway.fronts.metrics import Metrics
from gateway.runtime.service import GatewayService
from tests.scripted import Behaviour, Upstream

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
async def http_gateway(behaviour: Behaviour, **config: Any) -> AsyncIterator[HttpGateway]:
    cfg = Config(
        command=("scripted",),
        **{"probe_timeout": 0.5, "request_timeout": 5, "restart_backoff_initial": 0.01, **config},
    )
    async with anyio.create_task_group() as tg:
        upstream = Upstream(behaviour, tg)
        service = GatewayService(cfg, connect=upstream.connect)
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
