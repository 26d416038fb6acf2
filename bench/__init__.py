"""Benchmark of mcp-era-gateway against direct connections and a bare relay (not a test)."""
