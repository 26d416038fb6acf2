"""Issue #29, class 3: a reply belongs to the exchange it came on. An HTTP
upstream that answers one POST with a reply carrying another call's id (held
meanwhile, perhaps another principal's) fails that POST's own call and never
reaches the other call; the other call still gets its own answer."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
import structlog.testing

from gateway import wire
from gateway.backs import http_back, http_requests
from gateway.log_limit import LogLimiter
from tests.http_back_support import connection, legacy_handshake, modern, until_reply
from tests.servers.scripted_http import HttpRequest, HttpServer, LegacyHttp, Reply, serve, sse

pytestmark = pytest.mark.anyio

FOREIGN = "upstream answered another call's id on this exchange"


class CrossingServer:
    """Holds the `held` call until released; answers `crossing` with a reply
    under the held call's upstream id, as JSON or on an event stream."""

    def __init__(self, as_sse: bool) -> None:
        self.as_sse = as_sse
        self.held_id: Any = None
        self.holding = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, req: HttpRequest, server: HttpServer) -> Reply:
        msg = req.message
        name = (msg.get("params") or {}).get("name")
        if name == "held":
            self.held_id = msg["id"]
            self.holding.set()
            await self.release.wait()
            return Reply.json(wire.result_response(msg["id"], _text("the held call's own")))
        forged = wire.result_response(self.held_id, _text("written for the other call"))
        if not self.as_sse:
            return Reply.json(forged)

        async def events(stream: Any) -> None:
            await stream.send(sse(forged))

        return server.feed(events)


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "resultType": "complete"}


@pytest.mark.parametrize("as_sse", [False, True], ids=["json", "sse"])
async def test_a_reply_under_a_foreign_id_fails_its_own_exchange_only(
    as_sse: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_requests, "foreign_log", LogLimiter(http_back.log))
    handler = CrossingServer(as_sse)
    async with serve(handler) as server, connection(server.url) as conn:
        held = modern(1, "tools/call", name="held", arguments={})
        await conn.send(held)
        with anyio.fail_after(5):
            await handler.holding.wait()
        with structlog.testing.capture_logs() as logs:
            seen = await until_reply(conn, 2) if await _send(conn, 2) else []
        crossing = next(m for m in seen if "method" not in m and m.get("id") == 2)
        assert crossing["error"]["data"]["reason"] == "upstream-failed"
        assert not any(m.get("id") == 1 for m in seen), "the forged reply reached call 1"
        assert [e["event"] for e in logs].count(FOREIGN) == 1
        handler.release.set()
        own = next(m for m in await until_reply(conn, 1) if m.get("id") == 1)
        assert own["result"]["content"][0]["text"] == "the held call's own"


async def _send(conn: Any, msg_id: int) -> bool:
    await conn.send(modern(msg_id, "tools/call", name="crossing", arguments={}))
    return True


async def test_a_reply_on_the_get_stream_reaches_no_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GET stream carries no replies (2025-11-25 "Listening for Messages
    from the Server"): one there is dropped with a warning, never routed by
    its id to whichever call has it."""
    monkeypatch.setattr(http_requests, "foreign_log", LogLimiter(http_back.log))
    behaviour = LegacyHttp()
    async with serve(behaviour) as server, connection(server.url) as conn:
        await legacy_handshake(conn)
        with structlog.testing.capture_logs() as logs:
            await behaviour.push("sess-1", wire.result_response(2, _text("forged")))
            await behaviour.push("sess-1", wire.notification("notifications/tools/list_changed"))
            seen: list[wire.Message] = []
            with anyio.fail_after(3):
                while not seen:  # each pass takes one read of the connection
                    seen += await conn.receive_batch()
    assert [m.get("method") for m in seen] == ["notifications/tools/list_changed"]
    assert [e["event"] for e in logs].count("upstream sent a reply on its GET stream; dropped") == 1
