"""The gateway as a stdio MCP server: one client on our stdin/stdout, the
upstream spawned as a child. Owns the task tree and the shutdown order
(DESIGN §6): stop reading, drain in-flight calls within a deadline, then stop
the upstream (close its stdin, wait, terminate, kill)."""

from __future__ import annotations

import signal

import anyio
import structlog
from anyio.abc import TaskGroup

from gateway import wire
from gateway.config import Config
from gateway.fronts.stdio_front import BadLine, StdioFront
from gateway.runtime.client_link import ClientLink
from gateway.runtime.service import GatewayService

log = structlog.get_logger("gateway.stdio")


async def serve_stdio(config: Config, in_fd: int = 0, out_fd: int = 1) -> int:
    front = StdioFront(in_fd, out_fd, max_bytes=config.max_message_bytes)
    service = GatewayService(config)
    link = ClientLink(send=front.send)
    service.links.add(link)
    async with anyio.create_task_group() as root:
        root.start_soon(service.start, root)
        async with anyio.create_task_group() as requests:
            with anyio.CancelScope() as reading:
                root.start_soon(_stop_on_signal, reading)
                await _read_loop(front, service, link, requests)
            await _drain(link, config.shutdown_grace)
            requests.cancel_scope.cancel()
        await service.aclose()
        root.cancel_scope.cancel()
    log.info("gateway stopped")
    return 0


async def _read_loop(
    front: StdioFront, service: GatewayService, link: ClientLink, requests: TaskGroup
) -> None:
    while True:  # ends at end of input (or when the reading scope is cancelled)
        try:
            item = await front.receive()
        except anyio.EndOfStream:
            log.info("client closed stdin; shutting down")
            return
        if isinstance(item, BadLine):
            log.warning("bad input from client", reason=item.reason)
            if item.reply is not None:
                await front.send(item.reply)
            continue
        try:
            await service.handle_client_message(link, item, requests)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            log.info("client stopped reading; shutting down")
            return


async def _stop_on_signal(reading: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("signal received; shutting down", signal=signal.Signals(signum).name)
            reading.cancel()
            return


async def _drain(link: ClientLink, grace: float) -> None:
    link.drained = anyio.Event()
    with anyio.move_on_after(grace) as scope:
        if link.inflight:
            await link.drained.wait()
    if scope.cancelled_caught:
        log.warning("calls still running at shutdown were abandoned", count=len(link.inflight))
        for msg_id in list(link.inflight):
            try:
                with anyio.move_on_after(1):
                    await link.send(
                        wire.gateway_error(
                            msg_id,
                            wire.INTERNAL_ERROR,
                            "The gateway is shutting down",
                            reason="shutdown",
                        )
                    )
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                break
