"""The gateway's settings: one frozen dataclass, its defaults, and its
canonical form. Checking is checks.py's; reading the TOML file toml_file.py's;
the command line overrides with `with_overrides` (the CLI wins)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from gateway.config.checks import check as check_config
from gateway.config.checks import normalize_listen
from gateway.core.fair_share import Share
from gateway.flow_control import DEFAULT_BOUNDS, QueueBounds
from gateway.translate import CacheHint

DEFAULT_CLIENT_INFO = {"name": "mcp-era-gateway", "version": "0.1.0"}


@dataclass(frozen=True, slots=True)
class Config:
    # Downstream
    listen: str = "stdio"
    # Upstream: a command to spawn (stdio back) or a URL (Streamable HTTP back)
    command: tuple[str, ...] = ()
    upstream_url: str | None = None
    upstream_headers: dict[str, str] = field(default_factory=dict)
    # Origins besides the upstream's own that its redirects may lead to: the
    # upstream headers (credentials) travel with a followed redirect.
    upstream_redirect_origins: tuple[str, ...] = ()
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    upstream_era: str = "auto"  # auto | modern | legacy
    client_info: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_CLIENT_INFO))
    max_sessions: int = 1  # per principal: legacy sessions, one per declared feature set
    # Legacy upstream processes (or HTTP sessions) across all principals; past
    # it the least recently used idle one is stopped.
    max_processes: int = 16
    # `subscriptions/listen`: resource URIs one listen may name (each is an
    # upstream resources/subscribe).
    max_listen_uris: int = 1000
    # Bounds (seconds, bytes, counts)
    probe_timeout: float = 5.0
    startup_timeout: float = 30.0
    request_timeout: float = 120.0
    listen_timeout: float = 86400.0  # the longest a subscriptions/listen may stay open
    # Vendor methods a modern client may send a legacy server as they are.
    passthrough_methods: frozenset[str] = frozenset()
    shutdown_grace: float = 5.0  # to drain in-flight calls at shutdown
    # HTTP front: after SIGTERM, how long /readyz is 503 while requests are
    # still served, so that a balancer notices before connections are refused.
    drain_delay: float = 0.0
    # After closing the upstream's stdin, how long before SIGTERM (and again
    # before SIGKILL). Short by default: MCP clients give their server about
    # 2 s between closing its stdin and SIGTERM.
    upstream_exit_grace: float = 1.5
    restart_backoff_initial: float = 0.25
    restart_backoff_max: float = 10.0
    # HTTP front: how often /readyz asks an HTTP upstream whether it still
    # accepts connections (a command's exit is seen at once).
    health_interval: float = 5.0
    max_message_bytes: int = 4 * 1024 * 1024
    # Flow control (gateway/flow_control.py): the bytes that may wait for a
    # peer that reads slowly, and the lower bound past which its progress
    # and log notifications are dropped.
    max_queued_bytes: int = DEFAULT_BOUNDS.queue_bytes
    max_queued_notification_bytes: int = DEFAULT_BOUNDS.notification_bytes
    max_inflight_per_client: int = 256
    # Cache hints for translated results (2026-07-28 "Caching")
    cache_ttl_ms: dict[str, int] = field(default_factory=dict)
    cache_scope: dict[str, str] = field(default_factory=dict)
    default_ttl_ms: int = 0
    notified_ttl_ms: int = 60_000
    default_cache_scope: str = "private"
    # MRTR bridge (DESIGN §5.1.6-5.1.8)
    # HMAC keys for requestState, one or a list: the first seals, every one
    # opens (rotation). Random per process when unset.
    state_key: str | tuple[str, ...] | None = None
    instance_id: str | None = None  # names this replica in requestState; random when unset
    state_ttl: float = 300.0  # how long a parked call waits for the client's retry
    max_rounds: int = 8
    # Server requests that arrive in one read always share an input_required;
    # a window (seconds) also waits for ones written further apart.
    input_batch_window: float = 0.0
    max_parked_calls: int = 1000
    # Shares of the shared pools (core/fair_share.py): how much of each one
    # principal may hold; 0 is three quarters of the pool's total.
    max_parked_per_principal: int = 0
    replay_tools: tuple[str, ...] = ()  # fnmatch patterns of idempotent tools: replay mode
    # Tasks (the 2026-07-28 extension io.modelcontextprotocol/tasks): for
    # legacy clients of a server that offers it, the gateway declares it and
    # polls a task it gets at the task's pollIntervalMs (this when it gives
    # none), for at most max_wait seconds, then returns the task's result.
    tasks_for_legacy_clients: bool = True
    tasks_poll_interval: float = 1.0
    tasks_max_wait: float = 3600.0
    # For modern clients that declare the extension, of a legacy server: a
    # tools/call still running after `after` seconds is answered with a task
    # of the gateway's own, which lives `ttl` seconds; at most `max_live` at
    # once (past that, calls are answered when they end).
    tasks_for_modern_clients: bool = True
    tasks_after: float = 2.0
    tasks_ttl: float = 3600.0
    tasks_max_live: int = 1000
    tasks_max_live_per_principal: int = 0  # of each kind of task (0: 3/4 of max_live)
    # [upstream] roots: answer roots/list when no client call can carry it
    static_roots: tuple[dict[str, Any], ...] = ()
    # HTTP front (--listen HOST:PORT)
    http_allowed_hosts: tuple[str, ...] = ("127.0.0.1", "localhost", "::1")
    http_allowed_origins: tuple[str, ...] = ()
    http_tokens: dict[str, str] = field(default_factory=dict)  # principal -> bearer token
    # name -> bearer token for /metrics and /readyz details (http_tokens when empty)
    http_admin_tokens: dict[str, str] = field(default_factory=dict)
    http_max_sessions: int = 1000
    http_max_sessions_per_principal: int = 0  # 0: 3/4 of max_sessions
    http_session_idle: float = 1800.0
    http_max_concurrent: int = 64  # requests in progress per principal
    # The bytes queued toward one principal's HTTP clients over all their
    # streams (each stream holds at most `queue_bounds`); at least one
    # stream's bound is used (gateway/fronts/client_queues.py).
    http_max_queued_bytes_per_principal: int = 64 * 1024 * 1024
    # Connection limits (gateway/fronts/http_limits.py and its parts)
    http_max_header_bytes: int = 32 * 1024  # request line + headers (431 beyond)
    http_header_timeout: float = 10.0  # the whole head must arrive within it (408)
    http_body_timeout: float = 30.0  # the whole body must arrive within it (408)
    http_idle_timeout: float = 30.0  # a connection with no request is closed after it
    http_max_connections: int = 1000  # the oldest idle one makes room, else 503
    # 2025-11-25 resumable streams (gateway/fronts/legacy_streams.py): close a
    # call's SSE stream after this long (0: never) so that no response is held
    # longer than an intermediary allows; the client reconnects after
    # `sse_retry` and resumes; a call with no client attached for
    # `sse_resume_window` is cancelled.
    http_sse_poll_after: float = 0.0
    http_sse_retry: float = 1.0
    http_sse_resume_window: float = 30.0
    # Send the client's own Authorization header upstream (HTTP front and back
    # only); upstream sessions are then keyed by that credential.
    http_forward_authorization: bool = False
    # The cookie that names this replica on `input_required` answers, for a
    # balancer to send the retry of a held call back here ("": none).
    http_affinity_cookie: str = "mcp_era_gateway_replica"
    # The deprecated HTTP+SSE transport next to /mcp (GET /sse, POST
    # /messages; gateway/fronts/sse_front.py), for clients of 2024-11-05.
    http_sse_front: bool = True

    # Traces (the `otel` extra; runtime/tracing.py). On when enabled or an
    # endpoint is given; unset fields fall back to the standard OTEL_* variables.
    tracing_enabled: bool = False
    tracing_otlp_endpoint: str | None = None  # the OTLP/HTTP traces URL
    tracing_service_name: str | None = None  # else OTEL_SERVICE_NAME, else mcp-era-gateway
    tracing_sample_ratio: float = 1.0  # of new traces; a client's sampled flag is followed
    # Logging
    log_level: str = "info"
    log_format: str = "console"  # console | json

    def cache_hint(self, method: str, notified: bool = False) -> CacheHint:
        """The hints for a translated result. `notified`: the upstream declares
        change notifications for it, so a client that listens learns of changes
        and a longer freshness is safe (2026-07-28 "Interaction with Notifications")."""
        default = self.notified_ttl_ms if notified else self.default_ttl_ms
        return CacheHint(
            ttl_ms=self.cache_ttl_ms.get(method, default),
            scope=self.cache_scope.get(method, self.default_cache_scope),
        )

    def state_keys(self) -> tuple[str, ...]:
        """The requestState keys, the sealing one first; none when unset."""
        if self.state_key is None:
            return ()
        return (self.state_key,) if isinstance(self.state_key, str) else self.state_key

    @property
    def queue_bounds(self) -> QueueBounds:
        # A reply of the largest size always fits a peer's empty queue.
        queue = max(self.max_queued_bytes, self.max_message_bytes)
        return QueueBounds(queue, self.max_queued_notification_bytes)

    @property
    def task_share(self) -> Share:
        """Live tasks of each kind: the total and one principal's share."""
        return Share.of(self.tasks_max_live, self.tasks_max_live_per_principal)

    @property
    def http_session_share(self) -> Share:
        return Share.of(self.http_max_sessions, self.http_max_sessions_per_principal)

    @property
    def tracing(self) -> bool:
        """Whether traces are configured (and the `otel` extra needed)."""
        return self.tracing_enabled or self.tracing_otlp_endpoint is not None

    def with_overrides(self, **overrides: Any) -> Config:
        cfg = replace(self, **{k: v for k, v in overrides.items() if v is not None})
        cfg = cfg.normalized()
        cfg.check()
        return cfg

    def normalized(self) -> Config:
        """The same settings in canonical form: `listen` as HOST:PORT (a URL
        form is accepted), the log level and format in lower case."""
        return replace(
            self,
            listen=normalize_listen(self.listen),
            log_level=self.log_level.lower(),
            log_format=self.log_format.lower(),
        )

    def check(self) -> None:
        check_config(self)
