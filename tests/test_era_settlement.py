"""The settled era as plain data (gateway.core.era_settlement): which side of
the server each client meets and how the verdict is reported. The probes
that feed it are tested end to end in test_dual_era and test_upstream_start;
these are the rules alone, no server needed."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import era, wire
from gateway.core import era_probe
from gateway.core.era_settlement import (
    Settlement,
    initialize_contradiction,
    legacy_side,
    pinned_verdict,
    probe_report,
)
from gateway.core.profile import UpstreamProfile

MODERN = UpstreamProfile.from_discover(
    {"supportedVersions": [era.NEWEST_MODERN], "capabilities": {"tools": {}}}, era.NEWEST_MODERN
)
LEGACY = UpstreamProfile.from_initialize(
    {"protocolVersion": era.NEWEST_LEGACY, "capabilities": {"logging": {}}, "serverInfo": {}}
)
OLDER_LEGACY = UpstreamProfile.from_initialize(
    {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {}}
)


def dual(*, sessions: bool = True) -> Settlement:
    if sessions:
        return Settlement(era.Era.MODERN, MODERN, legacy_side=LEGACY)
    return Settlement(era.Era.MODERN, MODERN, stateless_legacy_side=LEGACY)


def test_a_legacy_client_of_a_dual_era_server_meets_its_legacy_side() -> None:
    """2026-07-28 "Dual-era": legacy clients are served natively by the
    legacy side, modern clients by the modern side; the path says so."""
    state = dual()
    assert state.era_name == "dual"
    assert state.profile_for(legacy_client=True) is LEGACY
    assert state.profile_for(legacy_client=False) is MODERN
    assert state.path_for(True) == "legacy->legacy(dual)"
    assert state.path_for(False) == "modern->modern(dual)"


def test_a_stateless_legacy_side_is_reported_but_serves_no_one() -> None:
    """A dual-era server that keeps no legacy sessions: its legacy clients
    are translated onto the modern side, and the report says the legacy side
    has no sessions."""
    state = dual(sessions=False)
    assert state.era_name == "dual"
    assert state.profile_for(legacy_client=True) is MODERN
    assert state.path_for(True) == "legacy->modern(dual)"
    report = state.describe()
    assert report["era"] == "dual" and report["legacy"]["sessions"] is False
    assert dual().describe()["legacy"]["sessions"] is True
    assert "era" not in report["modern"] and "era" not in report["legacy"]


def test_a_single_era_server_reports_its_profile_as_it_is() -> None:
    for state, name in [
        (Settlement(era.Era.MODERN, MODERN), "modern"),
        (Settlement(era.Era.LEGACY, LEGACY), "legacy"),
    ]:
        assert state.era_name == name
        assert state.describe() == (MODERN if name == "modern" else LEGACY).describe()
        assert state.path_for(True) == f"legacy->{name}"
    assert Settlement().era_name is None
    assert Settlement().path_for(False) == "modern->upstream"


def test_a_contradicted_verdict_forgets_everything() -> None:
    """DESIGN §4: "re-probed when it is contradicted": nothing of the old
    verdict survives, neither era nor either side."""
    state = dual()
    state.forget()
    assert (state.era, state.profile, state.legacy_side, state.stateless_legacy_side) == (
        None,
        None,
        None,
        None,
    )
    assert state.era_name is None


def test_the_first_legacy_session_answers_for_the_server() -> None:
    """Every legacy session of one server reports the same server: the first
    one's InitializeResult is the profile clients see, for either side."""
    state = Settlement(era.Era.LEGACY)
    state.take_legacy_profile(LEGACY, dual_legacy=False)
    state.take_legacy_profile(OLDER_LEGACY, dual_legacy=False)
    assert state.profile is LEGACY
    # A modern profile left from before (a re-probe) is replaced.
    state = Settlement(era.Era.LEGACY, MODERN)
    state.take_legacy_profile(LEGACY, dual_legacy=False)
    assert state.profile is LEGACY
    # A dual-era server's legacy sessions fill its legacy side, once.
    state = Settlement(era.Era.MODERN, MODERN)
    state.take_legacy_profile(LEGACY, dual_legacy=True)
    state.take_legacy_profile(OLDER_LEGACY, dual_legacy=True)
    assert state.profile is MODERN and state.legacy_side is LEGACY


