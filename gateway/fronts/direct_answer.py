"""The front's own server answering a request without its ASGI task: the
server side of fronts/direct_posts.py.

A request offered there gets one of these: `respond` writes the whole
response in one write, as uvicorn would have (its default headers, a
Content-Length, `connection: close` when the connection ends) and completes
the request's cycle, so that keep-alive, pipelining, the idle deadline and
graceful shutdown go on as for any answer; `hand_over` starts the ASGI task
after all, through the app given, for an answer that turned out to need one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, RequestResponseCycle

from gateway.fronts.asgi import ClientGone


class CycleAnswer:
    __slots__ = ("_cycle", "_start_task", "_transport", "gone")

    def __init__(
        self,
        cycle: RequestResponseCycle,
        transport: asyncio.Transport,
        gone: ClientGone,
        start_task: Callable[[RequestResponseCycle, Any], None],
    ) -> None:
        self._cycle = cycle
        # The connection's own (the cycle's holds a head for its body).
        self._transport = transport
        self._start_task = start_task
        self.gone = gone

    def respond(self, status: int, headers: Sequence[tuple[bytes, bytes]], body: bytes) -> None:
        cycle = self._cycle
        if cycle.response_started:
            return
        cycle.response_started = cycle.response_complete = True
        cycle.message_event.set()
        if not cycle.disconnected:
            parts = [STATUS_LINE[status]]
            for name, value in (*cycle.default_headers, *headers):
                parts += (name, b": ", value, b"\r\n")
            parts.append(b"content-length: %d\r\n" % len(body))
            if not cycle.keep_alive:
                parts.append(b"connection: close\r\n")
            parts += (b"\r\n", body)
            transport = self._transport
            transport.write(b"".join(parts))
            if not cycle.keep_alive:
                transport.close()
        cycle.on_response()

    def hand_over(self, app: Any) -> None:
        self._start_task(self._cycle, app)
