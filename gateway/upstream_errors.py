"""Every way the upstream side can fail, under one base.

Pure (no I/O): the backs raise these, each mapping its transport's own
exceptions in one place (`map_exceptions`, after httpcore's); the runtime
catches `UpstreamError`, or the one subclass whose answer differs, and
`core.upstream_failures.failure_reply` turns it into the client's error.

    UpstreamError
    ├── ConnectionLost        the transport's connection is over (written or read past its end)
    ├── UpstreamGone          a session ended under a call; `reason` says how
    ├── UpstreamTimeout       no answer within the call's bound
    ├── UpstreamNotReading    the server is too far behind reading what it was sent
    ├── HttpClientError       an HTTP exchange failed below HTTP (backs/http_failures.py)
    └── UpstreamUnavailable   no session can be had
        ├── UpstreamBusy          every session the bounds allow is busy
        ├── UpstreamUnauthorized  the upstream refused the credential
        ├── Contradicted          the server no longer answers in its cached era
        └── ServerNotStarted      the transport could not start the server at all
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from gateway import wire


class UpstreamError(Exception):
    """The upstream could not serve a call or a session."""


class ConnectionLost(UpstreamError):
    """The transport's connection to the server is over: what a back raises
    when written to or read from after its end (the stdio back's
    ServerExited, the HTTP back's HttpConnectionEnded)."""


class UpstreamGone(UpstreamError):
    """The upstream connection ended; `reason` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UpstreamTimeout(UpstreamError):
    """The upstream did not answer a call within its bound."""


class UpstreamNotReading(UpstreamError):
    """The server has not read what is already queued for it (flow control):
    a request that does not fit fails now instead of waiting for room."""


class UpstreamUnavailable(UpstreamError):
    """No session can be had: the upstream is down, busy or unusable."""


class UpstreamBusy(UpstreamUnavailable):
    """Every session the bounds allow is running calls: none can be made for
    this one (it may be tried again once one is idle)."""


class UpstreamUnauthorized(UpstreamUnavailable):
    """The upstream refused the credential it was sent (HTTP 401/403): the
    refusal itself is kept, for the client whose credential it was."""

    def __init__(self, reply: wire.Message) -> None:
        super().__init__(reply["error"].get("message", "unauthorized"))
        self.reply = reply


class Contradicted(UpstreamUnavailable):
    """The server no longer answers in the era cached for it."""


class ShuttingDown(UpstreamUnavailable):
    """The gateway is stopping: no upstream connection is started any more."""


class ServerNotStarted(UpstreamUnavailable):
    """The transport could not start the server (no such command, no
    permission): its text is the operating system's own."""


ExceptionMapping = Mapping[type[Exception], Callable[[Exception], UpstreamError]]


@contextmanager
def map_exceptions(mapping: ExceptionMapping) -> Iterator[None]:
    """Re-raise a transport exception as the upstream error `mapping` builds
    for its type (the first type that matches, in order); anything not
    named passes through unchanged. The original stays the cause."""
    try:
        yield
    except Exception as exc:  # re-raised below unless the mapping names it
        for kind, build in mapping.items():
            if isinstance(exc, kind):
                raise build(exc) from exc
        raise