def test_a_pinned_era_needs_no_probe() -> None:
    """DESIGN §4: the verdict "can be pinned in config (`era = "auto" |
    "modern" | "legacy"`)"."""
    legacy, modern = pinned_verdict("legacy"), pinned_verdict("modern")
    assert legacy is not None and legacy.era is era.Era.LEGACY
    assert modern is not None and modern.era is era.Era.MODERN
    assert legacy.reason == modern.reason == "pinned by config"
    assert pinned_verdict("auto") is None and pinned_verdict(None) is None


@given(
    st.text(max_size=30),
    st.one_of(st.none(), st.text(max_size=30)),
    st.floats(0, 1000, allow_nan=False),
)
def test_the_probe_report_says_how_each_era_was_found_out(
    reason: str, legacy_reason: str | None, elapsed: float
) -> None:
    """The `probe` command's and /readyz's report: one reason for a single
    era; for a modern server checked for a legacy side both, and their sum."""
    report = probe_report(reason, legacy_reason, elapsed)
    assert report["elapsedMs"] == round(elapsed * 1000, 1)
    if legacy_reason is None:
        assert report == {"reason": reason, "elapsedMs": report["elapsedMs"]}
    else:
        assert report["reason"] == f"{reason}; {legacy_reason}"
        assert (report["modern"], report["legacy"]) == (reason, legacy_reason)
    assert list(report)[-1] == "elapsedMs"


@pytest.mark.parametrize("code", sorted(era.MODERN_ERRORS))
def test_initialize_refused_with_a_modern_error_contradicts_a_legacy_verdict(code: int) -> None:
    """DESIGN §4: a cached legacy verdict the server contradicts is re-probed;
    a modern error to `initialize` is that contradiction."""
    data: dict[str, Any] = {"supported": [era.NEWEST_MODERN]}
    reply = wire.error_response(1, code, "modern only", data)
    assert initialize_contradiction(reply) == f"initialize refused with modern error {code}"


def test_any_other_answer_to_initialize_is_no_contradiction() -> None:
    ok = {"jsonrpc": "2.0", "id": 1, "result": LEGACY.initialize}
    assert initialize_contradiction(ok) is None
    assert initialize_contradiction(wire.error_response(1, wire.INTERNAL_ERROR, "no")) is None
    assert initialize_contradiction(wire.error_response(1, wire.METHOD_NOT_FOUND, "no")) is None


def test_the_legacy_check_finds_a_legacy_side_with_sessions_or_without() -> None:
    """2026-07-28 "Dual-era": a modern server that also answers a legacy
    `initialize` serves legacy clients natively on sessions of their own,
    unless it keeps no sessions (an HTTP answer without Mcp-Session-Id): then
    its legacy side is only reported, and its check's session closes."""
    answer = {"jsonrpc": "2.0", "id": 1, "result": LEGACY.initialize}
    dual_era = era_probe.judge_legacy_check(answer)
    side = legacy_side(dual_era, keeps_sessions=True)
    assert side.sessions and side.closing is None
    assert side.profile is not None and side.profile.initialize == LEGACY.initialize
    assert side.reason == f"InitializeResult {era.NEWEST_LEGACY}"
    stateless = legacy_side(dual_era, keeps_sessions=False)
    assert not stateless.sessions and stateless.profile == side.profile
    assert stateless.closing == "the server keeps no legacy sessions"
    assert stateless.reason.endswith("without a session (stateless legacy side)")


def test_a_refused_legacy_check_means_modern_only() -> None:
    refused = era_probe.judge_legacy_check(wire.error_response(1, wire.METHOD_NOT_FOUND, "no"))
    side = legacy_side(refused, keeps_sessions=True)
    assert side.profile is None and not side.sessions
    assert side.closing == "the server serves modern clients only"
    assert side.reason == refused.reason
