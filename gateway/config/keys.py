"""Where each setting lives in the TOML file: `[table] key` -> Config field,
and the spelling an error message uses for a setting (what the operator
writes)."""

from __future__ import annotations

# TOML table.key -> Config field
KEYS: dict[tuple[str, str], str] = {
    ("gateway", "listen"): "listen",
    ("gateway", "log_level"): "log_level",
    ("gateway", "log_format"): "log_format",
    ("gateway", "max_message_bytes"): "max_message_bytes",
    ("gateway", "max_inflight_per_client"): "max_inflight_per_client",
    ("gateway", "shutdown_grace"): "shutdown_grace",
    ("gateway", "drain_delay"): "drain_delay",
    ("upstream", "command"): "command",
    ("upstream", "url"): "upstream_url",
    ("upstream", "headers"): "upstream_headers",
    ("upstream", "cwd"): "cwd",
    ("upstream", "exit_grace"): "upstream_exit_grace",
    ("upstream", "env"): "env",
    ("upstream", "era"): "upstream_era",
    ("upstream", "client_info"): "client_info",
    ("upstream", "max_sessions"): "max_sessions",
    ("upstream", "max_processes"): "max_processes",
    ("upstream", "probe_timeout"): "probe_timeout",
    ("upstream", "startup_timeout"): "startup_timeout",
    ("upstream", "request_timeout"): "request_timeout",
    ("upstream", "listen_timeout"): "listen_timeout",
    ("upstream", "passthrough_methods"): "passthrough_methods",
    ("upstream", "restart_backoff_initial"): "restart_backoff_initial",
    ("upstream", "restart_backoff_max"): "restart_backoff_max",
    ("upstream", "health_interval"): "health_interval",
    ("http", "allowed_hosts"): "http_allowed_hosts",
    ("http", "allowed_origins"): "http_allowed_origins",
    ("http", "tokens"): "http_tokens",
    ("http", "admin_tokens"): "http_admin_tokens",
    ("http", "max_sessions"): "http_max_sessions",
    ("http", "session_idle"): "http_session_idle",
    ("http", "max_concurrent"): "http_max_concurrent",
    ("http", "forward_authorization"): "http_forward_authorization",
    ("http", "max_header_bytes"): "http_max_header_bytes",
    ("http", "header_timeout"): "http_header_timeout",
    ("http", "body_timeout"): "http_body_timeout",
    ("http", "idle_timeout"): "http_idle_timeout",
    ("http", "sse_poll_after"): "http_sse_poll_after",
    ("http", "sse_retry"): "http_sse_retry",
    ("http", "sse_resume_window"): "http_sse_resume_window",
    ("http", "max_connections"): "http_max_connections",
    ("http", "affinity_cookie"): "http_affinity_cookie",
    ("http", "sse_front"): "http_sse_front",
    ("mrtr", "state_key"): "state_key",
    ("mrtr", "instance_id"): "instance_id",
    ("mrtr", "state_ttl"): "state_ttl",
    ("mrtr", "max_rounds"): "max_rounds",
    ("mrtr", "input_batch_window"): "input_batch_window",
    ("mrtr", "max_parked_calls"): "max_parked_calls",
    ("mrtr", "replay_tools"): "replay_tools",
    ("upstream", "roots"): "static_roots",
    # The older spelling of [upstream] roots, still read.
    ("mrtr", "static_roots"): "static_roots",
    ("cache", "default_ttl_ms"): "default_ttl_ms",
    ("cache", "notified_ttl_ms"): "notified_ttl_ms",
    ("cache", "default_scope"): "default_cache_scope",
    ("cache", "ttl_ms"): "cache_ttl_ms",
    ("cache", "scope"): "cache_scope",
    ("tracing", "enabled"): "tracing_enabled",
    ("tracing", "otlp_endpoint"): "tracing_otlp_endpoint",
    ("tracing", "service_name"): "tracing_service_name",
    ("tracing", "sample_ratio"): "tracing_sample_ratio",
}
WHERE = {name: f"[{table}] {key}" for (table, key), name in reversed(KEYS.items())}


def where(name: str) -> str:
    """How the operator writes a setting: its TOML key."""
    return WHERE.get(name, name)
