"""What the gateway knows of its upstream's era once the probes are done
(2026-07-28 stdio "Backward Compatibility", "Dual-era"; DESIGN §4, §5.3):
which side of the server each client meets, and how that is reported. The
probes themselves are the runtime's (runtime/era_settlement.py); what each
answer means is `era_probe`'s."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway import era, wire
from gateway.core import era_probe
from gateway.core.profile import UpstreamProfile


@dataclass(slots=True)
class Settlement:
    # None until settled, and again when the server contradicts the verdict.
    era: era.Era | None = None
    # What clients see: a modern server's modern side, or a legacy server.
    profile: UpstreamProfile | None = None
    # A dual-era server's legacy side, which legacy clients get natively on
    # legacy sessions of their own (`era` is modern, `profile` its modern side).
    legacy_side: UpstreamProfile | None = None
    # A dual-era server's legacy side that keeps no sessions: reported, but
    # its legacy clients are served on the modern side.
    stateless_legacy_side: UpstreamProfile | None = None
    # How the era was found out (the `probe` command's and /readyz's report).
    probe_report: dict[str, Any] = field(default_factory=dict)

    def forget(self) -> None:
        """The server contradicted the verdict (DESIGN §4: e.g. it was
        upgraded between restarts): nothing is known until it is probed again."""
        self.era = None
        self.profile = None
        self.legacy_side = None
        self.stateless_legacy_side = None

    def take_legacy_profile(self, profile: UpstreamProfile, dual_legacy: bool) -> None:
        """A legacy session opened. Every legacy session of one server reports
        the same server; the first one's answer is the profile clients see."""
        if dual_legacy:
            if self.legacy_side is None:
                self.legacy_side = profile
        elif self.profile is None or self.profile.era is not era.Era.LEGACY:
            self.profile = profile

    def profile_for(self, legacy_client: bool) -> UpstreamProfile | None:
        """The side of the server a client meets: a legacy client of a
        dual-era server gets its legacy side, everyone else `profile`."""
        if legacy_client and self.legacy_side is not None:
            return self.legacy_side
        return self.profile

    @property
    def era_name(self) -> str | None:
        """The upstream's era as reported: modern, legacy or dual."""
        if self.legacy_side is not None or self.stateless_legacy_side is not None:
            return "dual"
        return self.era.value if self.era is not None else None

    def path_for(self, legacy_client: bool) -> str:
        """The era path a client's calls take, e.g. "legacy->legacy(dual)"."""
        # Every answered call asks (a label of its metrics): plain attribute
        # reads, not era_name's and the enum's properties.
        client = "legacy" if legacy_client else "modern"
        profile = self.profile_for(legacy_client)
        if profile is None:
            return f"{client}->upstream"
        if self.legacy_side is None and self.stateless_legacy_side is None:
            return f"{client}->{profile.era}"
        return f"{client}->{profile.era}(dual)"

    def describe(self) -> dict[str, Any]:
        """The `probe` command's and /readyz's view of the upstream."""
        assert self.profile is not None
        legacy_side = self.legacy_side or self.stateless_legacy_side
        if legacy_side is None:
            return self.profile.describe()
        modern = {k: v for k, v in self.profile.describe().items() if k != "era"}
        legacy = {k: v for k, v in legacy_side.describe().items() if k != "era"}
        # Whether legacy clients get the legacy side natively.
        legacy["sessions"] = self.legacy_side is not None
        return {"era": "dual", "modern": modern, "legacy": legacy}


@dataclass(frozen=True, slots=True)
class LegacySide:
    """What the legacy check of a modern server found (2026-07-28
    "Dual-era"), its outage aside: `profile` when the server serves legacy
    clients too, `sessions` when it keeps legacy sessions for them, and
    `closing`, why the check's session closes, when it is of no further use."""

    reason: str
    profile: UpstreamProfile | None = None
    sessions: bool = False
    closing: str | None = None


def legacy_side(check: era_probe.LegacyCheck, keeps_sessions: bool) -> LegacySide:
    """`keeps_sessions`: the check's `initialize` opened a session (over HTTP,
    it was answered with an Mcp-Session-Id; over stdio, always). A server
    that answers without one serves legacy clients statelessly (the TS SDK
    2.x's `legacy: 'stateless'`): it forgets what they declared and cannot
    send them requests. Its legacy clients lose less translated onto its
    modern side, where the gateway bridges input_required rounds into
    requests they can answer."""
    if check.initialize is None:
        return LegacySide(check.reason, closing="the server serves modern clients only")
    profile = UpstreamProfile.from_initialize(check.initialize)
    if not keeps_sessions:
        return LegacySide(
            f"{check.reason} without a session (stateless legacy side)",
            profile,
            closing="the server keeps no legacy sessions",
        )
    return LegacySide(check.reason, profile, sessions=True)


def pinned_verdict(pinned: str | None) -> era_probe.ProbeVerdict | None:
    """The verdict `[upstream] era` fixes, if it fixes one (no probe then)."""
    if pinned == "legacy":
        return era_probe.ProbeVerdict(era.Era.LEGACY, reason="pinned by config")
    if pinned == "modern":
        return era_probe.ProbeVerdict(era.Era.MODERN, reason="pinned by config")
    return None


def probe_report(reason: str, legacy_reason: str | None, elapsed: float) -> dict[str, Any]:
    """The report of a settled era: how it was found out (for a modern
    server also checked for a legacy side: the discover's reason, then the
    legacy check's) and how long that took, `elapsed` in seconds."""
    report: dict[str, Any] = {"reason": reason}
    if legacy_reason is not None:
        report = {"reason": f"{reason}; {legacy_reason}", "modern": reason, "legacy": legacy_reason}
    report["elapsedMs"] = round(elapsed * 1000, 1)
    return report


def initialize_contradiction(reply: wire.Message) -> str | None:
    """Why an answer to `initialize` says the server is modern after all (it
    refused with a modern error), or None."""
    if "error" in reply and era_probe.judge(reply).era is era.Era.MODERN:
        return f"initialize refused with modern error {reply['error'].get('code')}"
    return None
