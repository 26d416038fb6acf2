"""The HTTP back's HTTP/1.1 client: keep-alive connections over anyio, the
protocol itself done by h11.

Why not httpx: one MCP POST to a fast server, one at a time, cost 0.80 ms of
CPU through httpx.AsyncClient, 0.52 ms through httpcore's pool alone, and
0.32 ms as one h11 request written in a single send (quiet benchmark machine);
at 32 in flight httpx's pool scan made it worse, and the gateway's HTTP ↔ HTTP
hop went from 1.87 to 0.50 ms of CPU per request when it changed
(bench/RESULTS-http.md). What the back needs is small: POST and
GET with streamed bodies (SSE), DELETE, keep-alive per origin, TLS, redirects,
bounded connect and write waits. h11 (the state machine httpcore and uvicorn
use) does the parsing and framing, so nothing here reads HTTP by hand. The
calls' POSTs go faster still, without a task each (http_direct, over the
pools `direct_pool` hands out); everything else comes here.
"""

from __future__ import annotations

import asyncio
import os
import select
import ssl
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast
from urllib.parse import urljoin, urlsplit

import anyio
import anyio.abc
import h11
import structlog
from anyio.streams.tls import TLSAttribute

from gateway.log_limit import LogLimiter
from gateway.upstream_errors import UpstreamError

if TYPE_CHECKING:
    from gateway.backs.http_direct import DirectPool

_READ_SIZE = 65536
# An answer's head: a server that sends more without ending it fails the call
# (h11 buffers up to this; http_direct counts its heads against it too).
MAX_HEAD_BYTES = 64 * 1024
HEAD_TOO_LONG = f"the answer's head is over {MAX_HEAD_BYTES} bytes"
_MAX_REDIRECTS = 5
# A server writing past its answers writes past every one: a line a minute.
_past_answer_log = LogLimiter(structlog.get_logger("gateway.backs.http"))
# A redirect that keeps the method and body; 301/302/303 turn a request into a
# bodiless GET (RFC 9110 §15.4), which an MCP POST cannot survive.
_SAME_METHOD = (307, 308)
_REDIRECTS = (301, 302, 303, 307, 308)


class HttpClientError(UpstreamError):
    """The exchange failed below HTTP: connect, TLS, a broken stream, a
    timeout, or a peer that does not speak HTTP/1.1. The client's own
    transport exceptions (OSError, ssl, h11, anyio) become this at its I/O
    boundary, each stage saying what failed; the HTTP back turns it into
    the failed call's answer."""


@dataclass(frozen=True, slots=True)
class Timeout:
    connect: float  # establishing a connection (TCP + TLS)
    read: float | None  # the wait for each piece of the response; None: unbounded
    write: float  # sending the request


@dataclass(frozen=True, slots=True)
class _Origin:
    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> tuple[_Origin, str, str]:
        """(origin, Host header value, request target) of an absolute URL."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise HttpClientError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return cls(parts.scheme, parts.hostname, port), parts.netloc, target


class Response:
    """Status and headers at once; the body as it arrives (`aiter_bytes`)."""

    def __init__(self, status: int, headers: dict[str, str], body: AsyncIterator[bytes]) -> None:
        self.status_code = status
        self.headers = headers  # lower-case names
        self._body = body

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        return self._body

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self._body])


class _Connection:
    """One keep-alive connection: one request at a time, in h11's cycle."""

    def __init__(self, origin: _Origin, stream: anyio.abc.ByteStream) -> None:
        self.origin = origin
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.used = False  # has served a request: may have gone stale while idle
        self.answered = False  # a byte of the current response has arrived

    def reusable(self) -> bool:
        """The exchange is over, and nothing came after its answer: RFC 9112
        §9.3, one answer a request. Bytes read past it (a broken server, a
        second answer) would be taken for the next request's answer."""
        return (
            self.h11.our_state is h11.DONE
            and self.h11.their_state is h11.DONE
            and not self.h11.trailing_data[0]
        )

    def stale(self) -> bool:
        """An idle connection the server closed (or wrote to) meanwhile."""
        tls = self.stream.extra(TLSAttribute.ssl_object, None)
        if tls is not None:
            # Written to, and read off the socket already with the last
            # answer: decrypted (pending), or still in anyio's incoming
            # buffer (its only handle is private: without it, this check
            # is the socket's alone, as for plain http).
            incoming = getattr(self.stream, "_read_bio", None)
            if tls.pending() or getattr(incoming, "pending", 0):
                return True
        sock = self.stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        if sock is None:
            return False
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    async def receive_event(self, read_timeout: float | None) -> h11.Event | type[h11.PAUSED]:
        while (
            True
        ):  # each pass reads once, within read_timeout (None: the caller's scope bounds it)
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return cast("h11.Event | type[h11.PAUSED]", event)
            with anyio.fail_after(read_timeout):
                try:
                    data = await self.stream.receive(_READ_SIZE)
                except (anyio.EndOfStream, anyio.IncompleteRead):
                    if not self.answered:
                        raise anyio.EndOfStream from None  # closed without a word
                    data = b""
            self.answered = True
            self.h11.receive_data(data)

    async def aclose(self) -> None:
        await anyio.aclose_forcefully(self.stream)


