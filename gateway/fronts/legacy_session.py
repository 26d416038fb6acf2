"""A legacy client's session on the HTTP front: the id it was given, its
client link, where its messages go, and its resumable streams."""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from gateway.client_link import ClientLink
from gateway.fronts.http_output import HttpOutput
from gateway.fronts.legacy_streams import SessionStreams, resumable


@dataclass(eq=False)
class LegacySession:
    id: str
    link: ClientLink
    output: HttpOutput
    last_seen: float = field(default_factory=anyio.current_time)
    streams: SessionStreams = field(default_factory=SessionStreams)

    @property
    def resumable(self) -> bool:
        """2025-11-25 clients take primed, resumable SSE answers."""
        state = self.link.session
        return state is not None and resumable(state.version)
