"""The log level set on a shared legacy upstream session (2025-11-25
`logging/setLevel`): it only ever widens to what some request asked; the
gateway filters per request on the way back."""

from __future__ import annotations

from gateway import era
from gateway.core.profile import UpstreamProfile


def level_to_set(
    profile: UpstreamProfile | None, current: str | None, asked: str | None
) -> str | None:
    """The level to set upstream before a request asking `asked`, if any:
    none for a modern server (it takes the level from each request's
    `_meta`) or one without the logging capability, none if the session's
    `current` level already shows as much."""
    if asked is None or profile is None or profile.era is not era.Era.LEGACY:
        return None
    if "logging" not in profile.capabilities:
        return None
    if current is not None and era.LOG_RANK[current] <= era.LOG_RANK[asked]:
        return None
    return asked
