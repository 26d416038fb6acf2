"""The gateway's side of the legacy `initialize` handshake, as a client upstream."""

from __future__ import annotations

from typing import Any

from gateway import era, wire

# DESIGN §5.1.1: a stdio back's one shared session declares every client
# feature the gateway can bridge, so the server offers everything it has.
BRIDGEABLE_CAPABILITIES: dict[str, Any] = {
    "sampling": {},
    "elicitation": {"form": {}, "url": {}},
    "roots": {"listChanged": True},
}

INITIALIZED = wire.notification("notifications/initialized")


class HandshakeError(Exception):
    pass


def initialize_params(
    capabilities: dict[str, Any], client_info: dict[str, Any], version: str = era.NEWEST_LEGACY
) -> dict[str, Any]:
    """The params of the gateway's `initialize` to a legacy server."""
    return {"protocolVersion": version, "capabilities": capabilities, "clientInfo": client_info}


def accept(reply: wire.Message) -> dict[str, Any]:
    """The InitializeResult, or HandshakeError saying why the session cannot open."""
    if "error" in reply:
        err = reply["error"]
        raise HandshakeError(f"initialize failed: {err.get('code')} {err.get('message')}")
    result = reply.get("result")
    if not isinstance(result, dict):
        raise HandshakeError("initialize returned no result object")
    version = result.get("protocolVersion")
    if version not in era.LEGACY_VERSIONS:
        raise HandshakeError(f"server chose protocol version {version!r}, which we do not speak")
    if not isinstance(result.get("capabilities"), dict):
        raise HandshakeError("InitializeResult has no capabilities object")
    return result
