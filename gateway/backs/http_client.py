"""The HTTP back's client: keep-alive connections per origin (the one
connection implementation, http_connection), the request as written on the
wire, redirects, and the awaiting form of an exchange — a task that awaits
the answer's head, then reads its body — over the same callbacks that a
call's POST uses without a task (http_back).

Why not httpx: one MCP POST to a fast server, one at a time, cost 0.80 ms of
CPU through httpx.AsyncClient, 0.52 ms through httpcore's pool alone, and
0.32 ms as one h11 request written in a single send (quiet benchmark machine);
at 32 in flight httpx's pool scan made it worse (bench/RESULTS-http.md). What
the back needs is small: POST and GET with streamed bodies (SSE), DELETE,
keep-alive per origin, TLS, redirects, bounded connect and write waits.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio

from gateway.backs import http_wire
from gateway.backs.http_body_feed import BodyFeed
from gateway.backs.http_connection import FEED, BodyChoice, EventSink, HttpConnection
from gateway.backs.http_failures import HttpClientError, connect_failure

MAX_REDIRECTS = 5

# What a request's head may carry (RFC 9110 §5.1, §5.5, as h11 reads them):
# a token name; an ASCII value with no NUL, no CR or LF, and blanks only
# inside; a target and Host of visible ASCII. A request with anything else
# is refused before a byte is written: nothing can be injected.
_TOKEN = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_VALUE = re.compile(r"(?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?", re.ASCII)
_VISIBLE = re.compile(r"[\x21-\x7e]*")
_TARGET = re.compile(r"/[\x21-\x7e]*")


def header_fits(name: str, value: str) -> bool:
    return value.isascii() and bool(_TOKEN.fullmatch(name)) and bool(_VALUE.fullmatch(value))


@dataclass(frozen=True, slots=True)
class Timeout:
    connect: float  # establishing a connection (TCP + TLS)
    read: float | None  # the wait for each piece of the response; None: unbounded
    write: float  # sending the request


@dataclass(frozen=True, slots=True)
class Target:
    """Where an absolute URL's request goes: its origin, Host header and target."""

    scheme: str
    host: str
    port: int
    netloc: str
    path: str

    @classmethod
    def of(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise HttpClientError(f"not an http(s) URL: {url!r}")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise HttpClientError(f"not an http(s) URL: {url!r}") from None
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if not (_TARGET.fullmatch(path) and _VISIBLE.fullmatch(parts.netloc)):
            raise HttpClientError(f"cannot send this request: {url!r} is not a valid target")
        return cls(parts.scheme, parts.hostname, port, parts.netloc, path)

    def head(self, method: str, headers: Mapping[str, str]) -> str:
        """The request line and headers (without the framing), checked."""
        lines = [f"{method} {self.path} HTTP/1.1\r\nHost: {self.netloc}\r\n"]
        for name, value in headers.items():
            if not header_fits(name, value):
                raise HttpClientError(f"cannot send this request: header {name!r} is not valid")
            lines.append(f"{name}: {value}\r\n")
        return "".join(lines)


def request_bytes(method: str, target: Target, headers: Mapping[str, str], body: bytes) -> bytes:
    """The whole request as written on the wire."""
    head = target.head(method, headers)
    if body or method in ("POST", "PUT", "PATCH"):
        head += f"Content-Length: {len(body)}\r\n"
    return f"{head}\r\n".encode("ascii") + body


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


class OriginPool:
    """Idle keep-alive connections to one origin, most recent first; `tls`:
    an https origin, verified with that context."""

    def __init__(
        self, host: str, port: int, *, max_idle: int, tls: ssl.SSLContext | None = None
    ) -> None:
        self.host = host
        self.port = port
        self.tls = tls
        self._max_idle = max_idle
        self._idle: list[HttpConnection] = []
        self._open: set[HttpConnection] = set()
        self._closed = False

    def take(self) -> HttpConnection | None:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                connection.reused = True
                return connection
        return None

    async def connect(self, timeout: float) -> HttpConnection:
        if self._closed:
            raise HttpClientError("the client is closed")
        loop = asyncio.get_running_loop()
        try:
            with anyio.fail_after(timeout):
                _, connection = await loop.create_connection(
                    lambda: HttpConnection(self),
                    self.host,
                    self.port,
                    ssl=self.tls,
                    server_hostname=self.host if self.tls is not None else None,
                    ssl_handshake_timeout=timeout if self.tls is not None else None,
                )
        except TimeoutError:
            raise HttpClientError(f"connecting to {self.host}:{self.port} timed out") from None
        except OSError as exc:
            raise connect_failure(self.host, self.port, exc) from None
        if self._closed:  # closed while connecting: this one goes too
            connection.abort()
            raise HttpClientError("the client is closed")
        self._open.add(connection)
        return connection

    def release(self, connection: HttpConnection) -> None:
        if self._closed:
            connection.close()
            return
        self._idle.append(connection)
        if len(self._idle) > self._max_idle:
            self._idle.pop(0).close()

    def forget(self, connection: HttpConnection) -> None:
        self._open.discard(connection)

    def close(self) -> None:
        self._closed = True
        self._idle.clear()
        for connection in list(self._open):
            connection.abort()
        self._open.clear()


_RETRY = object()


class _Awaited:
    """An exchange a task awaits: its head (with the body's feed), its
    failure, or a retry wakes it."""

    __slots__ = ("_event", "outcome")

    def __init__(self) -> None:
        self._event = anyio.Event()
        self.outcome: tuple[int, dict[str, str], BodyFeed] | HttpClientError | object = None

    def body_for(self, status: int, headers: dict[str, str]) -> EventSink | BodyChoice:
        return FEED

    def answered(self, status: int, headers: dict[str, str], body: bytes | None, size: int) -> None:
        # Never asked for (body_for says FEED): were it, the task still wakes.
        self._settle(HttpClientError("the answer came without its body"))

    def streaming(self, status: int, headers: dict[str, str], feed: BodyFeed) -> None:
        self._settle((status, headers, feed))

    def failed(self, why: str) -> None:
        self._settle(HttpClientError(why))

    def retry(self) -> None:
        self._settle(_RETRY)

    def _settle(self, outcome: object) -> None:
        if self.outcome is None:
            self.outcome = outcome
            self._event.set()

    async def wait(self, timeout: float | None) -> object:
        with anyio.move_on_after(timeout):
            await self._event.wait()
        if self.outcome is None:
            raise HttpClientError("timed out waiting for the upstream")
        return self.outcome


class HttpClient:
    """Keep-alive HTTP/1.1 connections per origin, reused most recent first.
    `redirect_origins`: origins other than a request's own that its
    redirects may lead to (same-origin only by default)."""

    def __init__(
        self,
        *,
        max_idle: int = 32,
        ssl_context: ssl.SSLContext | None = None,
        redirect_origins: Iterable[str] = (),
    ) -> None:
        self._max_idle = max_idle
        self._ssl = ssl_context
        self._closed = False
        self._pools: dict[tuple[str, str, int], OriginPool] = {}
        self.redirect_origins = frozenset(http_wire.origin_of(o) for o in redirect_origins)

    @property
    def tls(self) -> ssl.SSLContext:
        """What https connections verify with: the context given, else the
        system's CAs (or `SSL_CERT_FILE`'s), loaded once: loading them is
        milliseconds of CPU, not to be spent on every connection."""
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    def pool(self, target: Target) -> OriginPool:
        """The connections to `target`'s origin (the HTTP back runs on asyncio)."""
        if self._closed:
            raise HttpClientError("the client is closed")
        key = (target.scheme, target.host, target.port)
        pool = self._pools.get(key)
        if pool is None:
            tls = self.tls if target.scheme == "https" else None
            pool = OriginPool(target.host, target.port, max_idle=self._max_idle, tls=tls)
            self._pools[key] = pool
        return pool

    def redirect(
        self, method: str, url: str, status: int, headers: Mapping[str, str]
    ) -> http_wire.Redirect | None:
        """What a redirect answer to `method url` leads to (http_wire's rule
        with this client's allowed origins); None: the answer stands."""
        return http_wire.redirect(
            method, url, status, headers.get("location"), self.redirect_origins
        )

    async def aclose(self) -> None:
        self._closed = True
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            pool.close()
        await anyio.lowlevel.checkpoint()

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
        the block before the body's end closes the connection rather than
        return it half-read to the pool."""
        for _ in range(MAX_REDIRECTS + 1):
            status, response_headers, feed = await self._exchange(
                method, url, headers, content, timeout
            )
            hop = self.redirect(method, url, status, response_headers)
            if hop is None:
                break
            # A redirect's body is not read: whole already, its connection went
            # back to the pool; else it is closed, not waited on.
            feed.close()
            if hop.url is None:
                raise HttpClientError(hop.refused or "redirect refused")
            url = hop.url
        else:
            raise HttpClientError(f"more than {MAX_REDIRECTS} redirects")
        chunks = feed.chunks(timeout.read)
        try:
            yield Response(status, response_headers, chunks)
        finally:
            await chunks.aclose()
            feed.close()

    async def _exchange(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        content: bytes,
        timeout: Timeout,
    ) -> tuple[int, dict[str, str], BodyFeed]:
        """One request, up to its answer's head."""
        target = Target.of(url)
        data = request_bytes(method, target, headers, content)
        pool = self.pool(target)
        # A pooled connection that closes before any answer is replaced (there
        # are at most max_idle of them); a failure on a fresh one is final.
        while True:
            connection = pool.take()
            if connection is None:
                connection = await pool.connect(timeout.connect)
            waiter = _Awaited()
            connection.send(data, waiter, timeout.write, 0)
            try:
                outcome = await waiter.wait(timeout.read)
            except BaseException:
                connection.drop(waiter)
                feed = waiter.outcome
                if isinstance(feed, tuple):
                    feed[2].close()
                raise
            if outcome is _RETRY:
                continue
            if isinstance(outcome, HttpClientError):
                raise outcome
            assert isinstance(outcome, tuple)
            return outcome
