"""The Inbox a response reads its messages from (fronts/http_output.py), and
the ClientGone extension that lets its first wait go without a watcher task
(issue #12: "task spawning per request")."""

from __future__ import annotations

import asyncio

import anyio
import orjson
import pytest

from gateway import wire
from gateway.fronts.asgi import ClientGone
from gateway.fronts.client_queues import ClientQueues
from gateway.fronts.http_output import QUICK, HttpOutput, Inbox

REPLY = wire.result_response(1, {})
NOTE = wire.notification("notifications/progress", {"progressToken": "t", "progress": 1})


def _inbox() -> Inbox:
    return Inbox(ClientQueues(), "local")


async def _settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def _waiting(inbox: Inbox, timeout: float, gone: ClientGone | None) -> asyncio.Task[object]:
    async def wait() -> object:
        try:
            return await inbox.first(timeout, gone)
        except anyio.EndOfStream:
            return "ended"

    task = asyncio.get_running_loop().create_task(wait())
    await _settle()
    assert not task.done()
    return task


async def test_first_returns_what_is_queued_without_waiting() -> None:
    inbox = _inbox()
    inbox.put(NOTE)
    inbox.put(REPLY)
    gone = ClientGone(asyncio.get_running_loop())
    assert await inbox.first(0, gone) == (NOTE, orjson.dumps(NOTE))
    assert (await inbox.get()).msg == REPLY


async def test_a_put_wakes_the_first_wait() -> None:
    inbox = _inbox()
    task = await _waiting(inbox, 60, ClientGone(asyncio.get_running_loop()))
    inbox.put(REPLY)
    assert await task == (REPLY, orjson.dumps(REPLY))


async def test_the_client_leaving_ends_the_first_wait_with_none() -> None:
    """2026-07-28 basic/patterns/cancellation: "The server MUST treat a client
    disconnect as cancellation of that request" — the front learns it from
    the server at once, with no task watching receive()."""
    gone = ClientGone(asyncio.get_running_loop())
    inbox = _inbox()
    task = await _waiting(inbox, 60, gone)
    gone.fire()
    assert await task is None
    assert gone.gone and gone.listener is None
    # A client gone before the wait begins: no wait at all.
    assert await _inbox().first(60, gone) is None


async def test_the_timeout_and_an_interrupt_end_the_first_wait_with_none() -> None:
    loop = asyncio.get_running_loop()
    inbox = _inbox()
    started = loop.time()
    assert await inbox.first(0.01, ClientGone(loop)) is None
    assert loop.time() - started >= 0.01
    task = await _waiting(inbox, 60, ClientGone(loop))
    inbox.interrupt()  # the end of the shutdown grace
    assert await task is None


async def test_closing_ends_the_first_wait_with_end_of_stream() -> None:
    inbox = _inbox()
    task = await _waiting(inbox, 60, ClientGone(asyncio.get_running_loop()))
    inbox.close()
    assert await task == "ended"
    assert inbox.put(REPLY) is False  # nobody reads it any more


async def test_without_the_extension_the_first_wait_is_quick() -> None:
    """A server that cannot tell when the client leaves: the response waits
    at most QUICK alone, then with a watcher (the caller's)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await _inbox().first(60, None) is None
    assert QUICK <= loop.time() - started < 1


async def test_a_cancelled_first_wait_leaves_nothing_behind() -> None:
    gone = ClientGone(asyncio.get_running_loop())
    inbox = _inbox()
    task = await _waiting(inbox, 60, gone)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gone.listener is None
    inbox.put(REPLY)  # wakes nobody, and is kept
    out = inbox.get_nowait()
    assert out is not None and out.msg == REPLY


async def test_output_routes_a_reply_to_its_requests_inbox() -> None:
    output = HttpOutput(ClientQueues(), "local")
    inbox = output.open(wire.request(1, "tools/call", {"name": "x"}))
    output.deliver(REPLY)
    assert (await inbox.get()).msg == REPLY
    output.close(1)
    with pytest.raises(anyio.EndOfStream):
        await inbox.get()
