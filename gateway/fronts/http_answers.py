"""What the HTTP front writes: JSON-RPC answers as JSON or SSE, the errors
it raises as HTTP statuses, and reading a request's body."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

import anyio
import orjson

from gateway import wire
from gateway.core import http_binding
from gateway.core.mrtr_shapes import is_input_required
from gateway.core.task_shapes import is_task
from gateway.fronts.asgi import Receive, Scope, Send, chunk, sse_start, watch_disconnect
from gateway.fronts.http_output import Inbox, Out
from gateway.fronts.port import Readiness

KEEPALIVE = 15.0
REALM = "mcp-era-gateway"


class HttpError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        code: int = wire.INVALID_REQUEST,
        msg_id: wire.RequestId | None = None,
        *,
        headers: list[tuple[bytes, bytes]] | None = None,
        close: bool = False,
        **data: Any,
    ) -> None:
        """`data`: the gateway error's `data` fields (e.g. `reason`); without
        them the body is a plain JSON-RPC error."""
        super().__init__(message)
        self.status = status
        self.headers = headers or []
        if data:
            self.body = wire.gateway_error(msg_id, code, message, **data)
        else:
            self.body = wire.error_response(msg_id, code, message)
        # The request's body was not read: close rather than read the rest.
        if close:
            self.headers.append((b"connection", b"close"))


class Answer:
    """How far the answer to one request got: "none" sent yet, a "json"
    response being written, an "sse" stream open, or "done"."""

    state = "none"

    async def finish(self, send: Send, reply: wire.Message) -> None:
        """End the answer with `reply`: a JSON response, or the open SSE
        stream's last event."""
        if self.state == "sse":
            data = sse_event(orjson.dumps(reply))
            await send({"type": "http.response.body", "body": data, "more_body": False})
        else:
            await respond(send, http_binding.status_for(reply), reply)
        self.state = "done"


def needs_affinity(result: object) -> bool:
    """Whether the answer leaves state on this replica that the client
    comes back for: a held call's input_required, or a task of the
    gateway's own (the affinity cookie then names the replica)."""
    return is_input_required(result) or is_task(result)


def is_reply_to(msg: wire.Message, msg_id: wire.RequestId) -> bool:
    return "method" not in msg and msg.get("id") == msg_id


async def next_or_keepalive(stream: Inbox, send: Send) -> Out:
    """The stream's next message, with an SSE comment every KEEPALIVE seconds
    of silence so that proxies keep the response open."""
    while True:  # each pass waits KEEPALIVE at most
        with anyio.move_on_after(KEEPALIVE):
            return await stream.get()
        await send({"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True})


def sse_event(data: bytes) -> bytes:
    """The SSE event of a message (`data`: its JSON)."""
    return b"event: message\ndata: " + data + b"\n\n"


def headers_of(scope: Scope) -> dict[str, str]:
    # ASGI header names are lower-case (the server lowers them).
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}


def all_values(scope: Scope, name: bytes) -> list[str]:
    return [v.decode("latin-1") for k, v in scope["headers"] if k.lower() == name]


def bearer(headers: dict[str, str], tokens: dict[str, str]) -> str:
    """The name of the bearer token the request carries, or a 401 with the
    RFC 6750 §3 challenge (`invalid_token` when a token was given)."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    challenge = f'Bearer realm="{REALM}"'
    if scheme.lower() == "bearer":
        given = token.strip().encode()
        for name, expected in tokens.items():
            if hmac.compare_digest(given, expected.encode()):
                return name
        challenge += ', error="invalid_token", error_description="The token is not valid"'
    raise HttpError(
        401,
        "Unauthorized: a valid bearer token is required",
        reason="unauthorized",
        headers=[(b"www-authenticate", challenge.encode())],
    )


async def read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:  # ends with the last body chunk
        message = await receive()
        if message["type"] == "http.disconnect":
            raise HttpError(400, "Bad Request: the client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise HttpError(413, f"Payload Too Large: the limit is {limit} bytes", close=True)
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def respond(
    send: Send, status: int, body: Any, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    await respond_json(send, status, orjson.dumps(body), extra)


async def respond_json(
    send: Send, status: int, data: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    """A JSON response whose body is `data`, encoded already."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *(extra or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def respond_text(send: Send, status: int, text: str, ctype: str) -> None:
    data = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", ctype.encode()),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def respond_empty(send: Send, status: int) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-length", b"0")]}
    )
    await send({"type": "http.response.body", "body": b""})


