"""The HTTP back's HTTP/1.1 client (gateway/backs/http_client.py) against a
raw TCP server on 127.0.0.1 whose every byte the test writes: keep-alive
reuse, stale connections, streamed bodies, redirects, and each way an
exchange can fail (RFC 9112 message framing, RFC 9110 §15.4 redirects)."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.streams.tls import TLSListener

from bench.https_back import self_signed
from gateway.backs.http_client import HttpClient, Timeout
from gateway.backs.http_failures import HttpClientError

pytestmark = pytest.mark.anyio

T = Timeout(connect=2, read=2, write=2)
Handler = Callable[[anyio.abc.SocketStream, int], Awaitable[None]]


async def read_request(stream: anyio.abc.SocketStream, buffer: bytearray) -> bytes | None:
    """One request (head + Content-Length body) from the connection; None at EOF."""
    while b"\r\n\r\n" not in buffer:
        try:
            buffer += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return None
    head, _, _ = bytes(buffer).partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    total = len(head) + 4 + length
    while len(buffer) < total:
        buffer += await stream.receive()
    request = bytes(buffer[:total])
    del buffer[:total]
    return request


def ok(body: bytes, *extra: bytes) -> bytes:
    head = [b"HTTP/1.1 200 OK", b"Content-Length: " + str(len(body)).encode(), *extra]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


@asynccontextmanager
async def server(handler: Handler) -> AsyncIterator[tuple[str, list[bytes], list[int]]]:
    """URL, every request received, and the count of connections accepted."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    seen: list[bytes] = []
    accepted = [0]

    async def serve(stream: anyio.abc.SocketStream) -> None:
        accepted[0] += 1
        async with stream:
            await handler(stream, accepted[0])

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        handler_seen = seen
        yield f"http://127.0.0.1:{port}/mcp", handler_seen, accepted
        tg.cancel_scope.cancel()


def echo_server(seen: list[bytes], *, close_after: int | None = None) -> Handler:
    async def handle(stream: anyio.abc.SocketStream, n: int) -> None:
        buffer = bytearray()
        served = 0
        while (request := await read_request(stream, buffer)) is not None:
            seen.append(request)
            await stream.send(ok(request.partition(b"\r\n\r\n")[2]))
            served += 1
            if close_after is not None and served >= close_after:
                return

    return handle


async def test_keep_alive_reuses_one_connection_and_sends_the_body() -> None:
    seen: list[bytes] = []
    async with server(echo_server(seen)) as (url, _, accepted):
        client = HttpClient()
        for i in range(3):
            response = await client.request(
                "POST",
                url,
                headers={"Content-Type": "application/json"},
                content=b"%d" % i,
                timeout=T,
            )
            assert response.status_code == 200 and response.is_success
            assert await response.aread() == b"%d" % i
        await client.aclose()
    assert accepted[0] == 1
    first = seen[0].split(b"\r\n")
    assert first[0] == b"POST /mcp HTTP/1.1"
    assert b"content-length: 1" in [line.lower() for line in first]


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    seen: list[bytes] = []
    echo = echo_server(seen, close_after=1)
    closed = [anyio.Event() for _ in range(3)]

    async def close_after_one(stream: anyio.abc.SocketStream, n: int) -> None:
        await echo(stream, n)
        await stream.aclose()
        closed[n - 1].set()

    async with server(close_after_one) as (url, _, accepted):
        client = HttpClient()
        for n in range(3):
            response = await client.request("POST", url, headers={}, content=b"x", timeout=T)
            assert response.status_code == 200
            with anyio.fail_after(2):  # the server's FIN is sent while the connection idles
                await closed[n].wait()
        await client.aclose()
    assert accepted[0] == 3 and len(seen) == 3


async def test_a_reused_connection_dropped_under_the_request_is_retried_once() -> None:
    """The server reads the second request on the kept-alive connection and
    closes without a word (an idle-timeout race): the request goes again on a
    new connection. A new connection that does the same is an error."""

    async def handle(stream: anyio.abc.SocketStream, n: int) -> None:
        buffer = bytearray()
        if await read_request(stream, buffer) is None:
            return
        if n == 1:
            await stream.send(ok(b"first"))
            await read_request(stream, buffer)  # then hang up
            return
        if n == 2:
            await stream.send(ok(b"again"))
        # n == 3: a fresh connection closed unanswered

    async with server(handle) as (url, _, accepted):
        client = HttpClient()
        first = await client.request("POST", url, headers={}, content=b"1", timeout=T)
        second = await client.request("POST", url, headers={}, content=b"2", timeout=T)
        with pytest.raises(HttpClientError):
            await client.request("POST", url, headers={}, content=b"3", timeout=T)
        await client.aclose()
    assert await first.aread() == b"first"
    assert await second.aread() == b"again"
    assert accepted[0] == 3


