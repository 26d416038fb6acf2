"""Issue #11 item 4: "an error hierarchy with one base for upstream failures
(gone, timeout, unavailable, unauthorized, contradicted), the backs mapping
their transport exceptions into it in one place". Today's main has "17
exception classes with no common base and eight different `except` tuples".
The JSON-RPC error each failure produces is pinned here: the hierarchy must
not change what a client sees."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway import wire
from gateway.backs.http_back import HttpConnectionEnded
from gateway.backs.http_failures import HttpClientError
from gateway.backs.server_output import ServerExited
from gateway.backs.stdio_back import StdioServerProcess
from gateway.config import Config
from gateway.core.upstream_failures import failure_reply
from gateway.upstream_errors import (
    ConnectionLost,
    Contradicted,
    ExceptionMapping,
    ServerNotStarted,
    UpstreamBusy,
    UpstreamError,
    UpstreamGone,
    UpstreamTimeout,
    UpstreamUnauthorized,
    UpstreamUnavailable,
    map_exceptions,
)
from tests.inprocess_service import in_process_service
from tests.scripted import MODERN_META

pytestmark = pytest.mark.anyio

REFUSAL = wire.error_response(7, -32001, "Unauthorized", {"status": 401})

FAILURES: list[UpstreamError] = [
    ServerExited(1, ["boom"]),
    HttpConnectionEnded("404 on the session"),
    HttpClientError("timed out waiting for the upstream"),
    UpstreamGone("exited"),
    UpstreamTimeout("upstream did not answer tools/call within 5s"),
    UpstreamUnavailable("down"),
    UpstreamBusy("all 2 sessions are busy"),
    UpstreamUnauthorized(REFUSAL),
    Contradicted("server/discover: -32601"),
    ServerNotStarted("[Errno 2] No such file or directory: 'x'"),
]


@pytest.mark.parametrize("exc", FAILURES, ids=lambda e: type(e).__name__)
def test_every_upstream_failure_has_the_one_base(exc: UpstreamError) -> None:
    """Issue #11: one base for gone, timeout, unavailable, unauthorized,
    contradicted, and the transports' own "connection over"."""
    assert isinstance(exc, UpstreamError)


def test_the_transports_connection_ends_are_one_kind() -> None:
    """What the runtime catches when a write meets a finished connection
    (was a tuple of five types, two of them imported from the backs)."""
    assert issubclass(ServerExited, ConnectionLost)
    assert issubclass(HttpConnectionEnded, ConnectionLost)


@pytest.mark.parametrize(
    ("exc", "message", "reason"),
    [
        (UpstreamGone("exited"), "Upstream server failed: exited", "upstream-failed"),
        (
            ServerExited(3),
            "Upstream server failed: upstream server exited (code 3)",
            "upstream-failed",
        ),
        (
            UpstreamTimeout("upstream did not answer tools/call within 5s"),
            "upstream did not answer tools/call within 5s",
            "upstream-timeout",
        ),
        (
            UpstreamBusy("all 2 sessions are busy"),
            "Upstream busy: all 2 sessions are busy",
            "upstream-busy",
        ),
        (UpstreamUnavailable("down"), "Upstream server failed: down", "upstream-failed"),
        (TimeoutError(), "Upstream server failed: ", "upstream-failed"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else "",
)
def test_failure_reply_is_unchanged(
    exc: UpstreamError | TimeoutError, message: str, reason: str
) -> None:
    """Each failure keeps producing exactly today's JSON-RPC error (code,
    message, data.source and data.reason)."""
    reply = failure_reply(exc, 9)
    assert reply == {
        "jsonrpc": "2.0",
        "id": 9,
        "error": {
            "code": wire.INTERNAL_ERROR,
            "message": message,
            "data": {"source": wire.GATEWAY_SOURCE, "reason": reason},
        },
    }


def test_an_unauthorized_upstream_hands_back_its_own_refusal() -> None:
    """The upstream's 401 reaches the client as the upstream said it, with the client's id."""
    assert failure_reply(UpstreamUnauthorized(REFUSAL), 9) == {**REFUSAL, "id": 9}


def test_map_exceptions_maps_the_named_types_and_keeps_the_cause() -> None:
    """httpcore's `map_exceptions`: a transport exception becomes the upstream
    error built for its type; others pass through untouched."""
    to_gone: ExceptionMapping = {BrokenPipeError: lambda e: UpstreamGone(f"pipe: {e}")}
    with pytest.raises(UpstreamGone, match="pipe") as caught, map_exceptions(to_gone):
        raise BrokenPipeError("closed")
    assert isinstance(caught.value.__cause__, BrokenPipeError)
    with pytest.raises(KeyError), map_exceptions(to_gone):
        raise KeyError("not a transport failure")


async def test_the_stdio_back_maps_a_command_it_cannot_start(tmp_path: Path) -> None:
    """The stdio back's spawn says "could not start" as an upstream error (was
    a bare OSError the pool had to name in two `except` tuples), in the OS's words."""
    missing = tmp_path / "no-such-server"
    with pytest.raises(ServerNotStarted, match="No such file or directory") as caught:
        await StdioServerProcess.spawn([str(missing)], max_bytes=1 << 20)
    assert isinstance(caught.value, UpstreamUnavailable)
    assert isinstance(caught.value.__cause__, FileNotFoundError)


async def test_a_client_of_a_server_that_cannot_start_gets_unavailable(tmp_path: Path) -> None:
    """The client of a server whose command vanished after the config check
    gets today's answer: -32603, "Upstream server unavailable: <the OS's
    words>", data.reason "upstream-unavailable"."""
    missing = str(tmp_path / "no-such-server")
    cfg = Config(command=(missing,), probe_timeout=1, request_timeout=2)
    async with in_process_service(cfg) as c:
        msg: dict[str, Any] = wire.request(
            1,
            "tools/list",
            {"_meta": dict(MODERN_META)},
        )
        await c.send(msg)
        reply = await c.next(timeout=5)
    error = reply["error"]
    assert reply["id"] == 1 and error["code"] == wire.INTERNAL_ERROR
    assert error["message"].startswith("Upstream server unavailable: ")
    assert "No such file or directory" in error["message"]
    assert error["data"] == {"source": wire.GATEWAY_SOURCE, "reason": "upstream-unavailable"}
