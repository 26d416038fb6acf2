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
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.fronts.stdio_front import BadLine, StdioFront
from gateway.log_limit import LogLimiter
from gateway.runtime.service import GatewayService
from gateway.runtime.upstream_supervisor import Connector

log = structlog.get_logger("gateway.stdio")
# A client that writes junk in a loop gets its error replies, and the log one
# line a minute with a count (never a line per bad line).
bad_input_log = LogLimiter(log)


async def serve_stdio(
    config: Config, in_fd: int = 0, out_fd: int = 1, connect: Connector | None = None
) -> int:
    """`connect`: how to reach the upstream, when not as `config` says (tests
    run the whole stdio gateway in-process over a scripted server)."""
    front = StdioFront(
        in_fd, out_fd, max_bytes=config.max_message_bytes, bounds=config.queue_bounds
    )
    service = GatewayService(config, connect=connect)
    link = ClientLink(
        send=front.send, send_nowait=front.send_nowait, cork=front.cork, uncork=front.uncork
    )
    service.links.add(link)
    stopping = _Stopping(service)
    async with anyio.create_task_group() as root, service.closing_on_error():
        root.start_soon(front.run_flusher)
        root.start_soon(service.start, root)
        root.start_soon(stopping.watch_signals)
        async with anyio.create_task_group() as requests:
            with stopping.reading:
                await _read_loop(front, service, link, requests)
            stopping.begin()
            # One deadline for the calls in flight and for what is queued
            # for the client: a client that stopped reading costs no more.
            deadline = anyio.current_time() + config.shutdown_grace
            service.end_subscriptions()
            await _drain(link, config.shutdown_grace, stopping.hurry)
            requests.cancel_scope.cancel()
        await front.flush(max(0.0, deadline - anyio.current_time()))
        await service.aclose()
        root.cancel_scope.cancel()
    log.info("gateway stopped")
    return 0


class _Stopping:
    """Shutdown's two speeds: the first SIGTERM/SIGINT/SIGHUP (or the end of stdin)
    starts an orderly stop; a signal after that makes it immediate, because the
    client is about to escalate to SIGKILL, which would orphan the upstream."""

    def __init__(self, service: GatewayService) -> None:
        self.service = service
        self.reading = anyio.CancelScope()
        self.hurry = anyio.Event()
        self.started = False

    def begin(self) -> None:
        self.started = True

    async def watch_signals(self) -> None:
        # SIGHUP (a closed terminal, a supervisor's hang-up) stops the gateway
        # like SIGTERM: it reloads no configuration, and the default action
        # would kill it without a drain, orphaning in-flight calls.
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                name = signal.Signals(signum).name
                if not self.started:
                    # A signal means the client (or a supervisor) wants us gone
                    # now: MCP clients escalate to SIGKILL about a second later,
                    # so there is no time to let the upstream notice its stdin.
                    log.info("signal received; shutting down", signal=name)
                    self.started = True
                    self.reading.cancel()
                    self.hurry.set()
                    self.service.pool.hurry()
                else:
                    log.warning("signal during shutdown; stopping the upstream now", signal=name)
                    self.hurry.set()
                    self.service.pool.hurry()


async def _read_loop(
    front: StdioFront, service: GatewayService, link: ClientLink, requests: TaskGroup
) -> None:
    while True:  # ends at end of input (or when the reading scope is cancelled)
        try:
            batch = await front.receive_batch()
        except anyio.EndOfStream:
            log.info("client closed stdin; shutting down")
            return
        # Everything this read produces, for the client and for the server,
        # leaves in one write each.
        front.cork()
        service.pool.cork()
        try:
            for item in batch:
                if isinstance(item, BadLine):
                    bad_input_log.warning("bad input from client", reason=item.reason)
                    if item.reply is not None:
                        front.send_nowait(item.reply)
                    continue
                await service.handle_client_message(link, item, requests)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            log.info("client stopped reading; shutting down")
            return
        finally:
            service.pool.uncork()
            front.uncork()


async def _drain(link: ClientLink, grace: float, hurry: anyio.Event) -> None:
    """Wait for in-flight calls to finish, for at most `grace`, or until told to hurry."""
    link.drained = anyio.Event()
    with anyio.move_on_after(grace):
        async with anyio.create_task_group() as tg:

            async def until(event: anyio.Event) -> None:
                await event.wait()
                tg.cancel_scope.cancel()

            if link.inflight:
                tg.start_soon(until, hurry)
                tg.start_soon(until, link.drained)
    if link.inflight:
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
