"""Each HTTP answer's head and body in one write.

uvicorn writes a response's head when the app sends `http.response.start`
and its body with the next message: two writes, two syscalls, and often two
TCP segments for an answer that is whole at once (most of the front's
answers). The cycle's transport is this proxy instead: it holds a head until
the next write (the body, in the same step as a rule) and sends both
together; a head with nothing after it in the step (an SSE stream waiting
for its first event) goes out at the end of the step. Every other call
passes through.
"""

from __future__ import annotations

import asyncio
from typing import Any

_HEAD = b"HTTP/1.1 "
_INTERIM = b"HTTP/1.1 1"  # 100 Continue: the client waits for it before the body


class OneWriteTransport:
    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif data.startswith(_HEAD) and not data.startswith(_INTERIM):
            self._held = data
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def get_write_buffer_size(self) -> int:
        held = self._held
        return self._transport.get_write_buffer_size() + (len(held) if held else 0)

    def __getattr__(self, name: str) -> Any:
        # is_closing, get_extra_info, pause_reading, …: the transport's own.
        return getattr(self._transport, name)