class HttpClient:
    """Keep-alive HTTP/1.1 connections per origin, reused most recent first."""

    def __init__(self, *, max_idle: int = 32, ssl_context: ssl.SSLContext | None = None) -> None:
        self._idle: dict[_Origin, deque[_Connection]] = {}
        self._max_idle = max_idle
        self._ssl = ssl_context
        self._closed = False
        self._direct: dict[tuple[str, str, int, int], DirectPool] = {}

    @property
    def tls(self) -> ssl.SSLContext:
        """What https connections verify with: the context given, else the
        system's CAs (or `SSL_CERT_FILE`'s), loaded once: loading them is
        milliseconds of CPU, not to be spent on every connection."""
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    def direct_pool(self, url: str, max_bytes: int) -> DirectPool | None:
        """The callback-driven connections for POSTs to `url` (http_direct),
        http or https, or None where they cannot serve: a loop other than
        asyncio."""
        try:
            origin, _, _ = _Origin.of(url)
        except HttpClientError:
            return None
        if self._closed or not _on_asyncio():
            return None
        key = (origin.scheme, origin.host, origin.port, max_bytes)
        pool = self._direct.get(key)
        if pool is None:
            from gateway.backs.http_direct import DirectPool

            pool = self._direct[key] = DirectPool(
                origin.host,
                origin.port,
                max_idle=self._max_idle,
                max_bytes=max_bytes,
                tls=self.tls if origin.scheme == "https" else None,
            )
        return pool

    async def aclose(self) -> None:
        self._closed = True
        direct, self._direct = self._direct, {}
        for pool in direct.values():
            pool.close()
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                await connection.aclose()

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        content: bytes = b"",
        timeout: Timeout,
    ) -> Response:
        """The whole exchange; the response's body is read."""
        async with self.stream(method, url, headers=headers, content=content, timeout=timeout) as r:
            body = await r.aread()

        async def replay() -> AsyncIterator[bytes]:
            yield body

        return Response(r.status_code, r.headers, replay())

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        content: bytes = b"",
        timeout: Timeout,
    ) -> AsyncIterator[Response]:
        """Send the request; yield the response with its body unread. Leaving
        the block early (or by an error) closes the connection rather than
        return it half-read to the pool."""
        for _ in range(_MAX_REDIRECTS + 1):
            connection, status, response_headers = await self._send(
                method, url, headers, content, timeout
            )
            location = response_headers.get("location")
            follow = (
                status in _REDIRECTS
                and location
                and (status in _SAME_METHOD or method in ("GET", "DELETE"))
            )
            if not follow:
                break
            await self._drain(connection, timeout.read)
            url = urljoin(url, location)
        else:
            raise HttpClientError(f"more than {_MAX_REDIRECTS} redirects")
        done = False

        async def body() -> AsyncGenerator[bytes, None]:
            nonlocal done
            while True:  # ends at the body's end, a close, or an error
                try:
                    event = await connection.receive_event(timeout.read)
                except TimeoutError:
                    raise HttpClientError("the upstream stopped sending mid-body") from None
                except (OSError, anyio.BrokenResourceError, h11.ProtocolError) as exc:
                    raise HttpClientError(describe(exc)) from None
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    done = True
                    return
                elif isinstance(event, h11.ConnectionClosed):
                    raise HttpClientError("the upstream closed the connection mid-body")

        chunks = body()
        try:
            yield Response(status, response_headers, chunks)
        finally:
            await chunks.aclose()
            if done and not self._closed and connection.reusable():
                connection.h11.start_next_cycle()
                await self._release(connection)
            else:
                if done and connection.h11.trailing_data[0]:
                    wrote_past_answer(connection.origin.host, connection.origin.port)
                await connection.aclose()

    async def _send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        content: bytes,
        timeout: Timeout,
    ) -> tuple[_Connection, int, dict[str, str]]:
        origin, host, target = _Origin.of(url)
        fields = [("Host", host), *headers.items()]
        if content or method in ("POST", "PUT", "PATCH"):
            fields.append(("Content-Length", str(len(content))))
        # A pooled connection that fails before any answer is replaced (there are
        # at most max_idle of them); a failure on a fresh one is final.
        while True:
            connection = await self._acquire(origin, timeout.connect)
            reused = connection.used
            connection.used = True
            connection.answered = False
            try:
                try:
                    data = connection.h11.send(
                        h11.Request(method=method, target=target, headers=fields)
                    )
                    if content:
                        data += connection.h11.send(h11.Data(data=content))
                    data += connection.h11.send(h11.EndOfMessage())
                except h11.LocalProtocolError as exc:
                    raise HttpClientError(f"cannot send this request: {exc}") from None
                with anyio.fail_after(timeout.write):
                    await connection.stream.send(data)
                while True:  # ends at the response head (informational 1xx are skipped)
                    event = await connection.receive_event(timeout.read)
                    if isinstance(event, h11.Response):
                        return connection, event.status_code, _headers(event.headers)
                    if isinstance(event, h11.ConnectionClosed):
                        raise anyio.EndOfStream
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError) as exc:
                await connection.aclose()
                if reused:
                    # The server dropped the idle connection as we wrote on
                    # it: nothing of the request was answered, so it is sent
                    # again on a new connection (httpcore does the same).
                    continue
                raise HttpClientError(describe(exc) or "connection closed") from None
            except TimeoutError:
                await connection.aclose()
                raise HttpClientError("timed out waiting for the upstream") from None
            except (OSError, h11.ProtocolError, ssl.SSLError) as exc:
                await connection.aclose()
                if isinstance(exc, h11.RemoteProtocolError) and exc.error_status_hint == 431:
                    # h11's "Receive buffer too long": said as the direct path says it.
                    raise HttpClientError(HEAD_TOO_LONG) from None
                raise HttpClientError(describe(exc)) from None
            except BaseException:
                await connection.aclose()
                raise

    async def _drain(self, connection: _Connection, read_timeout: float | None) -> None:
        """Read a redirect's body so the connection can serve the next hop."""
        try:
            while not isinstance(
                await connection.receive_event(read_timeout),
                h11.EndOfMessage | h11.ConnectionClosed,
            ):
                pass
        except (OSError, TimeoutError, anyio.BrokenResourceError, h11.ProtocolError):
            await connection.aclose()
            return
        if connection.reusable():
            connection.h11.start_next_cycle()
            await self._release(connection)
        else:
            await connection.aclose()

    async def _acquire(self, origin: _Origin, connect_timeout: float) -> _Connection:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            if not connection.stale():
                return connection
            await connection.aclose()
        if self._closed:
            raise HttpClientError("the client is closed")
        try:
            with anyio.fail_after(connect_timeout):
                if origin.scheme == "https":
                    stream: anyio.abc.ByteStream = await anyio.connect_tcp(
                        origin.host,
                        origin.port,
                        ssl_context=self.tls,
                        tls=True,
                        tls_hostname=origin.host,
                    )
                else:
                    stream = await anyio.connect_tcp(origin.host, origin.port)
        except TimeoutError:
            raise HttpClientError(f"connecting to {origin.host}:{origin.port} timed out") from None
        except (OSError, ssl.SSLError) as exc:
            raise connect_failure(origin.host, origin.port, exc) from None
        return _Connection(origin, stream)

    async def _release(self, connection: _Connection) -> None:
        idle = self._idle.setdefault(connection.origin, deque())
        idle.append(connection)
        if len(idle) > self._max_idle:
            await idle.popleft().aclose()


