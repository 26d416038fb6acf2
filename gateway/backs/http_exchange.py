"""One POST to the upstream and what it got: a request's answer delivered
(or the refusal its caller gets instead), a redirect to follow, a
notification's or a response's 202. A 404 on our session id ends the session (2025-11-25 "Session
Management"), whatever was POSTed."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import structlog

from gateway import wire
from gateway.backs import http_wire
from gateway.backs.http_failures import HttpClientError, describe
from gateway.backs.http_session import Deliver, HttpSession
from gateway.backs.http_stream import HttpRefusal, StreamReader

log = structlog.get_logger("gateway.backs.http")


class HttpExchange:
    def __init__(
        self, session: HttpSession, reader: StreamReader, session_gone: Callable[[str], None]
    ) -> None:
        self._session = session
        self._reader = reader
        self._session_gone = session_gone

    def redirect(self, url: str, status: int, headers: dict[str, str]) -> http_wire.Redirect | None:
        """What a redirect answer to a POST to `url` leads to (the client's
        rule, the one every exchange follows); None: the answer stands."""
        return self._session.client.redirect("POST", url, status, headers)

    def settle(
        self,
        msg: wire.Message,
        status: int,
        headers: dict[str, str],
        body: bytes | None,
        size: int,
        sent_session: bool,
        deliver: Deliver,
    ) -> HttpRefusal | None:
        """What the server answered to request `msg`, read whole in the
        connection's callbacks: `body` None when its `size` is over the
        message size limit. Never an event stream (read as it comes, by
        http_stream.AnswerEvents)."""
        session = self._session
        if 200 <= status < 300:
            if session.sse_endpoint is not None:
                return None  # 2024-11-05: the answer comes on the SSE stream
            session.take_session(msg, headers.get("mcp-session-id"))
            if body is None:
                return self._reader.reply_over_limit(msg["id"], size)
            ctype = headers.get("content-type", "").split(";")[0].strip().lower()
            return self._reader.json_reply(msg["id"], status, ctype, body, deliver)
        if body is None:
            self._reader.body_over_limit(size)
        return self._refused(msg, status, headers, body, sent_session)

    def _refused(
        self,
        msg: wire.Message,
        status: int,
        headers: dict[str, str],
        body: bytes | None,
        sent_session: bool,
    ) -> HttpRefusal | None:
        if status == 404 and sent_session:
            self._session_gone("session ended by the server (HTTP 404)")
            return None
        challenge = headers.get("www-authenticate")
        return HttpRefusal(
            http_wire.refusal_reply(msg["id"], status, body, challenge),
            status,
        )

    async def message(self, msg: wire.Message) -> bool:
        """POST a notification or a response (the server answers 202 and
        nothing more); True if the server took it."""
        session = self._session
        headers = session.headers(msg)
        try:
            async with session.client.stream(
                "POST",
                session.post_url,
                content=orjson.dumps(msg),
                headers=headers,
                timeout=session.short_timeout,
            ) as resp:
                body = await self._reader.read_body(resp)
        except HttpClientError as exc:
            log.warning("upstream POST failed", what=_what(msg), error=describe(exc))
            return False
        if resp.status_code == 404 and "Mcp-Session-Id" in headers:
            self._session_gone("session ended by the server (HTTP 404)")
            return False
        if not resp.is_success:
            log.warning(
                "upstream refused a message",
                what=_what(msg),
                status=resp.status_code,
                body=(body or b"")[:200].decode("utf-8", "replace"),
            )
            return False
        return True


def _what(msg: wire.Message) -> str:
    return str(msg.get("method") or f"reply to {msg.get('id')!r}")
