"""The gateway as an HTTP sidecar: uvicorn serves the ASGI front on
HOST:PORT, the service and its upstream run in the same task tree. uvicorn
handles SIGTERM/SIGINT (stop accepting, finish open requests); then the
upstream is stopped like in stdio mode."""

from __future__ import annotations

import contextlib
import signal
import socket
from collections.abc import Iterator

import anyio
import structlog
import uvicorn

from gateway.config import Config
from gateway.fronts.http_front import HttpFront
from gateway.runtime.metrics import Metrics
from gateway.runtime.service import GatewayService

log = structlog.get_logger("gateway.http")

# As for any other configuration the gateway cannot run with (cli.EXIT_CONFIG).
EXIT_CANNOT_LISTEN = 2


class _Server(uvicorn.Server):
    """uvicorn, ending listen streams gracefully before it waits for open
    requests to finish (they never would)."""

    def __init__(self, service: GatewayService, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._service = service

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._service.end_subscriptions()
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn re-raises the signal it caught once it has stopped, which
        # would kill us before the upstream is stopped; the gateway watches
        # the signals itself (serve_http) and asks uvicorn to exit.
        yield


async def _exit_on_signal(server: uvicorn.Server) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("signal received; shutting down", signal=signal.Signals(signum).name)
            if server.should_exit:
                server.force_exit = True
            server.should_exit = True


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
    front = HttpFront(service, Metrics(config.passthrough_methods))
    server = _Server(
        service,
        uvicorn.Config(
            front,
            lifespan="off",
            access_log=False,
            log_level="warning",
            http="httptools",
            loop="asyncio",
            timeout_graceful_shutdown=int(config.shutdown_grace) or 1,
            h11_max_incomplete_event_size=config.max_message_bytes,
        ),
    )
    async with anyio.create_task_group() as root:
        front.tg = root
        root.start_soon(service.start, root)
        root.start_soon(front.expire_idle_sessions)
        root.start_soon(_exit_on_signal, server)
        log.info("listening", url=f"http://{config.listen}/mcp")
        await server.serve(sockets=sockets)
        for session in list(front.sessions.values()):
            front.end_session(session, "gateway shutting down")
        await service.aclose()
        root.cancel_scope.cancel()
    log.info("gateway stopped")
    return 0
