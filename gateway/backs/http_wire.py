"""Streamable HTTP details of the HTTP back that need no I/O: the SSE parser,
HTTP failures turned into JSON-RPC replies, and what a client makes of each
answer the server gives (a session id, a version, a refusal that calls for a
retry or a fallback, a GET stream's status, a JSON body). Pure functions over
bytes, strings and dicts. The request metadata headers are the binding's
(`gateway.core.http_binding`), shared with the HTTP front.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import orjson

from gateway import era, wire
from gateway.core import upstream_checks
from gateway.core.http_binding import UNAUTHORIZED_REASON

ACCEPT = "application/json, text/event-stream"
# How much of a non-JSON-RPC error body is quoted in the error we make of it.
_SNIPPET = 200


def modern_meta(msg: wire.Message) -> dict[str, Any]:
    """The protocol keys of a modern request's `_meta` (for a request of our own
    made on its behalf, such as a tools/list refresh)."""
    meta = era.meta_of(msg) or {}
    return {k: v for k, v in meta.items() if k.startswith(era.PREFIX)}


# -- what the answers to our requests set up ----------------------------------------
def session_id_from(request: wire.Message, header: str | None) -> str | None:
    """The session a legacy `initialize` answered with success opens
    (2025-11-25 "Session Management": the id comes with the InitializeResult,
    visible ASCII only). mcp 1.x sets one on refusals too: only this one
    counts, so the caller asks only for a 2xx answer."""
    if request["method"] != "initialize" or era.is_modern(request):
        return None
    if header and all("!" <= ch <= "~" for ch in header):
        return header
    return None


def negotiated_version(reply: wire.Message) -> str | None:
    """The protocol version an InitializeResult names (then sent as the
    MCP-Protocol-Version header of every later request)."""
    result = reply.get("result")
    if isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
        return str(result["protocolVersion"])
    return None


def asks_header_refresh(request: wire.Message, reply: wire.Message) -> bool:
    """2026-07-28 "Client Behavior": a modern tools/call refused with
    HeaderMismatch (-32020) is retried once, after the tools' schemas are
    read again, with the headers they now call for."""
    error = reply.get("error")
    return (
        request["method"] == "tools/call"
        and era.is_modern(request)
        and isinstance(error, dict)
        and error.get("code") == wire.HEADER_MISMATCH
    )


def may_be_http_sse(request: wire.Message, status: int | None, reply: wire.Message) -> bool:
    """2025-11-25 "Backwards Compatibility": a legacy `initialize` POST
    refused with 400/404/405 (and, 2026-07-28, no modern error in the body)
    means the URL may be an old HTTP+SSE endpoint."""
    return (
        request["method"] == "initialize"
        and not era.is_modern(request)
        and status in (400, 404, 405)
        and not is_modern_error(reply)
    )


# What a GET for an event stream got (2025-11-25 "Listening for Messages from
# the Server", "Resumability and Redelivery"): a stream to read; the session
# is over (404 on our session id); no GET stream offered (405); refused (any
# other 4xx, or a 2xx that is no event stream); an outage to try again (5xx).
STREAM, SESSION_GONE, NO_GET_STREAM, GET_REFUSED, GET_AGAIN = (
    "stream",
    "session-gone",
    "no-get-stream",
    "refused",
    "again",
)


def get_outcome(status: int, content_type: str, sent_session: bool) -> str:
    if 200 <= status < 300:
        return STREAM if "event-stream" in content_type else GET_REFUSED
    if status == 404 and sent_session:
        return SESSION_GONE
    if status == 405:
        return NO_GET_STREAM
    if 400 <= status < 500:
        return GET_REFUSED
    return GET_AGAIN


def json_answer(
    msg_id: wire.RequestId, status: int, content_type: str, body: bytes
) -> list[wire.Message | upstream_checks.Refused] | wire.Message:
    """The messages of a 2xx JSON answer to request `msg_id`, each screened
    (a refused one stands for what the caller or the server gets instead),
    or, when the answer cannot carry the reply, the error the caller gets."""
    if status == 202 or not body:
        why = f"HTTP {status} with no reply to a request"
        return upstream_checks.malformed_reply(msg_id, why)
    if content_type != "application/json":
        why = f"unexpected content type {content_type or '(none)'}"
        return upstream_checks.malformed_reply(msg_id, why)
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return upstream_checks.malformed_reply(msg_id, "the HTTP body is not JSON")
    deep = upstream_checks.may_nest_too_deep(body)
    return [upstream_checks.screen_value(item, deep=deep) for item in _items(value)]


def _items(value: object) -> list[object]:
    return value if isinstance(value, list) else [value]


# -- HTTP failures as JSON-RPC replies --------------------------------------------
def jsonrpc_error(body: bytes | None) -> wire.Message | None:
    """The JSON-RPC error response in an HTTP error body, if there is one."""
    if not body:
        return None
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    error = value.get("error")
    if not isinstance(error, dict) or not isinstance(error.get("code"), int):
        return None
    return value


def is_modern_error(reply: wire.Message | None) -> bool:
    """2026-07-28 "Backward Compatibility": a recognised modern error body means
    the server speaks modern MCP, so no fallback to an older transport."""
    if reply is None:
        return False
    return reply.get("error", {}).get("code") in era.MODERN_ERRORS


def refusal_reply(
    msg_id: wire.RequestId, status: int, body: bytes | None, challenge: str | None = None
) -> wire.Message:
    """The reply a caller sees when the server refused a request with HTTP
    `status`. A JSON-RPC error body is kept (so -32022/-32021/-32020 are seen
    as such) under the request's id: mcp 1.x answers with the id "server-error".
    401/403 are always marked as an authorization refusal, with the server's
    `WWW-Authenticate` challenge, whatever the body says."""
    error = jsonrpc_error(body)
    if status in (401, 403):
        detail = error["error"].get("message") if error is not None else None
        snippet = (
            detail
            if isinstance(detail, str)
            else (body or b"")[:_SNIPPET].decode("utf-8", "replace").strip()
        )
        text = f"Upstream answered HTTP {status}" + (f": {snippet}" if snippet else "")
        extra = {"wwwAuthenticate": challenge} if challenge else {}
        return wire.gateway_error(
            msg_id, wire.INVALID_REQUEST, text, reason=UNAUTHORIZED_REASON, status=status, **extra
        )
    if error is not None:
        return {**error, "id": msg_id}
    if status in (404, 405):
        code = wire.METHOD_NOT_FOUND
    elif 400 <= status < 500:
        code = wire.INVALID_REQUEST
    else:
        code = wire.INTERNAL_ERROR
    snippet = (body or b"")[:_SNIPPET].decode("utf-8", "replace").strip()
    text = f"Upstream answered HTTP {status}" + (f": {snippet}" if snippet else "")
    return wire.gateway_error(msg_id, code, text, reason="upstream-http", status=status)


def failure_reply(msg_id: wire.RequestId, what: str) -> wire.Message:
    """The reply to a request whose exchange failed below HTTP (connect, read,
    a broken stream, an unreadable body)."""
    return wire.gateway_error(
        msg_id,
        wire.INTERNAL_ERROR,
        f"Upstream HTTP exchange failed: {what}",
        reason="upstream-unreachable",
    )


def resume_failed_reply(msg_id: wire.RequestId, why: str, status: int | None) -> wire.Message:
    """The reply to a legacy request whose stream the server closed before
    the reply and that could not be resumed (2025-11-25 "Resumability and
    Redelivery"): `why` says what stopped it; `status` is the GET's refusal."""
    text = f"Upstream cannot resume the stream it closed before the reply: {why}"
    if status is None:
        return wire.gateway_error(msg_id, wire.INTERNAL_ERROR, text, reason="upstream-unreachable")
    return wire.gateway_error(
        msg_id, wire.INTERNAL_ERROR, text, reason="upstream-http", status=status
    )


# -- redirects ---------------------------------------------------------------------
# 307/308 keep the method and body; 301/302/303 turn a request into a bodiless
# GET (RFC 9110 §15.4), which an MCP POST cannot survive: only a GET or a
# DELETE follows those.
_SAME_METHOD = (307, 308)
_REDIRECTS = (301, 302, 303, 307, 308)


@dataclass(frozen=True, slots=True)
class Redirect:
    """A redirect the client acts on: `url` to send the request again to, or
    (`url` None) why it is not followed, which fails the exchange."""

    url: str | None
    refused: str | None = None


def origin_of(url: str) -> str:
    """`scheme://host:port`, lower-cased, the port always said; ValueError
    for a URL whose host or port cannot be read."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    port = parts.port or (443 if scheme == "https" else 80)  # ValueError: not a port
    return f"{scheme}://{(parts.hostname or '').lower()}:{port}"


def redirect(
    method: str, url: str, status: int, location: str | None, allowed: frozenset[str]
) -> Redirect | None:
    """What a `status` answer with `location` to `method url` leads to; None
    when the answer stands as it is (not a redirect, or one that would change
    a POST into a GET). A redirect goes to the request's own origin, or to
    one of `allowed`: the upstream's credentials travel with it."""
    if status not in _REDIRECTS or not location:
        return None
    if status not in _SAME_METHOD and method not in ("GET", "DELETE"):
        return None
    try:
        target = urljoin(url, location.strip())
        there = origin_of(target)
    except ValueError:  # urllib's word for a host it cannot read ("http://[")
        return Redirect(None, f"the upstream redirected to {location[:200]!r}, not a valid URL")
    if not there.startswith(("http://", "https://")):
        return Redirect(None, f"the upstream redirected to {target[:200]!r}, not an http(s) URL")
    if there != origin_of(url) and there not in allowed:
        why = (
            f"the upstream redirected to another origin ({there}); "
            "allow it with [upstream] redirect_origins"
        )
        return Redirect(None, why)
    return Redirect(target)


# -- the deprecated HTTP+SSE transport (2024-11-05) ------------------------------
def endpoint_url(base: str, data: str) -> str | None:
    """The POST URL an `endpoint` event names, resolved against the SSE URL;
    None unless it is on the same origin (our credentials go there)."""
    target = urljoin(base, data.strip())
    a, b = urlsplit(base), urlsplit(target)
    if (a.scheme, a.hostname, a.port) != (b.scheme, b.hostname, b.port):
        return None
    return target


# -- Server-Sent Events -------------------------------------------------------------
@dataclass(slots=True)
class SseEvent:
    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


@dataclass(slots=True)
class SseParser:
    """Incremental text/event-stream parser (WHATWG "Parsing an event
    stream"): any line ending, comments skipped, events over `max_bytes`
    dropped as they stream past (counted in `oversized`)."""

    max_bytes: int
    oversized: int = 0
    _buf: bytearray = field(default_factory=bytearray)
    _data: list[str] = field(default_factory=list)
    _size: int = 0
    _event: str = ""
    _id: str | None = None
    _retry: int | None = None
    _started: bool = False
    _skipping: bool = False
    _scanned: int = 0  # the buffer holds no line end before this

    def feed(self, chunk: bytes) -> list[SseEvent]:
        self._buf += chunk
        if not self._started and len(self._buf) >= 3:
            self._started = True
            if self._buf.startswith(b"\xef\xbb\xbf"):
                del self._buf[:3]
        out: list[SseEvent] = []
        buf = self._buf
        size = len(buf)
        start = 0
        # Each search starts where the last one left off, and a buffered
        # partial line is not searched again: many short events in one chunk,
        # or one long line over many, cost one scan, not one per line.
        cr, lf = buf.find(b"\r", self._scanned), buf.find(b"\n", self._scanned)
        while cr >= 0 or lf >= 0:  # each pass takes one complete line
            if lf < 0 or 0 <= cr < lf:
                if cr + 1 == size:
                    break  # a CR at the end may be half of a CRLF
                end, step = cr, 2 if buf[cr + 1] == 0x0A else 1
            else:
                end, step = lf, 1
            self._line(bytes(buf[start:end]), out)
            start = end + step
            if 0 <= cr < start:
                cr = buf.find(b"\r", start)
            if 0 <= lf < start:
                lf = buf.find(b"\n", start)
        del buf[:start]
        # What is left holds no line end, but for a CR at its very end.
        self._scanned = cr - start if cr >= 0 else len(buf)
        if len(buf) > self.max_bytes:  # a line without end: stop buffering it
            buf.clear()
            self._scanned = 0
            self._skip()
        return out

    def close(self) -> list[SseEvent]:
        """End of stream. The spec drops an event without its closing blank
        line; we keep it, since a cut-off JSON body fails to decode anyway."""
        out: list[SseEvent] = []
        if self._buf:
            self._line(bytes(self._buf.rstrip(b"\r")), out)
            self._buf.clear()
        self._scanned = 0
        self._line(b"", out)
        return out

    def _skip(self) -> None:
        if not self._skipping:
            self._skipping = True
            self.oversized += 1
        self._data.clear()

    def _line(self, raw: bytes, out: list[SseEvent]) -> None:
        if not raw:
            self._dispatch(out)
            return
        if raw.startswith(b":"):
            return  # a comment (keep-alive)
        name, _, value = raw.decode("utf-8", "replace").partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._size += len(raw)
            if self._size > self.max_bytes:
                self._skip()
            elif not self._skipping:
                self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "retry" and value.isdigit():
            self._retry = int(value)

    def _dispatch(self, out: list[SseEvent]) -> None:
        if self._data and not self._skipping:
            out.append(
                SseEvent(self._event or "message", "\n".join(self._data), self._id, self._retry)
            )
        elif not self._skipping and self._retry is not None:
            # A retry-only event still tells the client how long to wait.
            out.append(SseEvent(self._event or "message", "", self._id, self._retry))
        self._data.clear()
        self._size = 0
        self._event = ""
        self._retry = None
        self._skipping = False
