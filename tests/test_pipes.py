"""The non-blocking pipe writer at shutdown (found by tests/test_fuzz_fronts.py:
a client that sent a large request and closed stdin while the answer was still
queued made the stdio gateway exit 1 with a BusyResourceError traceback)."""

from __future__ import annotations

import os

import anyio
import anyio.lowlevel
import pytest

from gateway.pipes import PipeReader, PipeWriter

pytestmark = pytest.mark.anyio


async def test_flush_while_the_flusher_waits_on_the_pipe_delivers_everything() -> None:
    """Shutdown (stdio_app: `front.flush`) runs while the flusher task still
    waits for the pipe to take more: only one task may wait on an fd, so
    flush must leave the waiting to the flusher, and every byte still arrives."""
    read_fd, write_fd = os.pipe()
    data = bytes(range(256)) * 1024  # 256 KiB: more than a pipe holds
    got = bytearray()
    try:
        writer = PipeWriter(write_fd)
        writer.write(data)
        assert writer.queued > 0
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run_flusher)
            await anyio.wait_all_tasks_blocked()  # the flusher now waits on the pipe

            async def read_all() -> None:
                while len(got) < len(data):  # ends when everything came
                    await anyio.wait_readable(read_fd)
                    got.extend(os.read(read_fd, 1 << 16))

            tg.start_soon(read_all)
            with anyio.fail_after(5):
                await writer.flush(5)
                assert writer.queued == 0
                while len(got) < len(data):  # the reader takes the rest
                    await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert bytes(got) == data


# -- PipeReader: the fd stays registered between reads (gateway/pipes.py) ------


async def test_reader_returns_every_byte_in_order_then_end_of_stream() -> None:
    read_fd, write_fd = os.pipe()
    data = bytes(range(256)) * 4096  # 1 MiB: many chunks, many waits
    got = bytearray()
    reader = PipeReader(read_fd)
    writer = PipeWriter(write_fd)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run_flusher)
            for start in range(0, len(data), 10_000):
                writer.write(data[start : start + 10_000])
            with anyio.fail_after(10):
                while len(got) < len(data):  # ends when everything came
                    got.extend(await reader.read())
                await writer.flush(5)
            os.close(write_fd)
            write_fd = -1
            with anyio.fail_after(5):
                assert await reader.read() == b""
            tg.cancel_scope.cancel()
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
    assert bytes(got) == data


async def test_a_read_cancelled_after_its_chunk_was_taken_keeps_the_chunk() -> None:
    """The readiness callback reads the chunk for the waiting `read`; a `read`
    cancelled after that but before it returns leaves the chunk to the next."""
    import asyncio

    read_fd, write_fd = os.pipe()
    reader = PipeReader(read_fd)
    try:
        task = asyncio.ensure_future(reader.read())
        await anyio.wait_all_tasks_blocked()  # the read waits on the fd
        os.write(write_fd, b"kept")
        reader._on_readable()  # the loop's callback: the chunk is read
        task.cancel()  # ...and the read is cancelled before it returns
        with pytest.raises(asyncio.CancelledError):
            await task
        with anyio.fail_after(5):
            assert await reader.read() == b"kept"
    finally:
        reader.release()
        os.close(read_fd)
        os.close(write_fd)


async def test_release_wakes_the_read_with_end_of_stream_and_unwatches_the_fd() -> None:
    """A closed fd left registered with the loop could alias the next file to
    get its number: `release` (called before the back closes a pipe) unwatches."""
    import asyncio

    read_fd, write_fd = os.pipe()
    reader = PipeReader(read_fd)
    try:
        async with anyio.create_task_group() as tg:
            got: list[bytes] = []

            async def read() -> None:
                got.append(await reader.read())

            tg.start_soon(read)
            await anyio.wait_all_tasks_blocked()
            reader.release()
        assert got == [b""]
        assert await reader.read() == b""
        assert asyncio.get_running_loop().remove_reader(read_fd) is False
    finally:
        os.close(read_fd)
        os.close(write_fd)


async def test_data_nobody_reads_yet_does_not_keep_the_loop_busy() -> None:
    """A level-triggered fd with data and no waiting `read` (the consumer is
    busy) would run the callback on every loop pass: it unwatches instead, and
    the next `read` still gets the data."""
    import asyncio

    read_fd, write_fd = os.pipe()
    reader = PipeReader(read_fd)
    loop = asyncio.get_running_loop()
    try:
        async with anyio.create_task_group() as tg:

            async def write_soon() -> None:
                await anyio.wait_all_tasks_blocked()
                os.write(write_fd, b"first")

            tg.start_soon(write_soon)
            with anyio.fail_after(5):
                assert await reader.read() == b"first"  # the fd is watched now
        os.write(write_fd, b"second")  # arrives while nobody reads
        for _ in range(3):  # loop passes: the callback fires with no reader
            await anyio.lowlevel.checkpoint()
        assert loop.remove_reader(read_fd) is False  # it unwatched itself
        assert await reader.read() == b"second"
    finally:
        reader.release()
        os.close(read_fd)
        os.close(write_fd)


async def test_corked_writes_leave_in_one_write_when_uncorked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the HTTP front holds while calls are in flight (issue #12,
    fronts/direct_posts.py `_hold_writes`) reaches the server in one write
    system call; an uncorked write goes at once."""
    read_fd, write_fd = os.pipe()
    writes: list[bytes] = []
    real_write = os.write

    def counting_write(fd: int, data: bytes) -> int:
        writes.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr("gateway.pipes.os.write", counting_write)
    try:
        writer = PipeWriter(write_fd)
        writer.write(b"a\n")
        assert writes == [b"a\n"]
        writer.cork()
        writer.write(b"b\n")
        writer.write(b"c\n")
        assert writes == [b"a\n"] and writer.queued == 4
        writer.uncork()
        assert writes == [b"a\n", b"b\nc\n"] and writer.queued == 0
        assert os.read(read_fd, 100) == b"a\nb\nc\n"
    finally:
        os.close(read_fd)
        os.close(write_fd)
