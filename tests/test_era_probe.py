"""Upstream era classification (2026-07-28 stdio "Backward Compatibility")."""

from __future__ import annotations

from gateway import era, wire
from gateway.core import era_probe

DISCOVER = {"resultType": "complete", "supportedVersions": ["2026-07-28"], "capabilities": {}}


def test_discover_result_means_modern() -> None:
    verdict = era_probe.judge(wire.result_response(1, DISCOVER))
    assert verdict.era is era.Era.MODERN and verdict.discover == DISCOVER


def test_unsupported_version_with_common_version_means_modern_retry() -> None:
    reply = wire.error_response(
        1, -32022, "no", {"supported": ["2030-01-01", "2026-07-28"], "requested": "x"}
    )
    verdict = era_probe.judge(reply, ("2026-07-28",))
    assert verdict.era is era.Era.MODERN and verdict.retry_version == "2026-07-28"


def test_modern_server_with_nothing_in_common_is_tried_as_legacy() -> None:
    reply = wire.error_response(1, -32022, "no", {"supported": ["2030-01-01"], "requested": "x"})
    assert era_probe.judge(reply).era is era.Era.LEGACY
    only_future = {**DISCOVER, "supportedVersions": ["2030-01-01"]}
    assert era_probe.judge(wire.result_response(1, only_future)).era is era.Era.LEGACY


def test_other_modern_errors_mean_modern() -> None:
    for code in (wire.HEADER_MISMATCH, wire.MISSING_REQUIRED_CLIENT_CAPABILITY):
        assert era_probe.judge(wire.error_response(1, code, "x")).era is era.Era.MODERN


def test_fallback_is_not_keyed_to_one_error_code() -> None:
    # "The fallback MUST NOT be keyed to one specific error code".
    for code in (-32601, -32602, -32600, -32603, -32000, 42):
        assert era_probe.judge(wire.error_response(1, code, "x")).era is era.Era.LEGACY


def test_a_result_that_is_not_a_discover_result_is_legacy() -> None:
    assert era_probe.judge(wire.result_response(1, {"tools": []})).era is era.Era.LEGACY


def test_discover_request_carries_modern_meta() -> None:
    params = era_probe.discover_params("2026-07-28", {"name": "g", "version": "1"})
    msg = wire.request(7, "server/discover", params)
    assert era.is_modern(msg) and era.check_modern_meta(msg) is None


def test_the_backs_own_unreachable_answer_is_not_an_era() -> None:
    """The HTTP back's answer for an exchange that failed below HTTP (it
    never reached the server) is told from the server's own -32603: the
    first is why the upstream is unavailable, the second a legacy server's
    answer to an unknown method."""
    from gateway.backs import http_wire

    failed = http_wire.failure_reply(1, "cannot connect to h:1: Connection refused")
    assert era_probe.unreachable(failed) == (
        "Upstream HTTP exchange failed: cannot connect to h:1: Connection refused"
    )
    servers = wire.error_response(1, wire.INTERNAL_ERROR, "Upstream HTTP exchange failed")
    assert era_probe.unreachable(servers) is None
    forged = wire.error_response(1, wire.INTERNAL_ERROR, "x", {"reason": "upstream-unreachable"})
    assert era_probe.unreachable(forged) is None  # not marked as the gateway's own
    assert era_probe.unreachable(wire.result_response(1, {})) is None
