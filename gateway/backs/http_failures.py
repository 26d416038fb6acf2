"""How an HTTP exchange of the back fails below HTTP, said once for the
connection (http_connection) and everything that reads through it: one
error type, one phrase for each cause, one log line for a server that
writes past its answers."""

from __future__ import annotations

import os
import ssl

import structlog

from gateway.log_limit import LogLimiter
from gateway.upstream_errors import UpstreamError

# An answer's head: a server that sends more without ending it fails the call
# (llhttp buffers a head without end; the connection counts it against this).
MAX_HEAD_BYTES = 64 * 1024
HEAD_TOO_LONG = f"the answer's head is over {MAX_HEAD_BYTES} bytes"

# A server writing past its answers writes past every one: a line a minute.
past_answer_log = LogLimiter(structlog.get_logger("gateway.backs.http"))


class HttpClientError(UpstreamError):
    """The exchange failed below HTTP: connect, TLS, a broken stream, a
    timeout, a request HTTP cannot carry, or a peer that does not speak
    HTTP/1.1. The transport's own exceptions (OSError, ssl, the parser's)
    become this at the connection, each saying what failed; the HTTP back
    turns it into the failed call's answer."""


def wrote_past_answer(host: str, port: int) -> None:
    """RFC 9112 §9.3, one answer a request: the server wrote more after one.
    The answer stands; its connection is closed rather than reused, where
    the rest would be read as the next request's answer."""
    past_answer_log.warning(
        "upstream wrote past an answer; its connection is closed, not reused",
        upstream=f"{host}:{port}",
    )


def describe(exc: BaseException) -> str:
    """An exception as one log-line or error-message phrase (ours already is one)."""
    text = str(exc)
    if isinstance(exc, HttpClientError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def connect_failure(host: str, port: int, exc: OSError) -> HttpClientError:
    """A failed connect as the operator needs it: where to, and the system's
    reason ("Connection refused", "Name or service not known")."""
    cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
    if isinstance(cause, ssl.SSLError):
        return HttpClientError(f"TLS with {host}:{port} failed: {describe(cause)}")
    errno = cause.errno
    # asyncio words a refused connect as "Connect call failed (addr)": the errno says it.
    why = os.strerror(errno) if isinstance(errno, int) and errno > 0 else cause.strerror
    why = why or describe(cause)
    return HttpClientError(f"cannot connect to {host}:{port}: {why}")
