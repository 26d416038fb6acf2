"""`--log-level debug`: one line per message on each side of the gateway
(issue #14: "so a user can see a translation without a packet capture").

Each line says the direction (client→gw, gw→upstream, upstream→gw,
gw→client), the era of that side, the method (or "reply"/"error"), the id
and the size in bytes. Never a body: tool arguments and results may carry
secrets. At any other level nothing here runs: `enabled` is decided once
from the configured level, and with it off no link is wrapped and the
upstream gets no tap, so no event dict is built per message."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import structlog

from gateway import era, wire
from gateway.client_link import ClientLink
from gateway.config import Config

log = structlog.get_logger("gateway.messages")

Tap = Callable[[str, wire.Message], None]

CLIENT_IN = "client→gw"
UPSTREAM_OUT = "gw→upstream"
UPSTREAM_IN = "upstream→gw"
CLIENT_OUT = "gw→client"


def enabled(config: Config) -> bool:
    return config.log_level == "debug"


def _what(msg: wire.Message) -> Any:
    method = msg.get("method")
    if method is not None:
        return method
    return "error" if "error" in msg else "reply"


def line(direction: str, side_era: str, msg: wire.Message) -> None:
    log.debug(
        "message",
        direction=direction,
        era=side_era,
        method=_what(msg),
        id=msg.get("id"),
        bytes=len(orjson.dumps(msg)),
    )


def _request_era(msg: wire.Message) -> str:
    # DESIGN §4: a request is modern iff its _meta names a protocol version.
    return "modern" if era.is_modern(msg) else "legacy"


def _client_era(link: ClientLink) -> str:
    # A legacy client is one with a session (it sent initialize).
    return "legacy" if link.session is not None else "modern"


class MessageLog:
    """The message lines of one gateway: `upstream_era` names the upstream's
    era for the lines of its replies (requests say theirs in `_meta`)."""

    def __init__(self, upstream_era: Callable[[], str | None]) -> None:
        self._upstream_era = upstream_era

    def tap(self, then: Tap | None) -> Tap:
        """The upstream's tap: a line per message each way, then `then`'s."""

        def tap(direction: str, msg: wire.Message) -> None:
            if direction == "to-server":
                line(UPSTREAM_OUT, _request_era(msg) if "method" in msg else "-", msg)
            else:
                line(UPSTREAM_IN, self._upstream_era() or "unsettled", msg)
            if then is not None:
                then(direction, msg)

        return tap

    def from_client(self, link: ClientLink, msg: wire.Message) -> None:
        """A client message arrived: its line; and the link's output gets
        lines too (the first time it is seen)."""
        side = "legacy" if link.session is not None else _request_era(msg)
        line(CLIENT_IN, side, msg)
        if not isinstance(getattr(link.send_nowait, "__self__", None), _LoggedOutput):
            output = _LoggedOutput(link)
            link.send, link.send_nowait = output.send, output.send_nowait


class _LoggedOutput:
    """A client link's output, a line per message it sends."""

    __slots__ = ("_link", "_send", "_send_nowait")

    def __init__(self, link: ClientLink) -> None:
        self._link = link
        self._send: Callable[[wire.Message], Awaitable[None]] = link.send
        self._send_nowait: Callable[[wire.Message], None] = link.send_nowait

    async def send(self, msg: wire.Message) -> None:
        line(CLIENT_OUT, _client_era(self._link), msg)
        await self._send(msg)

    def send_nowait(self, msg: wire.Message) -> None:
        line(CLIENT_OUT, _client_era(self._link), msg)
        self._send_nowait(msg)