def _headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Lower-case names; a repeated field's values joined by ", " (RFC 9110 §5.3)."""
    out: dict[str, str] = {}
    for name, value in raw:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out


def _on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # trio (tests on its mock clock)
        return False
    return True


def wrote_past_answer(host: str, port: int) -> None:
    """RFC 9112 §9.3, one answer a request: the server wrote more after one.
    The answer stands; its connection is closed rather than reused, where
    the rest would be read as the next request's answer."""
    _past_answer_log.warning(
        "upstream wrote past an answer; its connection is closed, not reused",
        upstream=f"{host}:{port}",
    )


def describe(exc: BaseException) -> str:
    """An exception as one log-line or error-message phrase (ours already is one)."""
    text = str(exc)
    if isinstance(exc, HttpClientError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def connect_failure(host: str, port: int, exc: OSError) -> HttpClientError:
    """A failed connect as the operator needs it: where to, and the system's
    reason ("Connection refused", "Name or service not known"), which anyio
    keeps behind "All connection attempts failed"."""
    cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
    if isinstance(cause, ssl.SSLError):
        return HttpClientError(f"TLS with {host}:{port} failed: {describe(cause)}")
    errno = cause.errno
    # asyncio words a refused connect as "Connect call failed (addr)": the errno says it.
    why = os.strerror(errno) if isinstance(errno, int) and errno > 0 else cause.strerror
    why = why or describe(cause)
    return HttpClientError(f"cannot connect to {host}:{port}: {why}")
