"""Issue #29, class 5: the accounting of what waits for HTTP clients
(gateway/fronts/client_queues.py, the Inbox of gateway/fronts/http_output.py
and the HTTP+SSE EventQueue), driven without sockets: each stream is judged
by the flow-control rule on its own bytes and with the other streams of its
principal, bytes count until written, and nothing is left counted once a
response ends. Over real sockets: tests/test_http_flow_control.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import anyio
import orjson
import pytest

from gateway import config, era, flow_control, wire
from gateway.config import Config, ConfigError
from gateway.core.routing import Forward, LegacyClientSession, Shape
from gateway.flow_control import QueueBounds
from gateway.fronts.client_queues import ClientQueues
from gateway.fronts.http_output import HttpOutput, Inbox, http_link
from gateway.peer_queue import ClientNotReading
from gateway.runtime.legacy_input import LegacyInputLoop
from tests.inprocess import http_gateway
from tests.scripted import legacy_server
from tests.sse_streams import open_stream, sse_get

pytestmark = pytest.mark.anyio

KIB = 1024
NOTE = wire.notification("notifications/progress", {"progressToken": "t", "message": "x" * 900})
SIZE = len(orjson.dumps(NOTE))


def _queues(queue: int = 8 * KIB, notes: int = 4 * KIB, principal: int = 10 * KIB) -> ClientQueues:
    return ClientQueues(QueueBounds(queue, notes), principal)


def test_the_shared_bounds_keep_a_streams_room_for_replies() -> None:
    each = QueueBounds(16 << 20, 1 << 20)
    assert flow_control.shared_bounds(each, 64 << 20) == QueueBounds(64 << 20, 49 << 20)
    # At least one stream's bound, whatever is configured.
    assert flow_control.shared_bounds(each, 1) == each
    assert ClientQueues.of(Config(command=("x",))).shared == QueueBounds(64 << 20, 49 << 20)


def test_the_principal_bound_is_a_checked_setting(tmp_path: Path) -> None:
    path = tmp_path / "gw.toml"
    path.write_text("[http]\nmax_queued_bytes_per_principal = 2097152\n")
    assert ClientQueues.of(config.load(path)).shared.queue_bytes == 16 << 20  # a stream's, at least
    path.write_text("[http]\nmax_queued_bytes_per_principal = 0\n")
    with pytest.raises(ConfigError, match=r"\[http\] max_queued_bytes_per_principal"):
        config.load(path)


async def test_two_streams_of_a_principal_share_its_bound() -> None:
    queues = _queues()
    one, two = HttpOutput(queues, "a"), HttpOutput(queues, "a")
    other = HttpOutput(queues, "b")
    inboxes = [out.open(wire.request(1, "tools/call")) for out in (one, two, other)]
    for inbox in inboxes:
        for _ in range(100):
            inbox.put(NOTE)
    a, b, c = (len(inbox) for inbox in inboxes)
    assert a == 4 * KIB // SIZE  # the stream's bound for notifications
    # The principal's: 10 KiB - (8 - 4) KiB, of which the first took its share.
    assert queues.shared.notification_bytes == 6 * KIB
    assert 0 < b == (6 * KIB) // SIZE - a < a
    assert c == a  # another principal's stream is judged on its own bytes
    assert queues.queued("a") == (a + b) * SIZE and queues.total == (a + b + c) * SIZE
    reply = wire.result_response(1, {})
    inboxes[1].put(reply)  # a reply still fits
    assert inboxes[1]._items[-1].msg == reply


async def test_bytes_count_until_written_and_every_entry_goes() -> None:
    """A message counts until its response comes back for the next one (its
    write is done) or the response ends; a principal with nothing queued is
    not remembered."""
    queues = _queues()
    inbox = Inbox(queues, "a")
    inbox.put(NOTE)
    inbox.put(NOTE)
    out = await inbox.get()
    assert out.data == orjson.dumps(NOTE)
    assert inbox.queued == queues.queued("a") == 2 * SIZE  # one queued, one being written
    await inbox.get()
    assert inbox.queued == SIZE
    assert inbox.get_nowait() is None
    assert inbox.queued == 0 and len(queues) == 0
    inbox.put(NOTE)
    inbox.put(NOTE)
    await inbox.get()
    inbox.discard()  # the client left with two unwritten
    assert len(queues) == 0 and inbox.put(NOTE) is False


async def test_past_the_bound_a_reply_is_replaced_and_a_request_refused() -> None:
    queues = _queues(queue=4 * KIB, notes=4 * KIB, principal=4 * KIB)
    inbox = Inbox(queues, "a")
    big = wire.result_response(7, {"pad": "y" * 3000})
    inbox.put(wire.notification("notifications/resources/updated", {"uri": "z" * 2000}))
    inbox.put(big)
    stand_in = inbox._items[-1].msg
    assert stand_in["id"] == 7 and stand_in["error"]["data"]["reason"] == "peer-not-reading"
    with pytest.raises(ClientNotReading):
        inbox.put(wire.request("s1", "sampling/createMessage", {"pad": "y" * 3000}))
    assert len(inbox) == 2


async def test_an_sse_session_is_cut_at_its_principals_bound() -> None:
    """HTTP+SSE streams count toward their principal too; past its bound the
    stream that would go over is cut, as at its own bound."""
    async with http_gateway(
        legacy_server(),
        max_message_bytes=1024 * 1024,
        max_queued_bytes=1024 * 1024,
        http_max_queued_bytes_per_principal=1024 * 1024,
    ) as g:
        first, second = sse_get(), sse_get()
        async with open_stream(g, first), open_stream(g, second):
            assert g.front.sse is not None
            sessions = list(g.front.sse.sessions.by_id.values())
            pad = wire.notification("notifications/message", {"data": "p" * 600_000})
            # Neither stream is read in this loop step: the first holds 600 KB,
            # the second would bring the principal past 1 MiB.
            sessions[0].link.send_nowait(pad)
            sessions[1].link.send_nowait(pad)
            assert sessions[0].ended_why is None
            assert sessions[1].ended_why == "its client does not read its stream"
        assert len(g.front.queues) == 0  # released as the streams ended


async def test_a_server_request_toward_a_full_stream_ends_its_call_at_once() -> None:
    """A modern server asks a legacy HTTP client for input while the call's
    stream is full: the request is refused to the gateway at once, and the
    call ends with the gateway's error instead of waiting for an answer that
    cannot come."""
    queues = _queues(queue=4 * KIB, notes=4 * KIB, principal=4 * KIB)
    output, link = http_link(queues, "a")
    link.session = LegacyClientSession("2025-11-25", {"elicitation": {}}, None, True)
    stream = output.open(wire.request(1, "tools/call", {"name": "greet"}))
    filler = wire.notification("notifications/resources/updated", {"uri": "x"})
    while len(stream) < 100:  # until the next one does not fit (no more than 60 of them)
        before = len(stream)
        stream.put(filler)
        if len(stream) == before:
            break

    async def forward(*args: object) -> wire.Message:
        raise AssertionError("nothing goes upstream: the client was not asked")

    elicit = {"method": "elicitation/create", "params": {"message": "name?", "requestedSchema": {}}}
    required = {"resultType": "input_required", "inputRequests": {"name": elicit}}
    call = Forward("tools/call", {"name": "greet"}, Shape.TO_LEGACY, era.Era.MODERN)
    loop = LegacyInputLoop(Config(command=("x",)), forward)
    with anyio.fail_after(5):
        reply = await loop.complete(
            link, call, cast(Any, None), wire.result_response(9, required), 1
        )
    assert reply["error"]["data"]["reason"] == "client-refused"
    assert "not reading" in reply["error"]["message"]
    assert link.server_requests == {}
