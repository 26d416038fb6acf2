"""Official MCP conformance suite (server mode): fixture servers, runner, baseline."""
