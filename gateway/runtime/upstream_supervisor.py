"""The upstream connections as running things: starting one for a session,
the tasks that serve it, noticing when it ends, closing it (2026-07-28 stdio
"Shutdown"). Which session a connection serves, and what its loss means, is
the pool's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

import anyio
from anyio.abc import TaskGroup

from gateway import wire
from gateway.backs.server_output import stderr_summary
from gateway.backs.stdio_back import StdioServerProcess
from gateway.config import Config
from gateway.core.session_choice import SessionKey
from gateway.runtime.upstream_channel import Corker
from gateway.runtime.upstream_session import ServerMessageHandler, UpstreamSession
from gateway.upstream_errors import ShuttingDown


class ServerConnection(Protocol):
    """A started upstream server: the stdio back's process, or a test's script."""

    pid: int
    tap: Callable[[str, wire.Message], None] | None

    async def send(self, msg: wire.Message) -> None: ...
    def send_nowait(self, msg: wire.Message) -> None: ...
    def cork(self) -> None: ...
    def uncork(self) -> None: ...
    async def receive_batch(self) -> list[wire.Message]: ...
    async def run_background(self) -> None: ...
    async def aclose(self, grace: float = ...) -> int | None: ...
    def terminate(self) -> None: ...


Connector = Callable[[], Awaitable[ServerConnection]]
# Told when a connection ended that nobody retired: the session it served,
# the connection, already out of the supervisor's hands.
ExitHandler = Callable[[UpstreamSession, ServerConnection], Awaitable[None]]


@runtime_checkable
class LastWords(Protocol):
    """A connection that keeps what the server said on stderr (the stdio back)."""

    async def last_words(self, timeout: float = ...) -> list[str]: ...


async def spawn_process(config: Config) -> ServerConnection:
    """The stdio back: the configured command as a child process."""
    return await StdioServerProcess.spawn(
        config.command,
        max_bytes=config.max_message_bytes,
        env=config.env or None,
        cwd=config.cwd,
        bounds=config.queue_bounds,
        exit_grace=config.upstream_exit_grace,
    )


class UpstreamSupervisor:
    def __init__(
        self,
        config: Config,
        connect_as: Callable[[str], Awaitable[ServerConnection]],
        handler: ServerMessageHandler,
        on_exit: ExitHandler,
        tap: Callable[[str, wire.Message], None] | None = None,
        corker: Corker | None = None,
    ) -> None:
        self.config = config
        self._connect_as = connect_as
        self._handler = handler
        self._on_exit = on_exit
        self._tap = tap
        self._corker = corker
        self.tg: TaskGroup | None = None
        # Every running connection, by the session it serves.
        self.processes: dict[UpstreamSession, ServerConnection] = {}
        # Those started by the attempt to open a session under way (the probe
        # may need a second one): all of them go if it fails.
        self.opening: list[UpstreamSession] = []
        self._closing: list[ServerConnection] = []
        self._last_process: ServerConnection | None = None
        self._hurried = False
        # Set once shutdown stops the upstreams: a probe that loses its
        # process to the shutdown must not start another one (issue #14).
        self.closed = False

    async def spawn(self, key: SessionKey) -> UpstreamSession:
        """Start a connection and the session on it, with the tasks that
        serve it; ShuttingDown once aclose has begun."""
        if self.closed:
            raise ShuttingDown("the gateway is shutting down")
        process = await self._connect_as(key.principal)
        if self.closed:
            # Shutdown began while it started: aclose did not see it.
            with anyio.CancelScope(shield=True):
                await process.aclose(self.config.upstream_exit_grace)
            raise ShuttingDown("the gateway is shutting down")
        self._last_process = process
        process.tap = self._tap
        session = UpstreamSession(process, key, label=f"pid {process.pid}")
        self.processes[session] = process
        self.opening.append(session)
        assert self.tg is not None
        self.tg.start_soon(process.run_background)
        self.tg.start_soon(self._supervise, session, process)
        self.tg.start_soon(session.run_deadlines)
        return session

    async def _supervise(self, session: UpstreamSession, process: ServerConnection) -> None:
        await session.run_reader(self._handler, self._corker)
        if self.processes.pop(session, None) is None:
            return  # retired on purpose
        await self._on_exit(session, process)

    async def stop(self, session: UpstreamSession) -> None:
        """Stop a retired session's connection (its exit is then no news)."""
        process = self.processes.pop(session, None)
        if process is not None:
            await process.aclose(self.config.upstream_exit_grace)

    async def with_last_words(self, reason: str) -> str:
        """`reason`, with the end of the last started server's stderr if it
        said something (a server that dies at start usually says why there)."""
        process = self._last_process
        if not isinstance(process, LastWords):
            return reason
        summary = stderr_summary(await process.last_words())
        if not summary or summary in reason:
            return reason
        return f"{reason}; its stderr ends: {summary}"

    async def aclose(self) -> None:
        """Stop every upstream: close its stdin, wait `exit_grace`, then
        SIGTERM, then SIGKILL (2026-07-28 stdio "Shutdown")."""
        self.closed = True
        sessions = list(self.processes.items())
        self.processes.clear()
        self._closing = [process for _, process in sessions]
        if self._hurried:
            self.hurry()
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for session, process in sessions:
                    session.close("gateway shutting down")
                    tg.start_soon(process.aclose, self.config.upstream_exit_grace)

    def hurry(self) -> None:
        """Shutdown must finish now (a second signal): terminate the upstreams
        without waiting for them to notice their closed stdin."""
        self._hurried = True
        for process in [*self._closing, *self.processes.values()]:
            process.terminate()

    def cork(self) -> None:
        for process in self.processes.values():
            process.cork()

    def uncork(self) -> None:
        for process in list(self.processes.values()):
            process.uncork()
