"""The HTTP front's connection protocol (uvicorn's, with the gateway's limits)
fed bytes in process: an asyncio transport that keeps what is written to it,
an ASGI app that reads the body and answers 200, and `settle` for the app
task's few steps. From tests/test_http_limits.py."""

from __future__ import annotations

import asyncio
from typing import Any


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def ok_app(scope: Any, receive: Any, send: Any) -> None:
    while (await receive()).get("more_body"):  # ends with the last body chunk
        pass
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"{}"})


async def settle() -> None:
    for _ in range(5):  # the app task's few steps
        await asyncio.sleep(0)
