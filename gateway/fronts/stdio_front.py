"""The downstream stdio transport: the gateway is the client's MCP server
subprocess, reading requests on stdin and writing messages on stdout.

stdout carries protocol messages and nothing else (logs go to stderr). Reads
and writes are non-blocking where the fds allow, so a client that stops
reading never freezes the event loop; a regular file falls back to a thread.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections import deque
from dataclasses import dataclass

import anyio
import anyio.to_thread

from gateway import wire

_READ_CHUNK = 65536


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line that is not a JSON-RPC message, with the error to answer it with."""

    reply: wire.Message | None
    reason: str


class StdioFront:
    def __init__(self, in_fd: int = 0, out_fd: int = 1, *, max_bytes: int) -> None:
        self._in = in_fd
        self._out = out_fd
        self._max = max_bytes
        self._splitter = wire.LineSplitter(max_bytes)
        self._ready: deque[wire.Message | BadLine] = deque()
        self._eof = False
        self._send_lock = anyio.Lock()
        self._in_async = _make_nonblocking(in_fd)
        self._out_async = _make_nonblocking(out_fd)

    async def receive(self) -> wire.Message | BadLine:
        """The next message or bad line; anyio.EndOfStream when stdin closes."""
        while not self._ready:
            if self._eof:
                raise anyio.EndOfStream
            chunk = await self._read()
            if not chunk:
                self._eof = True
                self._take(self._splitter.close())
            else:
                self._take(self._splitter.feed(chunk))
        return self._ready.popleft()

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

    async def _read(self) -> bytes:
        if not self._in_async:
            return await anyio.to_thread.run_sync(
                os.read, self._in, _READ_CHUNK, abandon_on_cancel=True
            )
        while True:  # bounded: each pass either returns or waits for readiness
            try:
                return os.read(self._in, _READ_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self._in)

    async def send(self, msg: wire.Message) -> None:
        data = memoryview(wire.encode(msg))
        async with self._send_lock:
            if not self._out_async:
                await anyio.to_thread.run_sync(_write_all, self._out, data)
                return
            while data:
                try:
                    n = os.write(self._out, data)
                    data = data[n:]
                except BlockingIOError:
                    await anyio.wait_writable(self._out)
                except OSError as exc:
                    if exc.errno == errno.EPIPE:
                        raise anyio.BrokenResourceError from exc
                    raise


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _make_nonblocking(fd: int) -> bool:
    """Switch a pipe or socket to non-blocking mode; False for anything else."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return False
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    return True
