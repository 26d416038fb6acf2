"""A stdio server's stderr is read in batches (issue #12, "the servers people
really run"): the MCP Python SDK's servers log a line per request at info,
and reading each line as it came cost the gateway a wake-up per request (in
front of mcp 1.30 FastMCP at one call at a time: 4.5 more system calls and
8 % more instructions a call). No line may be lost or held back at the end
for it, and a server that writes fast must never be held up on a full pipe.
When the pump pauses is driven here with a scripted reader and a recorded
pause; the real process only shows that nothing is lost."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import anyio
import pytest
from structlog.testing import capture_logs

from gateway import wire
from gateway.backs import server_output
from gateway.backs.server_output import STDERR_BATCH_BYTES, STDERR_BATCH_SECONDS, pump_lines
from gateway.backs.stdio_back import StdioServerProcess

pytestmark = pytest.mark.anyio


class Script:
    """What the pump does, in order: each read and the chunk it returned,
    each batch of lines handled, each pause."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter([*chunks, b""])
        self.events: list[tuple[str, object]] = []

    async def read(self) -> bytes:
        chunk = next(self._chunks)
        self.events.append(("read", chunk))
        return chunk

    def handle(self, lines: list[bytes | wire.Oversized]) -> None:
        self.events.append(("lines", lines))

    async def pause(self, seconds: float) -> None:
        self.events.append(("pause", seconds))


async def test_small_reads_are_followed_by_a_pause_so_that_lines_come_in_batches() -> None:
    script = Script([b"Processing request of type CallToolRequest\n", b"two\nthree\n"])
    await pump_lines(script.read, script.handle, script.pause)
    assert script.events == [
        ("read", b"Processing request of type CallToolRequest\n"),
        ("lines", [b"Processing request of type CallToolRequest"]),
        ("pause", STDERR_BATCH_SECONDS),
        ("read", b"two\nthree\n"),
        ("lines", [b"two", b"three"]),
        ("pause", STDERR_BATCH_SECONDS),
        ("read", b""),
        ("lines", []),
    ]


async def test_a_big_read_goes_on_at_once_so_a_fast_writer_is_never_held_up() -> None:
    big = b"x" * (STDERR_BATCH_BYTES - 1) + b"\n"
    script = Script([big, b"last\n"])
    await pump_lines(script.read, script.handle, script.pause)
    kinds = [kind for kind, _ in script.events]
    assert kinds == ["read", "lines", "read", "lines", "pause", "read", "lines"]


async def test_a_last_line_without_its_newline_is_not_lost() -> None:
    script = Script([b"first\nunfinished"])
    await pump_lines(script.read, script.handle, script.pause)
    handled = [event for kind, event in script.events if kind == "lines"]
    assert handled == [[b"first"], [b"unfinished"]]


async def test_a_real_server_s_lines_all_reach_the_log_and_the_tail_in_order() -> None:
    """Lines written one at a time (a flush each), however they are read:
    every one is logged, in order, and the last ones are its last words once
    it is gone."""
    code = "import sys\nfor i in range(40):\n    print('line', i, file=sys.stderr, flush=True)\n"
    lines = [f"line {i}" for i in range(40)]
    with capture_logs() as logs:
        proc = await StdioServerProcess.spawn([sys.executable, "-c", code], max_bytes=1 << 20)
        async with anyio.create_task_group() as tg:
            tg.start_soon(proc.run_background)
            words = await proc.last_words(timeout=10)
            await proc.aclose(5.0)
    assert [e["line"] for e in logs if e["event"] == "upstream stderr"] == lines
    assert words == lines[-server_output.STDERR_TAIL_LINES :]
