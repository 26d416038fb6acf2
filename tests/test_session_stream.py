"""A legacy session's GET stream (2025-11-25 transports, "Listening for
Messages from the Server") against a client that reads slowly: every message
queued for it arrives, in order, whatever the keep-alive timer does."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import anyio
import orjson
import pytest

from gateway import wire
from gateway.fronts import http_answers
from gateway.fronts.client_queues import ClientQueues
from gateway.fronts.http_output import Inbox
from tests.mock_clock import on_mock_clock


class SlowClient:
    """Each body write takes longer than the keep-alive interval (on the
    mock clock: no wall-clock time passes)."""

    def __init__(self) -> None:
        self.sent: list[MutableMapping[str, Any]] = []

    async def receive(self) -> MutableMapping[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.body":
            await anyio.sleep(0.05)
        self.sent.append(message)

    def messages(self) -> list[wire.Message]:
        body = b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")
        return [
            orjson.loads(line[len(b"data: ") :])
            for line in body.split(b"\n")
            if line.startswith(b"data: ")
        ]


@on_mock_clock
async def test_a_slow_reader_loses_no_message_to_the_keepalive_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: the keep-alive timer timed the write as well as the wait,
    so a write that outlasted it was cancelled after its message had left
    the queue, and that message was lost."""
    monkeypatch.setattr(http_answers, "KEEPALIVE", 0.01)
    stream = Inbox(ClientQueues(), "local")
    for n in range(1, 4):
        stream.put(wire.notification("notifications/message", {"level": "info", "data": n}))
    stream.close()
    client = SlowClient()
    with anyio.fail_after(10):
        await http_answers.serve_session_stream(stream, client.receive, client.send)
    assert [m["params"]["data"] for m in client.messages()] == [1, 2, 3]
    assert client.sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
