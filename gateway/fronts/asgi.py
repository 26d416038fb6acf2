"""The ASGI callables the HTTP front is written against, and the one helper
every streamed response needs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def watch_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    """Cancel `scope` when the client closes the connection."""
    while True:  # ends at the disconnect
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


def sse_start(*extra: tuple[bytes, bytes]) -> MutableMapping[str, Any]:
    return {
        "type": "http.response.start",
        "status": 200,
        "headers": [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-cache"),
            *extra,
        ],
    }


def chunk(data: bytes, *, more: bool) -> MutableMapping[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}
