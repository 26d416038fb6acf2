"""The downstream stdio transport: the gateway is the client's MCP server
subprocess, reading requests on stdin and writing messages on stdout.

stdout carries protocol messages and nothing else (logs go to stderr). The
pipes are non-blocking (gateway.pipes), so a client that stops reading never
freezes the event loop; a regular file or terminal falls back to a thread.
What may queue toward a client that reads slowly is bounded by the
flow-control rule (gateway.flow_control): nothing here ever waits for it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import anyio

from gateway import wire
from gateway.flow_control import DEFAULT_BOUNDS, QueueBounds
from gateway.peer_queue import ClientNotReading, PeerQueue, QueueFull
from gateway.pipes import PipeReader, PipeWriter


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line that is not a JSON-RPC message, with the error to answer it with."""

    reply: wire.Message | None
    reason: str


class StdioFront:
    def __init__(
        self,
        in_fd: int = 0,
        out_fd: int = 1,
        *,
        max_bytes: int,
        bounds: QueueBounds = DEFAULT_BOUNDS,
    ) -> None:
        self._max = max_bytes
        self._reader = PipeReader(in_fd)
        self._writer = PipeWriter(out_fd)
        self._out = PeerQueue(self._writer, bounds, "client")
        self._splitter = wire.LineSplitter(max_bytes)
        self._ready: deque[wire.Message | BadLine] = deque()
        self._eof = False

    async def receive_batch(self) -> list[wire.Message | BadLine]:
        """Everything one read brought (at least one item); EndOfStream at the end."""
        while not self._ready:  # each pass reads stdin once
            if self._eof:
                raise anyio.EndOfStream
            chunk = await self._reader.read()
            if not chunk:
                self._eof = True
                self._take(self._splitter.close())
            else:
                self._take(self._splitter.feed(chunk))
        batch = list(self._ready)
        self._ready.clear()
        return batch

    def _take(self, items: list[bytes | wire.Oversized]) -> None:
        for item in items:
            if isinstance(item, wire.Oversized):
                self._ready.append(
                    BadLine(
                        wire.error_response(
                            None,
                            wire.INVALID_REQUEST,
                            f"Invalid Request: message of {item.size} bytes exceeds the "
                            f"limit of {self._max} bytes",
                        ),
                        "oversized",
                    )
                )
                continue
            try:
                self._ready.append(wire.decode(item))
            except wire.InvalidMessage as exc:
                self._ready.append(BadLine(exc.reply, exc.reason))

    def send_nowait(self, msg: wire.Message) -> None:
        try:
            self._out.put(msg)
        except QueueFull as exc:
            raise ClientNotReading(str(exc)) from exc

    async def send(self, msg: wire.Message) -> None:
        self.send_nowait(msg)

    def cork(self) -> None:
        self._writer.cork()

    def uncork(self) -> None:
        self._writer.uncork()

    async def run_flusher(self) -> None:
        await self._writer.run_flusher()

    async def flush(self, timeout: float) -> None:
        await self._writer.flush(timeout)
