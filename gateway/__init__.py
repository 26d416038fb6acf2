"""mcp-era-gateway: a dual-era MCP gateway (legacy initialize sessions ↔ 2026-07-28 stateless)."""

__version__ = "0.1.0"
