"""The ASGI callables the HTTP front is written against, and the one helper
every streamed response needs."""

from __future__ import annotations

import asyncio
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


CLIENT_GONE = "gateway.client_gone"


class ClientGone:
    """An ASGI extension of the front's own server (limited_protocol.py): it
    tells a response waiting for its first message that the client left. It
    costs nothing while the client stays, where watching receive() costs a
    task per request; servers without it (tests' in-process ones) get the
    watcher."""

    __slots__ = ("abort", "gone", "listener", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.gone = False
        self.listener: Callable[[], None] | None = None
        self.loop = loop  # the server's: waits on it need not look it up
        # Drops the connection at once, unsent bytes and all: for a response
        # whose client stopped reading, which could never be ended in order.
        self.abort: Callable[[], None] | None = None

    def fire(self) -> None:
        if not self.gone:
            self.gone = True
            if self.listener is not None:
                self.listener()


def client_gone(scope: Scope) -> ClientGone | None:
    extensions = scope.get("extensions")
    return extensions.get(CLIENT_GONE) if extensions else None
