"""The level set on a shared legacy session (gateway.core.upstream_log_level),
DESIGN §5.1.5: the gateway "sets `logging/setLevel` upstream when a request
asks for `io.modelcontextprotocol/logLevel`, and filters
`notifications/message` per request"; the session's level only widens."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway import era
from gateway.core.profile import UpstreamProfile
from gateway.core.upstream_log_level import level_to_set


def legacy(capabilities: dict[str, object]) -> UpstreamProfile:
    return UpstreamProfile.from_initialize(
        {"protocolVersion": era.NEWEST_LEGACY, "capabilities": capabilities}
    )


LOGS = legacy({"logging": {}})
levels = st.sampled_from(era.LOG_LEVELS)


def test_a_modern_server_or_one_without_logging_is_never_told_a_level() -> None:
    modern = UpstreamProfile.from_discover({"capabilities": {"logging": {}}}, era.NEWEST_MODERN)
    assert level_to_set(modern, None, "debug") is None
    assert level_to_set(legacy({}), None, "debug") is None
    assert level_to_set(None, None, "debug") is None
    assert level_to_set(LOGS, None, None) is None


@given(st.one_of(st.none(), levels), levels)
def test_the_level_only_ever_widens(current: str | None, asked: str) -> None:
    """A request asking a level the session already shows changes nothing;
    one asking more (a less severe level) widens it to exactly that."""
    to_set = level_to_set(LOGS, current, asked)
    if current is not None and era.LOG_RANK[current] <= era.LOG_RANK[asked]:
        assert to_set is None
    else:
        assert to_set == asked
