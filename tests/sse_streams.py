"""The SSE transport's stream (2025-11-25 transports "Backwards
Compatibility": GET /sse, its `endpoint` event, then `message` events) on the
in-process HTTP front (tests/inprocess.py): open it, read its messages. From
tests/test_sse_front.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import orjson

from tests.inprocess import Exchange, HttpGateway


def sse_get(headers: dict[str, str] | None = None) -> Exchange:
    exchange = Exchange("GET", {"accept": "text/event-stream", **(headers or {})})
    exchange.scope["path"] = "/sse"
    exchange.scope["raw_path"] = b"/sse"
    return exchange


def messages(exchange: Exchange) -> list[dict[str, Any]]:
    """The `message` events' JSON-RPC messages (not the `endpoint` event)."""
    return [orjson.loads(e["data"]) for e in exchange.events() if e.get("event") == "message"]


@asynccontextmanager
async def open_stream(g: HttpGateway, exchange: Exchange) -> AsyncIterator[str]:
    """Run the GET in a task; the path its endpoint event names."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(exchange.run, g.front)
        await exchange.wait_until(lambda: bool(exchange.events()), timeout=5)
        event = exchange.events()[0]
        assert event["event"] == "endpoint"
        yield event["data"]
        exchange.gone.set()
