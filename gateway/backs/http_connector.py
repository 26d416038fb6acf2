"""Where the HTTP back's connections come from: one shared keep-alive client
per pool, and a reachability check that lets a pool retry a server that is
back without waiting out its backoff."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol
from urllib.parse import urlsplit

import anyio
import structlog

from gateway.backs.http_back import HttpServerConnection
from gateway.backs.http_client import HttpClient

log = structlog.get_logger("gateway.backs.http")


class HttpSettings(Protocol):
    """What the connector reads of the gateway's Config (backs sit below config)."""

    @property
    def upstream_url(self) -> str | None: ...
    @property
    def upstream_headers(self) -> dict[str, str]: ...
    @property
    def upstream_redirect_origins(self) -> tuple[str, ...]: ...
    @property
    def probe_timeout(self) -> float: ...
    @property
    def request_timeout(self) -> float: ...
    @property
    def max_message_bytes(self) -> int: ...
    @property
    def tracing(self) -> bool: ...


class HttpConnector:
    """Makes the HTTP connections of one pool over one shared keep-alive client."""

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        connect_timeout: float = 10.0,
        read_timeout: float = 30.0,
        max_bytes: int = 4 * 1024 * 1024,
        trace_headers: bool = False,
        redirect_origins: tuple[str, ...] = (),
    ) -> None:
        self.url = url
        self._redirect_origins = redirect_origins
        self._trace_headers = trace_headers
        self._headers = dict(headers or {})
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._max_bytes = max_bytes
        self._client: HttpClient | None = None

    @classmethod
    def from_config(cls, config: HttpSettings) -> HttpConnector:
        """Config → connector. Connecting is bounded by `probe_timeout` (a
        server that cannot be reached within it would fail the probe anyway);
        short exchanges (notifications, DELETE, the endpoint wait) by
        `request_timeout`; requests by the session's own timeouts."""
        assert config.upstream_url is not None
        return cls(
            config.upstream_url,
            headers=config.upstream_headers,
            connect_timeout=config.probe_timeout,
            read_timeout=config.request_timeout,
            max_bytes=config.max_message_bytes,
            trace_headers=config.tracing,
            redirect_origins=config.upstream_redirect_origins,
        )

    async def connect(self, headers: Mapping[str, str] | None = None) -> HttpServerConnection:
        """A new connection; `headers` (a forwarded client credential) are
        sent on its every request, over the configured upstream headers."""
        if self._client is None:
            # HTTP/1.1 keep-alive; no connection cap, since each in-flight call
            # holds one and calls are bounded upstream of here.
            self._client = HttpClient(max_idle=32, redirect_origins=self._redirect_origins)
        connection = HttpServerConnection(
            self._client,
            self.url,
            headers={**self._headers, **(headers or {})},
            connect_timeout=self._connect_timeout,
            read_timeout=self._read_timeout,
            max_bytes=self._max_bytes,
            trace_headers=self._trace_headers,
        )
        log.info("upstream http connection", url=self.url, id=connection.pid)
        return connection

    async def reachable(self, timeout: float) -> bool:
        """Whether the upstream accepts a TCP connection now: after an outage,
        a server that is back is tried at once rather than after the backoff.
        Only the connect is tried (no TLS, no request): it is cheap and says
        what the backoff guesses at."""
        parts = urlsplit(self.url)
        if not parts.hostname:
            return False
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            with anyio.fail_after(timeout):
                stream = await anyio.connect_tcp(parts.hostname, port)
        except (OSError, TimeoutError):
            return False  # refused, unreachable or silent: wait out the backoff
        await stream.aclose()
        return True

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