async def test_a_streamed_body_arrives_piece_by_piece() -> None:
    """SSE: each chunk reaches the caller while the server still holds the rest."""
    release = anyio.Event()

    async def handle(stream: anyio.abc.SocketStream, n: int) -> None:
        await read_request(stream, bytearray())
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        await stream.send(head + b"5\r\nfirst\r\n")
        await release.wait()
        await stream.send(b"6\r\nsecond\r\n0\r\n\r\n")

    async with server(handle) as (url, _, _):
        client = HttpClient()
        async with client.stream("GET", url, headers={}, timeout=T) as response:
            assert response.headers["content-type"] == "text/event-stream"
            chunks = response.aiter_bytes()
            assert await chunks.__anext__() == b"first"
            release.set()
            assert [c async for c in chunks] == [b"second"]
        await client.aclose()


async def test_leaving_a_stream_early_closes_its_connection() -> None:
    async def handle(stream: anyio.abc.SocketStream, n: int) -> None:
        buffer = bytearray()
        while await read_request(stream, buffer) is not None:
            await stream.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n")

    async with server(handle) as (url, _, accepted):
        client = HttpClient()
        for _ in range(2):
            async with client.stream("GET", url, headers={}, timeout=T) as response:
                assert await response.aiter_bytes().__anext__() == b"one"
        await client.aclose()
    assert accepted[0] == 2  # the half-read connection was not pooled


async def test_redirects_keep_the_post_only_for_307_and_308() -> None:
    seen: list[bytes] = []

    async def handle(stream: anyio.abc.SocketStream, n: int) -> None:
        buffer = bytearray()
        while (request := await read_request(stream, buffer)) is not None:
            seen.append(request)
            line = request.split(b"\r\n")[0]
            if b"/mcp " in line:
                await stream.send(
                    b"HTTP/1.1 307 Temporary\r\nLocation: /mcp/\r\nContent-Length: 0\r\n\r\n"
                )
            elif b"/old " in line:
                await stream.send(
                    b"HTTP/1.1 302 Found\r\nLocation: /mcp/\r\nContent-Length: 0\r\n\r\n"
                )
            else:
                await stream.send(ok(request.partition(b"\r\n\r\n")[2]))

    async with server(handle) as (url, _, _):
        client = HttpClient()
        moved = await client.request("POST", url, headers={}, content=b"body", timeout=T)
        found = await client.request(
            "POST", url.replace("/mcp", "/old"), headers={}, content=b"b", timeout=T
        )
        await client.aclose()
    assert moved.status_code == 200 and await moved.aread() == b"body"
    assert seen[1].startswith(b"POST /mcp/ HTTP/1.1")
    assert found.status_code == 302  # a POST is not turned into a GET


async def test_a_redirect_stays_on_its_origin_unless_another_is_allowed() -> None:
    """Issue #30: the upstream's credentials (`[upstream] headers`) travel
    with a followed redirect, so one that leads to another origin (another
    host, port or scheme) fails the exchange, saying how to allow it,
    unless that origin is in `redirect_origins`."""
    seen: list[bytes] = []
    async with server(echo_server(seen)) as (target, _, _):

        async def moving(stream: anyio.abc.SocketStream, n: int) -> None:
            buffer = bytearray()
            while await read_request(stream, buffer) is not None:
                head = b"HTTP/1.1 308 Moved\r\nLocation: " + target.encode()
                await stream.send(head + b"\r\nContent-Length: 0\r\n\r\n")

        async with server(moving) as (url, _, _):
            strict = HttpClient()
            with pytest.raises(HttpClientError, match=r"another origin .*redirect_origins"):
                await strict.request("POST", url, headers={}, content=b"x", timeout=T)
            await strict.aclose()
            assert seen == []  # nothing reached the other origin
            origin = target.rsplit("/", 1)[0]
            allowing = HttpClient(redirect_origins=[origin])
            reply = await allowing.request("POST", url, headers={}, content=b"x", timeout=T)
            await allowing.aclose()
    assert reply.status_code == 200 and await reply.aread() == b"x"
    assert len(seen) == 1 and seen[0].startswith(b"POST /mcp HTTP/1.1")


async def test_a_request_http_cannot_carry_is_refused_before_a_byte_is_written() -> None:
    seen: list[bytes] = []
    async with server(echo_server(seen)) as (url, _, accepted):
        client = HttpClient()
        for headers in ({"X-Bad": "a\r\nInjected: 1"}, {"Bad Name": "v"}, {"X-Text": "café"}):
            with pytest.raises(HttpClientError, match="cannot send this request"):
                await client.request("POST", url, headers=headers, content=b"x", timeout=T)
        await client.aclose()
    assert seen == [] and accepted[0] == 0


