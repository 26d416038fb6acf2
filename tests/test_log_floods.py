"""No peer can flood the gateway's log or its memory by repeating itself (issue
#9: "what does the operator see when it happens (a clear error, a metric, one
log line — not a traceback, not a log flood)?")."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import anyio
import orjson
import pytest

from gateway import wire
from gateway.flow_control import QueueBounds
from gateway.fronts import http_output
from gateway.fronts.client_queues import ClientQueues
from gateway.log_limit import LogLimiter

NOTES = [sys.executable, "-m", "gateway.examples.notes_server"]
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _run_gateway(stdin: bytes, server: list[str]) -> tuple[list[Any], list[bytes]]:
    """The stdio gateway as a real process: stdin fed whole, then closed."""
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "--log-format", "json", "--", *server],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )
    replies = [orjson.loads(line) for line in done.stdout.splitlines()]
    return replies, done.stderr.splitlines()


def test_a_client_writing_junk_in_a_loop_gets_every_error_and_the_log_one_line() -> None:
    junk = b"this is not json\n" * 2000
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}}
    replies, log = _run_gateway(junk + orjson.dumps(call) + b"\n", NOTES)
    errors = [r for r in replies if r.get("error", {}).get("code") == wire.PARSE_ERROR]
    assert len(errors) == 2000  # every bad line is answered ...
    assert any(r.get("id") == 1 and "result" in r for r in replies)  # ... and nothing lost
    bad = [line for line in log if b"bad input from client" in line]
    assert 1 <= len(bad) <= 2, bad[:3]  # ... but the log says it once


def test_a_chatty_server_stderr_is_logged_within_a_budget() -> None:
    """A server that writes to stderr in a loop: its first lines reach the log
    (the operator needs them), the rest are counted, not logged."""
    spam = "import sys\nfor i in range(5000): print('spam', i, file=sys.stderr)\n"
    server = ["sh", "-c", f'{sys.executable} -c "{spam}"; exec "$@"', "sh", *NOTES]
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}}
    replies, log = _run_gateway(orjson.dumps(call) + b"\n", server)
    assert any(r.get("id") == 1 and "result" in r for r in replies)
    stderr_lines = [line for line in log if b"upstream stderr" in line]
    assert 10 <= len(stderr_lines) <= 2 * 50 + 2, len(stderr_lines)


def test_log_limiter_burst_logs_that_many_per_interval_then_counts() -> None:
    now = [0.0]
    logged: list[tuple[str, dict[str, Any]]] = []

    class Logger:
        def info(self, event: str, **fields: Any) -> None:
            logged.append((event, fields))

    limiter = LogLimiter(Logger(), interval=10, clock=lambda: now[0], burst=3)
    results = [limiter.info("line", n=i) for i in range(10)]
    assert results == [True] * 3 + [False] * 7
    now[0] = 10.0
    assert limiter.info("line", n=10)
    assert [fields.get("n") for _, fields in logged] == [0, 1, 2, 10]
    assert logged[-1][1]["suppressed"] == 7


@pytest.mark.anyio
async def test_a_slow_reader_bounds_the_queue_of_notifications_not_the_reply() -> None:
    """A server that floods a call with notifications while its client reads
    slowly: the gateway queues at most `max_queued_notification_bytes` of
    them, and the reply still arrives."""
    queues = ClientQueues(QueueBounds(64 * 1024, 8 * 1024))
    output = http_output.HttpOutput(queues, "local")
    request = wire.request(7, "tools/call", {"name": "x", "_meta": {"progressToken": "t"}})
    stream = output.open(request)
    note = wire.notification("notifications/progress", {"progressToken": "t", "progress": 1})
    for _ in range(5000):
        output.deliver(note)
    reply = wire.result_response(7, {"content": []})
    output.deliver(reply)
    kept = len(stream) - 1
    assert 0 < kept < 5000
    assert stream.queued == kept * len(orjson.dumps(note)) + len(orjson.dumps(reply))
    assert kept * len(orjson.dumps(note)) <= 8 * 1024
    received = [(await stream.get()).msg for _ in range(kept + 1)]
    assert received[-1] == reply
    assert stream.get_nowait() is None  # nothing else was queued
    assert len(queues) == 0  # what was read is no longer counted
    output.close(7)
    with pytest.raises(anyio.EndOfStream):
        await stream.get()
