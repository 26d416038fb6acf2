"""The gateway as an HTTP sidecar: uvicorn serves the ASGI front on
HOST:PORT through the connection-limited protocol of fronts/http_limits.py,
the service and its upstream run in the same task tree. On SIGTERM/SIGINT
uvicorn stops accepting; GET streams and listens end at once, calls get
`shutdown_grace` to finish and then a gateway error; then the upstream is
stopped like in stdio mode."""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import socket
from collections.abc import Iterator

import anyio
import structlog
import uvicorn

from gateway.config import Config
from gateway.fronts import http_limits
from gateway.fronts.http_front import HttpFront
from gateway.runtime.metrics import Metrics
from gateway.runtime.service import GatewayService

log = structlog.get_logger("gateway.http")


class _Server(uvicorn.Server):
    """uvicorn, ending listen streams gracefully before it waits for open
    requests to finish (they never would)."""

    def __init__(
        self, front: HttpFront, guard: http_limits.ConnectionGuard, config: uvicorn.Config
    ) -> None:
        super().__init__(config)
        self._front = front
        self._guard = guard

    def cut_off(self) -> None:
        """No more grace: what still runs is answered now."""
        self._front.cut_off_calls()
        self._guard.cut_off_bodies()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._front.service.end_subscriptions()
        self._front.end_streams()
        # Calls get the grace to finish, then a gateway error each; uvicorn's
        # own deadline (a second later) would answer them 500 text/plain.
        cut_off = asyncio.get_running_loop().call_later(
            self._front.config.shutdown_grace, self.cut_off
        )
        try:
            await super().shutdown(sockets)
        finally:
            cut_off.cancel()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn re-raises the signal it caught once it has stopped, which
        # would kill us before the upstream is stopped; the gateway watches
        # the signals itself (serve_http) and asks uvicorn to exit.
        yield


async def _exit_on_signal(server: _Server) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("signal received; shutting down", signal=signal.Signals(signum).name)
            if server.should_exit:
                # A second signal: no more grace.
                server.force_exit = True
                server.cut_off()
            server.should_exit = True


async def serve_http(config: Config) -> int:
    host, _, port = config.listen.rpartition(":")
    host = host.strip("[]")
    service = GatewayService(config)
    metrics = Metrics()
    front = HttpFront(service, metrics)
    refusals = http_limits.RefusalLog()
    http_limits.quiet_accept_errors(asyncio.get_running_loop(), refusals)
    capacity = http_limits.capacity(
        config.http_max_connections, http_limits.raise_open_files_limit(), config.max_sessions
    )
    limits = http_limits.HttpLimits(
        max_header_bytes=config.http_max_header_bytes,
        header_timeout=config.http_header_timeout,
        body_timeout=config.http_body_timeout,
        idle_timeout=config.http_idle_timeout,
        max_connections=capacity.connections,
    )
    guard = http_limits.ConnectionGuard(limits, refusals, metrics.count_http_error)
    server = _Server(
        front,
        guard,
        uvicorn.Config(
            front,
            host=host,
            port=int(port),
            lifespan="off",
            access_log=False,
            log_level="warning",
            http=http_limits.protocol_class(guard),
            ws="none",
            backlog=capacity.backlog,
            loop="asyncio",
            timeout_graceful_shutdown=math.ceil(config.shutdown_grace) + 1,
        ),
    )
    async with anyio.create_task_group() as root:
        front.tg = root
        root.start_soon(service.start, root)
        root.start_soon(front.expire_idle_sessions)
        root.start_soon(_exit_on_signal, server)
        log.info("listening", url=f"http://{config.listen}/mcp")
        await server.serve()
        for session in list(front.sessions.values()):
            front.end_session(session, "gateway shutting down")
        await service.aclose()
        root.cancel_scope.cancel()
    refusals.close()
    log.info("gateway stopped")
    return 0