async def answer_request(
    stream: Inbox,
    send: Send,
    msg_id: wire.RequestId,
    modern: bool,
    extra_headers: Callable[[wire.Message], list[tuple[bytes, bytes]]] | None,
    answer: Answer,
    *,
    forward_authorization: bool,
    first: Out | None = None,
    affinity: tuple[bytes, bytes] | None = None,
) -> wire.Message | None:
    """Answer one request from its stream (`first`: its first message, when
    the caller has it already): JSON when the reply is all there is, an SSE
    stream when something comes first (the caller's watcher cancels when the
    client goes)."""
    if first is None:
        try:
            first = await stream.get()
        except anyio.EndOfStream:  # the session ended before anything came
            answer.state = "json"
            await respond(
                send, 404, wire.error_response(msg_id, wire.INVALID_REQUEST, "Session ended")
            )
            answer.state = "done"
            return None
    msg, data = first
    if is_reply_to(msg, msg_id):
        extra = extra_headers(msg) if extra_headers else []
        status = http_binding.status_for(msg) if modern else 200
        refusal = http_binding.auth_refusal(msg)
        if refusal is not None and forward_authorization:
            # The client's own credential was refused: its status and
            # challenge are the client's to see (2025-11-25 authorization).
            status, challenge = refusal
            if challenge is not None:
                extra.append((b"www-authenticate", challenge.encode("latin-1", "replace")))
        if affinity is not None and needs_affinity(msg.get("result")):
            extra.append(affinity)
        answer.state = "json"
        await respond_json(send, status, data, extra)
        answer.state = "done"
        return msg
    extra = extra_headers(msg) if extra_headers else []
    if affinity is not None:
        # Its outcome is not known yet: if it asks for input, the retry must
        # come back here.
        extra.append(affinity)
    await send(sse_start(*extra))
    answer.state = "sse"
    while True:  # ends with the reply (or when the client goes)
        await send(chunk(sse_event(data), more=True))
        if is_reply_to(msg, msg_id):
            await send(chunk(b"", more=False))
            answer.state = "done"
            return msg
        try:
            msg, data = await next_or_keepalive(stream, send)
        except anyio.EndOfStream:  # the session ended under the request
            await send(chunk(b"", more=False))
            answer.state = "done"
            return None


async def serve_session_stream(stream: Inbox, receive: Receive, send: Send) -> None:
    """A legacy session's GET stream: its messages as SSE events, a comment
    every KEEPALIVE seconds of silence, until the client goes or the session
    ends (2025-11-25 "Listening for Messages from the Server")."""
    await send(sse_start())
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_disconnect, receive, tg.cancel_scope)
        while True:  # ends when the client goes or the session ends
            data = b": keep-alive\n\n"
            # Only the wait is timed: a write cut short by the timer would
            # lose a message already taken off the stream.
            with anyio.move_on_after(KEEPALIVE):
                try:
                    data = sse_event((await stream.get()).data)
                except anyio.EndOfStream:
                    break
            await send(chunk(data, more=True))
        tg.cancel_scope.cancel()
    await send(chunk(b"", more=False))


def readiness_answer(ready: Readiness) -> tuple[int, dict[str, Any]]:
    """/readyz: its status and its whole body (the caller shows the details
    only to those who may read them)."""
    body: dict[str, Any]
    if ready.settled:
        status = 200
        body = {
            "status": "ready",
            "era": ready.era,
            "server": ready.server_info,
        }
        if ready.legacy_version is not None:
            # A dual-era server: the version each era of client meets.
            body["versions"] = {
                "modern": ready.modern_version,
                "legacy": ready.legacy_version,
            }
    elif ready.awaiting_credentials:
        # Reachable, and it wants the clients' own credentials: the era is
        # learnt with the first one, so traffic must be let in.
        status = 200
        body = {
            "status": "ready",
            "era": None,
            "reason": "the upstream requires authorization; its era is probed "
            "with the first client's forwarded credential",
        }
    elif ready.draining:
        status = 503
        body = {"status": "draining", "reason": "the gateway is shutting down"}
    else:
        status = 503
        body = {
            "status": "not ready",
            "reason": ready.failure or "upstream era not settled yet",
        }
    return status, body
