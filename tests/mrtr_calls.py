"""MRTR calls over scripted peers (2026-07-28 basic/patterns/mrtr): a legacy
server's tool that elicits a name, a modern server's tool that answers
`input_required` until it has its inputs, and the modern client's call and
its retries with `inputResponses` and `requestState`. From
tests/test_mrtr_bridge.py."""

from __future__ import annotations

from typing import Any

import anyio

from gateway import era, wire
from gateway.client_link import ClientLink
from tests.scripted import Client, ScriptedServer

ELICIT = {
    "message": "Your name?",
    "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
}
ALL: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}}


def meta(caps: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        era.PROTOCOL_VERSION: "2026-07-28",
        era.CLIENT_CAPABILITIES: ALL if caps is None else caps,
    }


async def ask_name(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    answer = await server.ask("elicitation/create", ELICIT)
    result = answer.get("result") or {}
    if result.get("action") != "accept":
        return {"content": [{"type": "text", "text": f"no name ({answer})"}]}
    return {"content": [{"type": "text", "text": f"Hello, {result['content']['name']}"}]}


async def start(
    c: Client,
    name: str,
    msg_id: int = 1,
    caps: dict[str, Any] | None = None,
    link: ClientLink | None = None,
) -> wire.Message:
    params = {"name": name, "arguments": {}, "_meta": meta(caps)}
    return await send_and_wait(c, wire.request(msg_id, "tools/call", params), link)


async def retry(
    c: Client,
    first: wire.Message,
    responses: dict[str, Any],
    msg_id: int,
    name: str = "ask_name",
    link: ClientLink | None = None,
    state: object = None,
) -> wire.Message:
    params = {
        "name": name,
        "arguments": {},
        "_meta": meta(),
        "inputResponses": responses,
        "requestState": first["result"]["requestState"] if state is None else state,
    }
    return await send_and_wait(c, wire.request(msg_id, "tools/call", params), link)


async def send_and_wait(c: Client, msg: wire.Message, link: ClientLink | None) -> wire.Message:
    if link is None:
        await c.send(msg)
        with anyio.fail_after(5):
            while True:
                reply = await c.inbox.receive()
                if reply.get("id") == msg["id"] and "method" not in reply:
                    return reply
    box: list[wire.Message] = []
    done = anyio.Event()
    original = link.send

    async def capture(out: wire.Message) -> None:
        if out.get("id") == msg["id"] and "method" not in out:
            box.append(out)
            done.set()
        else:
            await original(out)

    def capture_nowait(out: wire.Message) -> None:
        if out.get("id") == msg["id"] and "method" not in out:
            box.append(out)
            done.set()

    original_nowait = link.send_nowait
    link.send = capture
    link.send_nowait = capture_nowait
    try:
        await c.service.handle_client_message(link, msg, c.requests)
        with anyio.fail_after(5):
            await done.wait()
    finally:
        link.send = original
        link.send_nowait = original_nowait
    return box[0]


def accept(name: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"name": name}}


def mrtr_tool(needs: dict[str, Any]) -> Any:
    async def handler(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        params = msg["params"]
        responses = params.get("inputResponses") or {}
        missing = {k: v for k, v in needs.items() if k not in responses}
        if missing:
            return {
                "resultType": "input_required",
                "inputRequests": missing,
                "requestState": f"state-{len(responses)}",
            }
        return {
            "content": [{"type": "text", "text": repr(sorted(responses.items()))}],
            "_meta": {"state": params.get("requestState")},
        }

    return handler
