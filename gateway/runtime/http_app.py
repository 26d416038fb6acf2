"""The gateway as an HTTP sidecar: uvicorn serves the ASGI front on
HOST:PORT through the connection-limited protocol of fronts/http_limits.py,
the service and its upstream run in the same task tree. On SIGTERM/SIGINT
(and SIGHUP: the gateway reloads no configuration, so a hang-up stops it
like SIGTERM rather than kill it undrained) uvicorn stops accepting; GET
streams and listens end at once, calls get `shutdown_grace` to finish and
then a gateway error; then the upstream is stopped like in stdio mode."""

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
from gateway.fronts.metrics import Metrics
from gateway.runtime.service import GatewayService
from gateway.runtime.upstream_readiness import REACHABLE_TIMEOUT
from gateway.runtime.upstream_watch import UpstreamWatch

log = structlog.get_logger("gateway.http")

# As for any other configuration the gateway cannot run with (cli.EXIT_CONFIG).
EXIT_CANNOT_LISTEN = 2


class _Server(uvicorn.Server):
    """uvicorn, ending listen streams gracefully before it waits for open
    requests to finish (they never would)."""

    def __init__(
        self,
        service: GatewayService,
        front: HttpFront,
        guard: http_limits.ConnectionGuard,
        config: uvicorn.Config,
    ) -> None:
        super().__init__(config)
        self._service = service
        self._front = front
        self._guard = guard

    def cut_off(self) -> None:
        """No more grace: what still runs is answered now."""
        self._front.cut_off_calls()
        self._guard.cut_off_bodies()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._service.end_subscriptions()
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


async def _exit_on_signal(
    server: _Server, service: GatewayService, guard: http_limits.ConnectionGuard
) -> None:
    """The first signal drains: /readyz turns 503 and answers close their
    connections for `drain_delay`, while requests are still served, so that
    a balancer takes the replica out before it stops accepting (issue #13).
    Then, or at a second signal, uvicorn stops accepting and calls get the
    grace; a third cuts them off."""
    delay = service.config.drain_delay
    async with anyio.create_task_group() as tg:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                name = signal.Signals(signum).name
                if server.should_exit:
                    # No more grace.
                    log.info("signal received; cutting off what still runs", signal=name)
                    server.force_exit = True
                    server.cut_off()
                elif service.draining or delay <= 0:
                    log.info("signal received; shutting down", signal=name)
                    service.draining = guard.draining = True
                    server.should_exit = True
                else:
                    log.info("signal received; draining", signal=name, drain_delay=delay)
                    service.draining = guard.draining = True
                    tg.start_soon(_drain_then_exit, server, delay)


async def _drain_then_exit(server: _Server, delay: float) -> None:
    await anyio.sleep(delay)
    if not server.should_exit:
        log.info("drain delay over; shutting down")
        server.should_exit = True


async def _watch_upstream(service: GatewayService) -> None:
    pool = service.pool
    http = pool.http
    watch = UpstreamWatch(
        pool,
        interval=service.config.health_interval,
        reachable=None
        if http is None
        else lambda: http.reachable(min(REACHABLE_TIMEOUT, service.config.probe_timeout)),
    )
    await watch.run()


def _bind(host: str, port: int) -> list[socket.socket]:
    """The listening sockets, bound before anything starts, so that a port in
    use or an address that is not ours is one clear error. A name binds every
    address it resolves to (`localhost`: 127.0.0.1 and ::1), as asyncio would."""
    infos = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP, flags=socket.AI_PASSIVE
    )
    addresses = dict.fromkeys((family, (str(sa[0]), int(sa[1]))) for family, _, _, _, sa in infos)
    sockets: list[socket.socket] = []
    try:
        for family, address in addresses:
            # proto must say TCP: asyncio sets TCP_NODELAY on accepted sockets
            # only then, and without it every small answer waits ~40 ms for
            # a delayed ACK.
            sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(2048)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


async def serve_http(config: Config) -> int:
    host, _, port = config.listen.rpartition(":")
    host = host.strip("[]")
    try:
        sockets = _bind(host, int(port))
    except OSError as exc:
        log.error(
            "cannot listen", address=config.listen, error=exc.strerror or str(exc), errno=exc.errno
        )
        return EXIT_CANNOT_LISTEN
    with contextlib.ExitStack() as stack:
        for sock in sockets:
            stack.enter_context(sock)
        return await _serve(config, sockets)


async def _serve(config: Config, sockets: list[socket.socket]) -> int:
    service = GatewayService(config)
    metrics = Metrics(config.passthrough_methods)
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
        service,
        front,
        guard,
        uvicorn.Config(
            front,
            lifespan="off",
            access_log=False,
            log_level="warning",
            http=http_limits.protocol_class(guard, front.direct),
            ws="none",
            backlog=capacity.backlog,
            loop="asyncio",
            timeout_graceful_shutdown=math.ceil(config.shutdown_grace) + 1,
        ),
    )
    async with anyio.create_task_group() as root, service.closing_on_error():
        front.tg = root
        root.start_soon(service.start, root)
        root.start_soon(front.expire_idle_sessions)
        root.start_soon(_exit_on_signal, server, service, guard)
        root.start_soon(_watch_upstream, service)
        log.info("listening", url=f"http://{config.listen}/mcp")
        await server.serve(sockets=sockets)
        for session in list(front.sessions.values()):
            front.end_session(session, "gateway shutting down")
        await service.aclose()
        root.cancel_scope.cancel()
    refusals.close()
    log.info("gateway stopped")
    return 0
