"""Classifying an upstream server (2026-07-28 stdio "Backward Compatibility").

Send `server/discover` with modern `_meta`. A DiscoverResult or a recognised
modern error means modern; anything else (or silence) means legacy. The
fallback is deliberately not keyed to one error code: legacy servers answer
unknown pre-initialize requests with whatever they like.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway import era, wire
from gateway.core import upstream_checks


def discover_params(version: str, client_info: dict[str, Any]) -> dict[str, Any]:
    """The params of the gateway's `server/discover` probe."""
    return {
        "_meta": {
            era.PROTOCOL_VERSION: version,
            era.CLIENT_CAPABILITIES: {},
            era.CLIENT_INFO: client_info,
        }
    }


@dataclass(frozen=True, slots=True)
class ProbeVerdict:
    era: era.Era
    # Set when the server is modern and answered the discover.
    discover: dict[str, Any] | None = None
    # Set when the server is modern but wants another version we also speak.
    retry_version: str | None = None
    reason: str = ""
    # The server said nothing within the probe timeout: legacy by default,
    # but a slow modern server may still be starting (see runtime/era_settlement).
    silent: bool = False


def unreachable(reply: wire.Message) -> str | None:
    """Why the upstream could not be reached, when `reply` is the back's own
    answer saying so (http_wire.failure_reply), not the server's: that says
    nothing about its era, and trying the other era's handshake next would
    only hide the cause behind "initialize failed"."""
    error = reply.get("error")
    if not isinstance(error, dict):
        return None
    data = error.get("data")
    if (
        isinstance(data, dict)
        and data.get("source") == wire.GATEWAY_SOURCE
        and data.get("reason") == "upstream-unreachable"
    ):
        return str(error.get("message", ""))
    return None


def judge(reply: wire.Message, ours: tuple[str, ...] = era.MODERN_VERSIONS) -> ProbeVerdict:
    """The era a reply to our `server/discover` reveals."""
    if "result" in reply:
        result = reply["result"]
        supported = result.get("supportedVersions")
        if isinstance(supported, list) and "capabilities" in result:
            common = [v for v in ours if v in supported]
            if common:
                problem = upstream_checks.discover_problem(result)
                if problem is not None:
                    # Modern, but its DiscoverResult cannot be used: no profile.
                    why = f"malformed DiscoverResult: {problem}"
                    return ProbeVerdict(era.Era.MODERN, reason=why)
                return ProbeVerdict(era.Era.MODERN, discover=result, reason="DiscoverResult")
            # DESIGN §4: modern, but nothing in common: use it as legacy if it can be.
            return ProbeVerdict(era.Era.LEGACY, reason=f"no common modern version in {supported}")
        return ProbeVerdict(era.Era.LEGACY, reason="result is not a DiscoverResult")
    error = reply.get("error") or {}
    code = error.get("code")
    if code in era.MODERN_ERRORS:
        data = error.get("data")
        supported = data.get("supported") if isinstance(data, dict) else None
        if code == wire.UNSUPPORTED_PROTOCOL_VERSION and isinstance(supported, list):
            common = [v for v in ours if v in supported]
            if common:
                return ProbeVerdict(
                    era.Era.MODERN,
                    retry_version=common[0],
                    reason="-32022 names a version we speak",
                )
            return ProbeVerdict(era.Era.LEGACY, reason=f"no common modern version in {supported}")
        return ProbeVerdict(era.Era.MODERN, reason=f"modern error {code}")
    return ProbeVerdict(era.Era.LEGACY, reason=f"error {code}: {error.get('message', '')!s:.80}")


@dataclass(frozen=True, slots=True)
class LegacyCheck:
    """What a modern server's answer to a legacy `initialize` says about it
    (2026-07-28 "Dual-era"): `initialize` set when it serves legacy clients
    too, `outage` when the answer says nothing about its era."""

    initialize: dict[str, Any] | None
    reason: str
    outage: bool = False


def judge_legacy_check(reply: wire.Message) -> LegacyCheck:
    """A legacy InitializeResult means dual-era; a refusal (a modern error,
    -32601, any JSON-RPC error, an HTTP 4xx) means modern-only; a failed
    exchange or an HTTP 5xx is an outage, never a verdict (DESIGN §4)."""
    result = reply.get("result")
    if isinstance(result, dict):
        version = result.get("protocolVersion")
        if version in era.LEGACY_VERSIONS and isinstance(result.get("capabilities"), dict):
            return LegacyCheck(result, f"InitializeResult {version}")
        return LegacyCheck(None, f"initialize answered with no legacy version ({version!r:.40})")
    error = reply.get("error")
    if not isinstance(error, dict):
        return LegacyCheck(None, "initialize answered with neither result nor error")
    data = error.get("data")
    if isinstance(data, dict) and data.get("source") == wire.GATEWAY_SOURCE:
        status = data.get("status")
        if not isinstance(status, int) or status >= 500:
            return LegacyCheck(None, str(error.get("message", ""))[:120], outage=True)
    return LegacyCheck(
        None, f"initialize refused: {error.get('code')} {error.get('message', '')!s:.80}"
    )
