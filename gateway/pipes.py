"""Non-blocking pipe I/O on raw file descriptors, for both stdio transports.

Writes are synchronous and never block: a write goes straight to the pipe
when nothing is queued, and whatever the pipe does not take waits in a buffer
that a flusher task drains as the pipe becomes writable. Readers can `cork`
a writer while they handle a batch of messages, so that everything the batch
produced leaves in one system call. A `drain` await gives backpressure.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

import anyio
import anyio.to_thread

READ_CHUNK = 65536
# Above this many queued bytes, producers wait in `drain` for the pipe.
HIGH_WATER = 1 << 20


def make_nonblocking(fd: int) -> bool:
    """Switch a pipe or socket to non-blocking; False for anything else (a
    regular file or a terminal), which is then read and written in a thread."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    # Not terminals: their flags are shared with the shell that started us.
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return False
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    return True


class PipeReader:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._async = make_nonblocking(fd)

    async def read(self) -> bytes:
        """The next chunk; b"" at end of stream."""
        if not self._async:
            return await anyio.to_thread.run_sync(
                os.read, self.fd, READ_CHUNK, abandon_on_cancel=True
            )
        try:
            return os.read(self.fd, READ_CHUNK)
        except BlockingIOError:
            pass
        except OSError as exc:
            if exc.errno in (errno.EBADF, errno.EIO):
                return b""
            raise
        try:
            await anyio.wait_readable(self.fd)
        except anyio.ClosedResourceError:
            return b""  # the fd was closed under us (shutdown): end of stream
        try:
            return os.read(self.fd, READ_CHUNK)
        except BlockingIOError:
            return await self.read()
        except OSError as exc:
            if exc.errno in (errno.EBADF, errno.EIO):
                return b""
            raise


class PipeWriter:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._async = make_nonblocking(fd)
        self._buf = bytearray()
        self._corked = 0
        self._wake = anyio.Event()
        self._space = anyio.Event()
        self.broken: BaseException | None = None
        # While the flusher runs, it alone waits on the fd (a second waiter
        # is a BusyResourceError): `flush` then waits for it to empty the queue.
        self._flusher_running = False
        self._emptied = anyio.Event()

    def write(self, data: bytes) -> None:
        """Queue or write `data` now; never blocks. Raises BrokenResourceError
        once the reading end is gone."""
        if self.broken is not None:
            raise anyio.BrokenResourceError from self.broken
        if self._buf or self._corked or not self._async:
            self._buf += data
            if not self._corked:
                self._wake.set()
            return
        sent = self._try_write(data)
        if sent < len(data):
            self._buf += data[sent:]
            self._wake.set()

    def cork(self) -> None:
        self._corked += 1

    def uncork(self) -> None:
        # Tolerates an uncork without its cork: a writer born mid-batch.
        self._corked = max(0, self._corked - 1)
        if self._corked or not self._buf:
            return
        if self._async and self.broken is None:
            sent = self._try_write(self._buf)
            del self._buf[:sent]
        if self._buf:
            self._wake.set()

    def _try_write(self, data: bytes | bytearray) -> int:
        try:
            return os.write(self.fd, data)
        except BlockingIOError:
            return 0
        except OSError as exc:
            self.broken = exc
            self._buf.clear()
            self._space.set()
            raise anyio.BrokenResourceError from exc

    @property
    def queued(self) -> int:
        return len(self._buf)

    async def drain(self) -> None:
        """Wait while more than HIGH_WATER bytes are queued (backpressure)."""
        while len(self._buf) > HIGH_WATER and self.broken is None:  # each pass waits
            self._space = anyio.Event()
            await self._space.wait()
        if self.broken is not None:
            raise anyio.BrokenResourceError from self.broken

    async def run_flusher(self) -> None:
        """Drain the queue as the pipe allows, until the pipe breaks or the
        task is cancelled. One per writer, owned by the transport's owner."""
        self._flusher_running = True
        try:
            await self._flush_forever()
        finally:
            self._flusher_running = False
            self._emptied.set()

    async def _flush_forever(self) -> None:
        while self.broken is None:  # each pass waits for work or writability
            if not self._buf or self._corked:
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            if self._async:
                try:
                    await anyio.wait_writable(self.fd)
                    sent = self._try_write(self._buf)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return
            else:
                data = bytes(self._buf)
                try:
                    await anyio.to_thread.run_sync(_write_all, self.fd, data)
                except OSError as exc:
                    self.broken = exc
                    self._buf.clear()
                    self._space.set()
                    return
                sent = len(data)
            del self._buf[:sent]
            if len(self._buf) <= HIGH_WATER:
                self._space.set()
            if not self._buf:
                self._emptied.set()

    async def flush(self, timeout: float) -> None:
        """Give queued bytes up to `timeout` to leave (at shutdown)."""
        with anyio.move_on_after(timeout):
            while self._buf and self.broken is None:  # each pass waits for writability
                if self._flusher_running:
                    self._emptied = anyio.Event()
                    self._wake.set()
                    await self._emptied.wait()
                elif self._async:
                    try:
                        await anyio.wait_writable(self.fd)
                        del self._buf[: self._try_write(self._buf)]
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        return
                else:
                    data = bytes(self._buf)
                    self._buf.clear()
                    await anyio.to_thread.run_sync(_write_all, self.fd, data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
