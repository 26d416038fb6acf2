"""Gateway settings: TOML file, then command-line overrides (the CLI wins)."""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from gateway import era
from gateway.core import authority
from gateway.translate import CacheHint

DEFAULT_CLIENT_INFO = {"name": "mcp-era-gateway", "version": "0.1.0"}


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
# RFC 9110 §5.1 field-name token; a field value without CR, LF or NUL.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_VALUE = re.compile(r"[^\r\n\x00]*")


class ConfigError(Exception):
    """A setting the gateway cannot run with; the message names it."""


def _check_upstream_url(url: str) -> None:
    """http(s)://HOST[:PORT][/path], the authority as strict as a Host header."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise ConfigError(f"upstream url must be http:// or https://, not {url!r}")
    if any(c.isspace() for c in url) or "#" in url:
        raise ConfigError(f"upstream url {url!r} has whitespace or a fragment")
    netloc = rest.split("/", 1)[0].split("?", 1)[0]
    try:
        authority.parse_host(netloc)
    except authority.BadAuthority as exc:
        hint = " (send credentials with [upstream] headers)" if "@" in netloc else ""
        raise ConfigError(f"upstream url {url!r}: bad host: {exc}{hint}") from None


def normalize_listen(value: str) -> str:
    """`stdio`, or HOST:PORT in canonical form. `http://HOST:PORT` and
    `http://HOST:PORT/mcp` are accepted, since that is how the endpoint is
    written everywhere else."""
    if value == "stdio":
        return value
    text = value
    if text.lower().startswith("http://"):
        text = text[len("http://") :]
        for path in ("/mcp", "/"):
            if text.endswith(path):
                text = text[: -len(path)]
                break
    try:
        if text.lower().startswith("https://"):
            raise authority.BadAuthority("the gateway serves plain HTTP; put TLS in a proxy")
        if "/" in text:
            raise authority.BadAuthority("the endpoint is always /mcp")
        parsed = authority.parse_host(text)
        if parsed.port is None:
            raise authority.BadAuthority("a port is required")
    except authority.BadAuthority as exc:
        raise ConfigError(
            f"listen must be 'stdio' or HOST:PORT (e.g. 127.0.0.1:8080), not {value!r}: {exc}"
        ) from None
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    return f"{host}:{parsed.port}"


@dataclass(frozen=True, slots=True)
class Config:
    # Downstream
    listen: str = "stdio"
    # Upstream: a command to spawn (stdio back) or a URL (Streamable HTTP back)
    command: tuple[str, ...] = ()
    upstream_url: str | None = None
    upstream_headers: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    upstream_era: str = "auto"  # auto | modern | legacy
    client_info: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_CLIENT_INFO))
    max_sessions: int = 1  # per principal: legacy sessions, one per declared feature set
    # Legacy upstream processes (or HTTP sessions) across all principals; past
    # it the least recently used idle one is stopped.
    max_processes: int = 16
    # Bounds (seconds, bytes, counts)
    probe_timeout: float = 5.0
    startup_timeout: float = 30.0
    request_timeout: float = 120.0
    listen_timeout: float = 86400.0  # the longest a subscriptions/listen may stay open
    # Vendor methods a modern client may send a legacy server as they are.
    passthrough_methods: frozenset[str] = frozenset()
    shutdown_grace: float = 5.0  # to drain in-flight calls at shutdown
    # After closing the upstream's stdin, how long before SIGTERM (and again
    # before SIGKILL). Short by default: MCP clients give their server about
    # 2 s between closing its stdin and SIGTERM.
    upstream_exit_grace: float = 1.5
    restart_backoff_initial: float = 0.25
    restart_backoff_max: float = 10.0
    max_message_bytes: int = 4 * 1024 * 1024
    max_inflight_per_client: int = 256
    # Cache hints for translated results (2026-07-28 "Caching")
    cache_ttl_ms: dict[str, int] = field(default_factory=dict)
    cache_scope: dict[str, str] = field(default_factory=dict)
    default_ttl_ms: int = 0
    notified_ttl_ms: int = 60_000
    default_cache_scope: str = "private"
    # MRTR bridge (DESIGN §5.1.6-5.1.8)
    state_key: str | None = None  # HMAC key for requestState; random per process when unset
    instance_id: str | None = None  # names this replica in requestState; random when unset
    state_ttl: float = 300.0  # how long a parked call waits for the client's retry
    max_rounds: int = 8
    # Server requests that arrive in one read always share an input_required;
    # a window (seconds) also waits for ones written further apart.
    input_batch_window: float = 0.0
    max_parked_calls: int = 1000
    replay_tools: tuple[str, ...] = ()  # fnmatch patterns of idempotent tools: replay mode
    # [upstream] roots: answer roots/list when no client call can carry it
    static_roots: tuple[dict[str, Any], ...] = ()
    # HTTP front (--listen HOST:PORT)
    http_allowed_hosts: tuple[str, ...] = ("127.0.0.1", "localhost", "::1")
    http_allowed_origins: tuple[str, ...] = ()
    http_tokens: dict[str, str] = field(default_factory=dict)  # principal -> bearer token
    # name -> bearer token for /metrics and /readyz details (http_tokens when empty)
    http_admin_tokens: dict[str, str] = field(default_factory=dict)
    http_max_sessions: int = 1000
    http_session_idle: float = 1800.0
    http_max_concurrent: int = 64  # requests in progress per principal
    # Connection limits (gateway/fronts/http_limits.py)
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
        if self.upstream_era not in ("auto", "modern", "legacy"):
            raise ConfigError(
                f"upstream_era must be auto, modern or legacy, not {self.upstream_era!r}"
            )
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(
                f"log_level must be one of {', '.join(LOG_LEVELS)}, not {self.log_level!r}"
            )
        if self.log_format not in ("console", "json"):
            raise ConfigError(f"log_format must be console or json, not {self.log_format!r}")
        normalize_listen(self.listen)
        url = self.upstream_url
        if url is not None:
            _check_upstream_url(url)
        if url is not None and self.command:
            raise ConfigError("give the upstream as a command or as a url, not both")
        if self.http_forward_authorization and (url is None or self.listen == "stdio"):
            raise ConfigError(
                "forward_authorization needs an HTTP front (--listen HOST:PORT) "
                "and an HTTP upstream (--upstream URL)"
            )
        self._check_bounds()
        if self.state_key is not None and len(self.state_key.encode()) < 16:
            raise ConfigError("state_key must be at least 16 bytes")
        for root in self.static_roots:
            _check_root(root, _where("static_roots"))
        for key in ("name", "version"):
            if not isinstance(self.client_info.get(key), str):
                raise ConfigError(f"[upstream] client_info needs a string {key}")
        for name, value in self.upstream_headers.items():
            if not _HEADER_NAME.fullmatch(name) or not _HEADER_VALUE.fullmatch(value):
                raise ConfigError(f"[upstream] headers: {name!r} is not a valid HTTP header")
        self._check_http()
        for scope in [self.default_cache_scope, *self.cache_scope.values()]:
            if scope not in ("public", "private"):
                raise ConfigError(f"cache scope must be public or private, not {scope!r}")
        for method in [*self.cache_ttl_ms, *self.cache_scope]:
            if method not in era.CACHEABLE:
                raise ConfigError(
                    f"{method!r} is not a cacheable method ({', '.join(sorted(era.CACHEABLE))})"
                )

    def _check_bounds(self) -> None:
        """Every bound a finite number in its range: a NaN or an infinite
        timeout would be no bound, a zero idle time a busy loop."""
        positive = (
            "probe_timeout",
            "startup_timeout",
            "request_timeout",
            "listen_timeout",
            "shutdown_grace",
            "upstream_exit_grace",
            "restart_backoff_initial",
            "restart_backoff_max",
            "state_ttl",
            "http_session_idle",
            "http_header_timeout",
            "http_body_timeout",
            "http_idle_timeout",
            "http_sse_resume_window",
        )
        for name in positive:
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(
                    f"{_where(name)} must be a positive number of seconds, not {value}"
                )
        if not math.isfinite(self.input_batch_window) or self.input_batch_window < 0:
            raise ConfigError("input_batch_window must be zero or a positive number of seconds")
        for name in ("http_sse_poll_after", "http_sse_retry"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"{_where(name)} must be zero or a positive number of seconds")
        if self.restart_backoff_max < self.restart_backoff_initial:
            raise ConfigError("restart_backoff_max must not be less than restart_backoff_initial")
        at_least_one = (
            "max_sessions",
            "max_processes",
            "max_rounds",
            "max_parked_calls",
            "max_inflight_per_client",
            "http_max_sessions",
            "http_max_concurrent",
            "http_max_connections",
        )
        for name in at_least_one:
            if getattr(self, name) < 1:
                raise ConfigError(f"{_where(name)} must be at least 1")
        if self.max_message_bytes < 1024:
            raise ConfigError("max_message_bytes must be at least 1024")
        if self.http_max_header_bytes < 1024:
            raise ConfigError("[http] max_header_bytes must be at least 1024")
        for name, ttl in (
            ("default_ttl_ms", self.default_ttl_ms),
            ("notified_ttl_ms", self.notified_ttl_ms),
            *self.cache_ttl_ms.items(),
        ):
            if ttl < 0:
                raise ConfigError(f"the ttl_ms of {name} must not be negative")

    def _check_http(self) -> None:
        for host in self.http_allowed_hosts:
            try:
                authority.parse_host_name(host)
            except authority.BadAuthority as exc:
                raise ConfigError(
                    f"[http] allowed_hosts: {host!r} is not a host name: {exc}"
                ) from None
        for origin in self.http_allowed_origins:
            try:
                authority.parse_origin(origin)
            except authority.BadAuthority as exc:
                raise ConfigError(
                    f"[http] allowed_origins: {origin!r} is not scheme://host[:port]: {exc}"
                ) from None
        for table, tokens in (
            ("tokens", self.http_tokens),
            ("admin_tokens", self.http_admin_tokens),
        ):
            for name, token in tokens.items():
                if not isinstance(token, str) or not token.strip():
                    raise ConfigError(
                        f"[http] {table}: the token of {name!r} must be a non-empty string"
                    )
            if len(set(tokens.values())) < len(tokens):
                raise ConfigError(f"[http] {table}: two names share one token")


# TOML table.key -> Config field
_KEYS: dict[tuple[str, str], str] = {
    ("gateway", "listen"): "listen",
    ("gateway", "log_level"): "log_level",
    ("gateway", "log_format"): "log_format",
    ("gateway", "max_message_bytes"): "max_message_bytes",
    ("gateway", "max_inflight_per_client"): "max_inflight_per_client",
    ("gateway", "shutdown_grace"): "shutdown_grace",
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
}
_TYPES = {f.name: f.type for f in fields(Config)}
_WHERE = {name: f"[{table}] {key}" for (table, key), name in reversed(_KEYS.items())}


def _where(name: str) -> str:
    """How the operator writes a setting: its TOML key."""
    return _WHERE.get(name, name)


def load(path: str | Path | None) -> Config:
    if path is None:
        return Config()
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from None
    values: dict[str, Any] = {}
    given: dict[str, str] = {}  # setting -> the key that gave it
    for table, body in raw.items():
        if not isinstance(body, dict):
            raise ConfigError(f"top-level key {table!r} must be a table")
        for key, value in body.items():
            name = _KEYS.get((table, key))
            if name is None:
                raise ConfigError(f"unknown config key [{table}] {key}")
            where = f"[{table}] {key}"
            if name in values:
                raise ConfigError(f"{where} and {given[name]} are one setting: give one of them")
            given[name] = where
            values[name] = _coerce(name, value, where)
    cfg = Config(**values).normalized()
    cfg.check()
    return cfg


def _coerce(name: str, value: Any, where: str) -> Any:
    kind = str(_TYPES[name])
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false")
        return value
    if name == "passthrough_methods":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} must be a list of strings")
        return frozenset(value)
    if name in ("command", "replay_tools", "http_allowed_hosts", "http_allowed_origins"):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} must be a list of strings")
        if name == "command" and not value:
            raise ConfigError(f"{where} must not be empty")
        return tuple(value)
    if name == "static_roots":
        if not isinstance(value, list):
            raise ConfigError(f"{where} must be a list of paths or tables (uri, name)")
        return tuple(root_from(v, where) for v in value)
    if kind.startswith("dict"):
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a table")
        of = {"dict[str, str]": (str, "a string"), "dict[str, int]": (int, "an integer")}
        expected = of.get(kind)
        for key, item in value.items():
            if expected is not None and (
                not isinstance(item, expected[0]) or isinstance(item, bool)
            ):
                raise ConfigError(f"{where}: {key!r} must be {expected[1]}")
        return dict(value)
    if kind == "float" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind in ("str", "str | None") and isinstance(value, str):
        return value
    raise ConfigError(f"{where} has the wrong type ({type(value).__name__}, expected {kind})")


_ROOT_KEYS = frozenset({"uri", "name", "_meta"})


def root_from(value: Any, where: str) -> dict[str, Any]:
    """One configured root (2025-11-25 `Root`): a table with a `file://` uri
    and an optional name, or an absolute path, which becomes its file:// URI
    named after its last component."""
    if isinstance(value, str):
        if value.startswith("file://"):
            root: dict[str, Any] = {"uri": value}
        else:
            path = Path(value).expanduser()
            if not path.is_absolute():
                raise ConfigError(
                    f"{where}: root {value!r} must be an absolute path or a file:// URI"
                )
            root = {"uri": path.as_uri(), "name": path.name or str(path)}
    elif isinstance(value, dict):
        root = dict(value)
    else:
        raise ConfigError(f"{where}: each root is a path or a table (uri, name)")
    _check_root(root, where)
    return root


def _check_root(root: dict[str, Any], where: str) -> None:
    uri = root.get("uri")
    # 2025-11-25 and 2026-07-28 schema, Root.uri: "This *must* start with
    # file:// for now."
    if not isinstance(uri, str) or not uri.startswith("file://"):
        raise ConfigError(f"{where}: each root needs a uri starting with file://, not {uri!r}")
    if not isinstance(root.get("name", ""), str):
        raise ConfigError(f"{where}: the name of root {uri!r} must be a string")
    if not isinstance(root.get("_meta", {}), dict):
        raise ConfigError(f"{where}: the _meta of root {uri!r} must be a table")
    unknown = sorted(root.keys() - _ROOT_KEYS)
    if unknown:
        raise ConfigError(f"{where}: root {uri!r} has unknown keys {', '.join(unknown)}")
