"""The non-blocking pipe writer at shutdown (found by tests/test_fuzz_fronts.py:
a client that sent a large request and closed stdin while the answer was still
queued made the stdio gateway exit 1 with a BusyResourceError traceback)."""

from __future__ import annotations

import os

import anyio
import pytest

from gateway.pipes import PipeWriter

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
