"""A bare JSON-line relay: the "cost of one Python hop" baseline.

    python bench/relay.py -- SERVER_CMD ARGS...

Spawns the server and copies newline-framed lines both ways without parsing
them, in the gateway's own style: anyio, our stdin/stdout switched to
non-blocking and awaited for readiness, the server behind anyio's process
streams, one write per line. Whatever the gateway costs beyond this relay is
the price of its protocol work.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

_CHUNK = 65536


def _nonblocking(fd: int) -> None:
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)


async def _read_fd(fd: int) -> bytes:
    while True:  # each pass returns or waits for readiness
        try:
            return os.read(fd, _CHUNK)
        except BlockingIOError:
            await anyio.wait_readable(fd)


async def _write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            await anyio.wait_writable(fd)


async def _copy_lines(
    read: Callable[[], Awaitable[bytes]], write: Callable[[bytes], Awaitable[None]]
) -> None:
    """Copy complete lines (newline included) until end of input."""
    buf = b""
    while True:  # ends at end of input
        chunk = await read()
        if not chunk:
            if buf:
                await write(buf)
            return
        buf += chunk
        start = 0
        nl = buf.find(b"\n")
        while nl >= 0:
            await write(buf[start : nl + 1])
            start = nl + 1
            nl = buf.find(b"\n", start)
        buf = buf[start:]


async def _receive(stream: ByteReceiveStream) -> bytes:
    try:
        return await stream.receive(_CHUNK)
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        return b""


async def relay(command: Sequence[str]) -> int:
    _nonblocking(0)
    _nonblocking(1)
    process = await anyio.open_process(
        list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None
    )
    stdin: ByteSendStream | None = process.stdin
    stdout: ByteReceiveStream | None = process.stdout
    assert stdin is not None and stdout is not None

    async def to_server() -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await _copy_lines(lambda: _read_fd(0), stdin.send)
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await stdin.aclose()

    async def to_client() -> None:
        with contextlib.suppress(BrokenPipeError):
            await _copy_lines(lambda: _receive(stdout), lambda b: _write_fd(1, b))

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(to_server)
            await to_client()  # the server's stdout ends when it exits
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(5):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
    return process.returncode or 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" in args:
        args = args[args.index("--") + 1 :]
    if not args:
        print("usage: relay.py -- SERVER_CMD ARGS...", file=sys.stderr)
        return 2
    try:
        return anyio.run(relay, args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
