"""The deprecated HTTP+SSE transport (2024-11-05), which 2025-11-25
"Backwards Compatibility" tells a client to try when an `initialize` POST is
refused: GET the URL, wait for the `endpoint` event naming where to POST, and
from then on read every message — replies included — from that one stream.
The stream is the session: once it ends, so does the connection."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import structlog

from gateway.backs import http_wire
from gateway.backs.http_failures import HttpClientError, describe
from gateway.backs.http_session import Deliver, HttpSession
from gateway.backs.http_stream import StreamReader
from gateway.backs.http_wire import SseParser

log = structlog.get_logger("gateway.backs.http")


# Starts a task that the connection owns and guards: an unexpected failure
# in it is one log line, never the connection's whole task group.
Spawn = Callable[..., None]


async def open_http_sse(
    spawn: Spawn,
    session: HttpSession,
    reader: StreamReader,
    max_bytes: int,
    *,
    deliver: Deliver,
    session_gone: Callable[[str], None],
) -> bool:
    """Start reading the stream with `spawn`; True once it names where to
    POST (`session.sse_endpoint`), False if it does not within the read timeout."""
    found = anyio.Event()
    spawn(_read_stream, session, reader, max_bytes, found, deliver, session_gone)
    with anyio.move_on_after(session.read_timeout):
        await found.wait()
    if session.sse_endpoint is None:
        return False
    log.info("upstream uses the deprecated HTTP+SSE transport", endpoint=session.sse_endpoint)
    return True


async def _read_stream(
    session: HttpSession,
    reader: StreamReader,
    max_bytes: int,
    found: anyio.Event,
    deliver: Deliver,
    session_gone: Callable[[str], None],
) -> None:
    headers = session.stream_headers()
    try:
        async with session.client.stream(
            "GET", session.url, headers=headers, timeout=session.stream_timeout
        ) as resp:
            if not resp.is_success or "event-stream" not in resp.headers.get("content-type", ""):
                return
            parser = SseParser(max_bytes)
            async for chunk in resp.aiter_bytes():
                for event in parser.feed(chunk):
                    if event.event == "endpoint" and session.sse_endpoint is None:
                        session.sse_endpoint = http_wire.endpoint_url(session.url, event.data)
                        if session.sse_endpoint is None:
                            log.warning("endpoint on another origin refused", data=event.data)
                            return
                        found.set()
                    else:
                        reader.handle_event(event, deliver, None)
    except HttpClientError as exc:
        log.warning("upstream HTTP+SSE stream broke", error=describe(exc))
    finally:
        found.set()
        if session.sse_endpoint is not None:
            session_gone("HTTP+SSE stream ended")
