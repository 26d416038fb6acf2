"""A raw HTTP/1.1 server on 127.0.0.1 that writes each answer byte for byte
as the test scripts it (split writes, chunks, informational answers,
closes), for the HTTP back's connection and answer tests."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import orjson

from gateway import wire

# (request number, its JSON-RPC message) → the bytes written back, in pieces,
# and whether the server then closes the connection.
Script = Callable[[int, wire.Message], tuple[list[bytes], bool]]


@dataclass
class RawServer:
    url: str = ""
    connections: int = 0
    peers: list[int] = field(default_factory=list)  # the client port of each request
    heads: list[bytes] = field(default_factory=list)  # each request's head


def json_answer(msg: wire.Message, extra: bytes = b"") -> bytes:
    body = orjson.dumps(wire.result_response(msg["id"], {"echo": msg["id"]}))
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + extra
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


@asynccontextmanager
async def raw_server(script: Script, tls: ssl.SSLContext | None = None) -> AsyncIterator[RawServer]:
    """`tls`: https, with that server context."""
    state = RawServer()
    count = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal count
        state.connections += 1
        port = writer.get_extra_info("peername")[1]
        try:
            while True:  # one request per pass, until the client closes or the script does
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                msg = orjson.loads(await reader.readexactly(length))
                count += 1
                state.peers.append(port)
                state.heads.append(head)
                pieces, close = script(count, msg)
                for piece in pieces:
                    writer.write(piece)
                    await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=tls)
    scheme = "https" if tls is not None else "http"
    state.url = f"{scheme}://127.0.0.1:{server.sockets[0].getsockname()[1]}/mcp"
    try:
        yield state
    finally:
        server.close()


def reply_to(seen: list[wire.Message], msg_id: int) -> wire.Message:
    return next(m for m in seen if m.get("id") == msg_id and "method" not in m)