async def test_failures_are_client_errors_within_their_bounds() -> None:
    async def silent(stream: anyio.abc.SocketStream, n: int) -> None:
        await read_request(stream, bytearray())
        await anyio.sleep_forever()  # never answers: the client's read timeout ends it

    async def garbage(stream: anyio.abc.SocketStream, n: int) -> None:
        await read_request(stream, bytearray())
        await stream.send(b"SMTP ready\r\n\r\n")

    async def cut(stream: anyio.abc.SocketStream, n: int) -> None:
        await read_request(stream, bytearray())
        await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")

    quick = Timeout(connect=1, read=0.3, write=1)
    client = HttpClient()
    for handler, why in ((silent, "timed out"), (garbage, "HttpParser"), (cut, "closed")):
        async with server(handler) as (url, _, _):
            with anyio.fail_after(3), pytest.raises(HttpClientError, match=why):
                response = await client.request(
                    "POST", url, headers={}, content=b"x", timeout=quick
                )
                await response.aread()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()  # nothing listens there now
    with pytest.raises(HttpClientError):
        await client.request("GET", f"http://127.0.0.1:{port}/", headers={}, timeout=quick)
    with pytest.raises(HttpClientError, match="not an http"):
        await client.request("GET", "ftp://example/", headers={}, timeout=quick)
    await client.aclose()


async def _tls_listener(tmp_path: Path) -> tuple[TLSListener, str, Path]:
    """A TLS listener on loopback with a self-signed certificate: it, the
    https URL it serves, and the certificate to trust."""
    cert, key = self_signed(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    listener = TLSListener(
        await anyio.create_tcp_listener(local_host="127.0.0.1"),
        server_ctx,
        standard_compatible=False,
    )
    port = listener.listener.extra(anyio.abc.SocketAttribute.local_port)
    return listener, f"https://127.0.0.1:{port}/mcp", cert


async def test_https_upstream_is_verified(tmp_path: Path) -> None:
    """An https:// upstream: TLS with the certificate checked against the
    trusted CAs and the host name (an unknown certificate is an error)."""
    listener, url, cert = await _tls_listener(tmp_path)
    seen: list[bytes] = []
    handle = echo_server(seen)

    async def serve(stream: anyio.abc.ByteStream) -> None:
        async with stream:
            await handle(stream, 1)  # type: ignore[arg-type]

    trusting = HttpClient(ssl_context=ssl.create_default_context(cafile=str(cert)))
    default = HttpClient()
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        reply = await trusting.request("POST", url, headers={}, content=b"secret", timeout=T)
        assert reply.status_code == 200 and await reply.aread() == b"secret"
        with pytest.raises(HttpClientError, match=r"CERTIFICATE_VERIFY_FAILED|certificate"):
            await default.request("POST", url, headers={}, content=b"x", timeout=T)
        tg.cancel_scope.cancel()
    await trusting.aclose()
    await default.aclose()
    assert len(seen) == 1


async def test_a_second_answer_over_tls_is_never_the_next_requests(tmp_path: Path) -> None:
    """RFC 9112 §9.3 over https (the general path's own ground): a second
    whole answer after the first, here in a TLS record of its own that
    arrives with the first one, is read off the socket with it but never
    taken for the next request's answer: the connection is not reused."""
    listener, url, cert = await _tls_listener(tmp_path)
    accepted: list[int] = []

    async def serve(stream: anyio.abc.ByteStream) -> None:
        accepted.append(1)
        buffer = bytearray()
        async with stream:
            while (request := await read_request(stream, buffer)) is not None:  # type: ignore[arg-type]
                body = request.partition(b"\r\n\r\n")[2]
                if body != b"first":
                    await stream.send(ok(body))
                    continue
                # Two records in one write (anyio's TLSStream has no public
                # way to write two records at once).
                tls: Any = stream
                tls._ssl_object.write(ok(body))
                tls._ssl_object.write(ok(b"forged"))
                await tls.transport_stream.send(tls._write_bio.read())

    client = HttpClient(ssl_context=ssl.create_default_context(cafile=str(cert)))
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        for content in (b"first", b"second"):
            reply = await client.request("POST", url, headers={}, content=content, timeout=T)
            assert await reply.aread() == content
        tg.cancel_scope.cancel()
    await client.aclose()
    assert len(accepted) == 2


def test_a_failed_connect_says_where_and_the_systems_reason() -> None:
    """What an operator reads when the upstream cannot be reached: the
    address and the system's reason, which anyio keeps behind "All connection
    attempts failed" and asyncio words as "Connect call failed (addr)"."""
    import errno
    import socket
    import ssl

    from gateway.backs.http_failures import connect_failure

    def behind(cause: OSError) -> OSError:
        exc = OSError("All connection attempts failed")
        exc.__cause__ = cause
        return exc

    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed ('h', 1)")
    assert str(connect_failure("h", 1, behind(refused))) == (
        "cannot connect to h:1: Connection refused"
    )
    assert str(connect_failure("h", 1, refused)) == "cannot connect to h:1: Connection refused"
    unknown = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert str(connect_failure("nowhere.invalid", 443, unknown)) == (
        "cannot connect to nowhere.invalid:443: Name or service not known"
    )
    tls = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    assert str(connect_failure("h", 443, tls)).startswith("TLS with h:443 failed: SSLError")
