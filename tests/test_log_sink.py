"""A log sink that breaks loses log lines, never the gateway: stderr whose
reader went away (EPIPE, a log shipper restarting), a full disk, a closed
stream. Such a line is counted (`mcp_gateway_log_lines_dropped_total`). The
gateway once exited with code 1 at its first log line after its stderr
pipe's reader left."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
import structlog

from gateway import log_setup
from gateway.log_setup import LogSink
from tests.http_gateway_process import FLAKY, call, free_port, modern_headers, wait_ready


class Broken(io.StringIO):
    def __init__(self, exc: Exception) -> None:
        super().__init__()
        self.exc = exc

    def write(self, s: str) -> int:
        raise self.exc


@pytest.mark.parametrize(
    "exc",
    [BrokenPipeError(32, "Broken pipe"), OSError(28, "No space left on device")],
)
def test_a_line_the_stream_refuses_is_dropped_and_counted(exc: Exception) -> None:
    sink = LogSink()
    sink.write("one", Broken(exc))
    sink.write("two", Broken(exc))
    assert sink.dropped == 2


def test_a_closed_or_missing_stream_drops_the_line() -> None:
    sink, closed = LogSink(), io.StringIO()
    closed.close()
    sink.write("one", closed)
    sink.write("two", None)
    assert sink.dropped == 2


def test_a_stream_that_takes_the_line_gets_it_whole() -> None:
    sink, stream = LogSink(), io.StringIO()
    sink.write("one", stream)
    assert (stream.getvalue(), sink.dropped) == ("one\n", 0)


def test_logging_to_a_broken_stderr_does_not_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_setup, "SINK", LogSink())
    monkeypatch.setattr(sys, "stderr", Broken(BrokenPipeError(32, "Broken pipe")))
    try:
        log_setup.configure("info", "json")
        structlog.get_logger("gateway.test").info("nobody reads this", n=1)
    finally:
        structlog.reset_defaults()
    assert log_setup.SINK.dropped == 1


def test_with_no_stderr_at_all_lines_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """pythonw, or a process started with fd 2 closed: sys.stderr is None."""
    monkeypatch.setattr(log_setup, "SINK", LogSink())
    monkeypatch.setattr(sys, "stderr", None)
    try:
        log_setup.configure("info", "console")
        structlog.get_logger("gateway.test").warning("nobody reads this")
    finally:
        structlog.reset_defaults()
    assert log_setup.SINK.dropped == 1


@pytest.fixture
def logging_gateway(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A gateway process whose stderr is a pipe this test holds the reading end of."""
    port = free_port()
    cmd = [sys.executable, "-m", "gateway", "--listen", f"127.0.0.1:{port}"]
    process = subprocess.Popen(
        [*cmd, "--log-level", "info", "--", *FLAKY],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield port, process
    finally:
        process.terminate()
        process.wait(10)


@pytest.mark.anyio
async def test_the_gateway_serves_on_after_its_stderr_reader_left(
    logging_gateway: tuple[int, subprocess.Popen[bytes]],
) -> None:
    port, process = logging_gateway
    assert process.stderr is not None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
        await wait_ready(c)
        assert os.read(process.stderr.fileno(), 65536)  # it logs (it said it listens)...
        process.stderr.close()  # ...and then nobody reads its log: EPIPE
        for msg_id in (1, 2):  # the gateway logs the line the server writes to stderr
            answer = await c.post(
                "/mcp",
                json=call(msg_id, "tools/call", name="stderr"),
                headers=modern_headers("tools/call", "stderr"),
            )
            assert answer.status_code == 200 and "result" in answer.json()
        with anyio.fail_after(5):
            while not (dropped := await _dropped(c)):  # noqa: ASYNC110 - it follows the answer
                await anyio.sleep(0.05)
    assert dropped >= 1 and process.poll() is None


async def _dropped(client: httpx.AsyncClient) -> int:
    metrics = (await client.get("/metrics")).text.splitlines()
    (line,) = [m for m in metrics if m.startswith("mcp_gateway_log_lines_dropped_total ")]
    return int(line.split()[1])
