"""Non-blocking pipe I/O on raw file descriptors, for both stdio transports.

Writes are synchronous and never block: a write goes straight to the pipe
when nothing is queued, and whatever the pipe does not take waits in a buffer
that a flusher task drains as the pipe becomes writable. Nothing here waits
for room: how much may queue toward a peer is the caller's rule
(gateway.peer_queue), so no task can wait on a pipe that only it could empty.
Readers can `cork` a writer while they handle a batch of messages, so that
everything the batch produced leaves in one system call; a cork holds bytes
back for the rest of the event loop's step at most, so one held across an
await cannot stop the pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import stat

import anyio
import anyio.to_thread

READ_CHUNK = 65536


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
    """Reads one fd. On asyncio the fd stays registered with the loop between
    reads and the readiness callback reads the chunk itself, as asyncio's own
    pipe transports do: `anyio.wait_readable` registers and unregisters around
    every wait (two `epoll_ctl` calls per message on a request/reply pipe),
    and a waiter woken without its data would see the fd ready once more."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._async = make_nonblocking(fd)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiter: asyncio.Future[bytes] | None = None
        # A chunk read for a `read` that was cancelled before it could return it.
        self._kept: bytes | None = None
        self._closed = False
        # The writer is gone, though another process may hold the pipe open.
        self._ending = False

    async def read(self) -> bytes:
        """The next chunk; b"" at end of stream (or once `release`d)."""
        if not self._async:
            return await anyio.to_thread.run_sync(
                os.read, self.fd, READ_CHUNK, abandon_on_cancel=True
            )
        if self._kept is not None:
            chunk, self._kept = self._kept, None
            return chunk
        if self._closed:
            return b""
        # Read before waiting: under load the next messages are usually
        # there already, and a wait would cost a pass of the event loop.
        try:
            return self._took(os.read(self.fd, READ_CHUNK))
        except BlockingIOError:
            if self._ending:
                return self._took(b"")
        except OSError as exc:
            return self._took(self._read_error(exc))
        loop = self._loop
        if loop is None:
            # Asked only when the fd is not watched yet: on CPython 3.11
            # get_running_loop() is a getpid() system call each time.
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # another anyio backend: its own readiness wait
                return await self._read_portably()
            loop.add_reader(self.fd, self._on_readable)
            self._loop = loop
        waiter: asyncio.Future[bytes] = loop.create_future()
        self._waiter = waiter
        try:
            return self._took(await waiter)
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._kept = waiter.result()  # read, but not yet returned
            raise
        finally:
            self._waiter = None

    def _took(self, chunk: bytes) -> bytes:
        if not chunk:
            self.release()
        return chunk

    def _read_error(self, exc: OSError) -> bytes:
        if exc.errno in (errno.EBADF, errno.EIO):
            return b""
        raise exc

    async def _read_portably(self) -> bytes:
        while True:  # each pass reads once or waits for readiness
            if self._ending:
                try:
                    return self._took(os.read(self.fd, READ_CHUNK))
                except OSError:
                    return self._took(b"")
            try:
                await anyio.wait_readable(self.fd)
            except anyio.ClosedResourceError:
                return b""
            try:
                return self._took(os.read(self.fd, READ_CHUNK))
            except BlockingIOError:
                continue
            except OSError as exc:
                return self._took(self._read_error(exc))

    def _on_readable(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            # Nobody is reading (the consumer is busy or gone): stop watching
            # rather than have a level-triggered fd wake the loop every pass.
            if self._loop is not None:
                self._loop.remove_reader(self.fd)
                self._loop = None
            return
        try:
            chunk = os.read(self.fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:
            try:
                chunk = self._read_error(exc)
            except OSError as raised:
                waiter.set_exception(raised)
                return
        waiter.set_result(chunk)

    def end_when_empty(self) -> None:
        """The process that wrote is gone, but the pipe may stay open (a child
        it forked inherited it): what is in the pipe still comes, then the
        end of stream, instead of a wait for as long as the child lives."""
        self._ending = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            try:
                chunk = os.read(self.fd, READ_CHUNK)
            except OSError:  # nothing there (BlockingIOError) or unreadable
                chunk = b""
            waiter.set_result(chunk)

    def release(self) -> None:
        """Stop watching the fd and wake a waiting `read` with end of stream.
        Call before the fd is closed: a closed fd left registered could
        alias the next file that gets its number."""
        self._closed = True
        if self._loop is not None:
            self._loop.remove_reader(self.fd)
            self._loop = None
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(b"")


class PipeWriter:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._async = make_nonblocking(fd)
        self._buf = bytearray()
        self._corked = 0
        # A write made while corked arms one callback at the end of the loop
        # step: whatever the cork still holds then leaves.
        self._step_end_armed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = anyio.Event()
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
        if self._corked:
            self._buf += data
            if not self._step_end_armed:
                self._arm_step_end()
            return
        if self._buf or not self._async:
            self._buf += data
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
        if not self._corked:
            self._release()

    def _arm_step_end(self) -> None:
        loop = self._loop
        if loop is None:
            try:
                loop = self._loop = asyncio.get_running_loop()
            except RuntimeError:  # another anyio backend: no batching, write now
                self._release()
                return
        self._step_end_armed = True
        loop.call_soon(self._step_end)

    def _step_end(self) -> None:
        self._step_end_armed = False
        with contextlib.suppress(anyio.BrokenResourceError):
            self._release()

    def _release(self) -> None:
        """Let queued bytes go: what the pipe takes now, the flusher the rest."""
        if not self._buf:
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
            raise anyio.BrokenResourceError from exc

    @property
    def queued(self) -> int:
        return len(self._buf)

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
            if not self._buf:
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
                    return
                sent = len(data)
            del self._buf[:sent]
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
