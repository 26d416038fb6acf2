"""The body of an answer on its way from a connection's callbacks to the
task that reads it (the awaiting form of an exchange, http_client): chunks
queued as they come, the socket paused while too many wait unread."""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncGenerator
from typing import Protocol

import anyio

from gateway.backs.http_failures import HttpClientError

# Body bytes a feed may hold unread before the socket stops being read (its
# task reads only as its consumer asks).
FEED_HIGH = 1 << 20


class Reading(Protocol):
    """The connection a feed is read from (http_connection.HttpConnection)."""

    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def close(self) -> None: ...


class BodyFeed:
    """The body of an answer, from the callbacks to a task."""

    def __init__(self, connection: Reading) -> None:
        self._connection: Reading | None = connection
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._ended = False
        self._error: str | None = None
        self._wake: anyio.Event | None = None

    def put(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._size += len(chunk)
        if self._size > FEED_HIGH and self._connection is not None:
            self._connection.pause()
        self._notify()

    def end(self, error: str | None = None) -> None:
        self._ended, self._error, self._connection = True, error, None
        self._notify()

    def _notify(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def chunks(self, read_timeout: float | None = None) -> AsyncGenerator[bytes, None]:
        """The body as it comes; each wait bounded by `read_timeout` (None:
        by the caller's own scope, as a call's is by its session's sweeper)."""
        try:
            while True:  # ends at the body's end, or raises its failure
                while not self._chunks:
                    if self._ended:
                        if self._error is not None:
                            raise HttpClientError(self._error)
                        return
                    self._wake = wake = anyio.Event()
                    if read_timeout is None:
                        await wake.wait()
                        continue
                    with anyio.move_on_after(read_timeout):
                        await wake.wait()
                    if not wake.is_set():
                        raise HttpClientError("the upstream stopped sending mid-body")
                chunk = self._chunks.popleft()
                self._size -= len(chunk)
                if self._connection is not None and self._size <= FEED_HIGH:
                    self._connection.resume()
                yield chunk
        finally:
            self.close()

    def close(self) -> None:
        """The reader is done. Left before the end, the answer's rest is
        unread, so the connection cannot serve another request."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None
