"""What the gateway knows about its upstream server once its era is settled."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway import era


@dataclass(slots=True)
class UpstreamProfile:
    era: era.Era
    # The version spoken upstream: a modern version for modern servers, the
    # negotiated legacy version for legacy sessions.
    version: str
    capabilities: dict[str, Any]
    server_info: dict[str, Any] | None
    instructions: str | None = None
    # The server's own answer, kept whole so that nothing it said is lost.
    discover: dict[str, Any] | None = None
    initialize: dict[str, Any] | None = None
    supported_versions: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_discover(cls, result: dict[str, Any], version: str) -> UpstreamProfile:
        meta = result.get("_meta")
        info = meta.get(era.SERVER_INFO) if isinstance(meta, dict) else None
        supported = result.get("supportedVersions")
        return cls(
            era=era.Era.MODERN,
            version=version,
            capabilities=dict(result.get("capabilities") or {}),
            server_info=info if isinstance(info, dict) else None,
            instructions=result.get("instructions")
            if isinstance(result.get("instructions"), str)
            else None,
            discover=result,
            supported_versions=tuple(v for v in supported or () if isinstance(v, str)),
        )

    @classmethod
    def from_initialize(cls, result: dict[str, Any]) -> UpstreamProfile:
        info = result.get("serverInfo")
        return cls(
            era=era.Era.LEGACY,
            version=str(result.get("protocolVersion")),
            capabilities=dict(result.get("capabilities") or {}),
            server_info=info if isinstance(info, dict) else None,
            instructions=result.get("instructions")
            if isinstance(result.get("instructions"), str)
            else None,
            initialize=result,
            supported_versions=(str(result.get("protocolVersion")),),
        )

    def describe(self) -> dict[str, Any]:
        """The `probe` command's report (without timing)."""
        return {
            "era": self.era.value,
            "protocolVersion": self.version,
            "supportedVersions": list(self.supported_versions),
            "capabilities": self.capabilities,
            "serverInfo": self.server_info,
            "instructions": self.instructions,
        }
