"""What an upstream session needs of its transport (the stdio back's
process, the HTTP back's connection, a test's script)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gateway import wire


class Channel(Protocol):
    async def send(self, msg: wire.Message) -> None: ...
    def send_nowait(self, msg: wire.Message) -> None: ...
    async def receive_batch(self) -> list[wire.Message]: ...


@runtime_checkable
class CallStreams(Protocol):
    """A transport that can tell a server request sent outside any call (the
    HTTP back's GET stream) from one sent on a call's own stream, and, where
    every call has a stream of its own, which call a notification came with."""

    def outside_calls(self, request_id: wire.RequestId) -> bool: ...

    @property
    def streams_name_calls(self) -> bool: ...

    def stream_of(self, msg: wire.Message) -> wire.RequestId | None: ...


class Corker(Protocol):
    """What the reader corks while it handles one read's messages, so that all
    they produce leaves in one write (the client links)."""

    def cork(self) -> None: ...
    def uncork(self) -> None: ...
