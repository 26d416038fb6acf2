"""One upstream HTTP session as its client sees it: where each message goes,
which headers it carries, and what the server's answers set up — the legacy
session id and protocol version (2025-11-25 "Session Management", "Protocol
Version Header"), the 2024-11-05 endpoint, the tools' x-mcp-header
parameters (2026-07-28 "Custom Headers from Tool Parameters") — and the
DELETE that ends a legacy session. It runs no task of its own: the
connection (http_back) runs the exchanges, and asks this what to send."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import structlog

from gateway import era, wire
from gateway.backs import http_wire
from gateway.backs.http_client import HttpClient, Target, Timeout, header_fits
from gateway.backs.http_failures import HttpClientError, describe
from gateway.core import http_binding, trace_context

log = structlog.get_logger("gateway.backs.http")

# Pages of our own tools/list refresh after a -32020 (a bound, not a limit
# any real server reaches).
_MAX_TOOL_PAGES = 50

Deliver = Callable[[wire.Message], None]
# POST one request, its messages to the Deliver (http_back's exchange).
Exchange = Callable[[wire.Message, Deliver], Awaitable[object]]


class HttpSession:
    def __init__(
        self,
        client: HttpClient,
        url: str,
        *,
        connect_timeout: float,
        read_timeout: float,
        headers: Mapping[str, str] | None = None,
        trace_headers: bool = False,
    ) -> None:
        """`trace_headers`: tracing is on; each request's trace context (in
        its `_meta`) goes in the W3C headers too."""
        self.client = client
        self.url = url
        self.trace_headers = trace_headers
        self.session_id: str | None = None
        self.legacy_version: str | None = None
        self.sse_endpoint: str | None = None  # set once on the deprecated HTTP+SSE transport
        self._base = {
            **(headers or {}),
            "Accept": http_wire.ACCEPT,
            "Content-Type": "application/json",
        }
        # Requests stay open as long as the session's own bounds allow (a call
        # can be parked for an MRTR round): only connecting is bounded here.
        self.stream_timeout = Timeout(connect=connect_timeout, read=None, write=connect_timeout)
        self.short_timeout = Timeout(connect=connect_timeout, read=read_timeout, write=read_timeout)
        self.read_timeout = read_timeout
        self.tools = http_binding.ToolHeaderCache()
        self.tools_generation = 0  # refreshes so far; a call remembers the one it was sent under
        self._tools_lock = anyio.Lock()
        self._own_ids = itertools.count(1)
        # _post_head_for, and the (url, session id, version) it was made for.
        self._post_head: tuple[tuple[str, str | None, str | None], str | None] | None = None

    @property
    def post_url(self) -> str:
        return self.sse_endpoint or self.url

    def is_stateless(self, msg: wire.Message) -> bool:
        """A modern exchange: no session, no old transport (its cancellation
        is closing the stream, and nothing is resumed)."""
        return era.is_modern(msg) and self.session_id is None and self.sse_endpoint is None

    # -- what each message carries -------------------------------------------------
    def headers(self, msg: wire.Message) -> dict[str, str]:
        headers = dict(self._base)
        if self.sse_endpoint is not None:
            return headers
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
        if self.legacy_version is not None:
            headers["MCP-Protocol-Version"] = self.legacy_version
        elif self.session_id is None and era.is_modern(msg):
            headers.update(http_binding.modern_headers(msg, self.tools.by_name))
        if self.trace_headers:
            headers.update(trace_context.http_headers(msg))
        return headers

    def post_bytes(self, msg: wire.Message, body: bytes) -> bytes | None:
        """The whole HTTP/1.1 POST of `msg` (`body` its JSON) as written on
        the wire, with the headers `headers` gives it; None if one of them
        cannot go as is."""
        if self.sse_endpoint is not None:
            return None
        key = (self.url, self.session_id, self.legacy_version)
        cached = self._post_head
        if cached is None or cached[0] != key:
            cached = self._post_head = (key, self._post_head_for())
        head = cached[1]
        if head is None:
            return None
        extra: dict[str, str] | None = None
        if self.session_id is None and self.legacy_version is None and era.is_modern(msg):
            extra = http_binding.modern_headers(msg, self.tools.by_name)
        if self.trace_headers:
            extra = {**(extra or {}), **trace_context.http_headers(msg)}
        if extra:
            lines = [head]
            for name, value in extra.items():
                if name in self._base or not header_fits(name, value):
                    return None  # overrides a configured header: built header by header
                lines.append(f"{name}: {value}\r\n")
            head = "".join(lines)
        return f"{head}Content-Length: {len(body)}\r\n\r\n".encode("ascii") + body

    def _post_head_for(self) -> str | None:
        """The request line and the headers every POST of the session's
        current state carries (all but a modern request's own), checked once."""
        try:
            return Target.of(self.url).head("POST", self.headers({}))
        except HttpClientError:
            return None  # built header by header, which says what is wrong

    def stream_headers(self, last_event_id: str | None = None) -> dict[str, str]:
        """A GET for an event stream: the session's headers, no body type."""
        headers = {**self.headers({}), "Accept": "text/event-stream"}
        headers.pop("Content-Type", None)
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        return headers

    # -- what the answers set up -----------------------------------------------------
    def take_session(self, request: wire.Message, header: str | None) -> None:
        """A 2xx answer to `request` came with this Mcp-Session-Id header."""
        session_id = http_wire.session_id_from(request, header)
        if session_id is not None:
            self.session_id = session_id

    def observe_reply(self, request: wire.Message, reply: wire.Message) -> None:
        """The server's reply to one of our requests, before its caller sees it."""
        if not isinstance(reply.get("result"), dict):
            return
        method = request["method"]
        if method == "initialize" and not era.is_modern(request):
            version = http_wire.negotiated_version(reply)
            if version is not None:
                self.legacy_version = version
        elif method == "tools/list" and era.is_modern(request):
            self.take_tools(reply["result"])

    def take_tools(self, result: dict[str, Any]) -> None:
        """Learn the annotated arguments of listed tools, and drop the tools
        whose annotations are invalid (2026-07-28 "Schema Extension": an HTTP
        client must exclude them from tools/list)."""
        tools = result.get("tools")
        if not isinstance(tools, list):
            return
        kept, excluded = self.tools.take(tools)
        for name, why in excluded:
            log.warning("upstream tool excluded", tool=name, reason=why)
        if excluded:
            result["tools"] = kept

    async def refresh_tools(self, call: wire.Message, generation: int, exchange: Exchange) -> None:
        """Our own tools/list, all pages, unless another refresh finished
        since `call` was first sent (under `generation`)."""
        async with self._tools_lock:
            if self.tools_generation != generation:
                return
            self.tools_generation += 1
            cursor: object = None
            for _ in range(_MAX_TOOL_PAGES):
                params: dict[str, Any] = {"_meta": http_wire.modern_meta(call)}
                if cursor is not None:
                    params["cursor"] = cursor
                request = wire.request(f"gw-http-{next(self._own_ids)}", "tools/list", params)
                replies: list[wire.Message] = []
                await exchange(request, replies.append)
                answer = next((m for m in replies if m.get("id") == request["id"]), None)
                result = answer.get("result") if answer is not None else None
                if not isinstance(result, dict):
                    log.warning("tools/list refresh failed", answer=answer)
                    return
                self.take_tools(result)
                cursor = result.get("nextCursor")
                if not cursor:
                    return

    # -- the end ---------------------------------------------------------------------------
    async def delete(self) -> None:
        """2025-11-25: a client that no longer needs its session DELETEs it
        (405 means the server does not allow that; nothing more to do)."""
        headers = self.headers({})
        headers.pop("Content-Type", None)
        try:
            await self.client.request(
                "DELETE", self.url, headers=headers, timeout=self.short_timeout
            )
        except HttpClientError as exc:
            log.debug("upstream session DELETE failed", error=describe(exc))
