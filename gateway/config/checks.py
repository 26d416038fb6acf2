"""What makes a setting one the gateway can run with: every bound finite
and in its range, hosts, origins, URLs, headers, tokens, roots and cache
settings well formed, and no two settings at odds. Each failure is one
ConfigError whose message names the setting as the operator writes it."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from gateway import era
from gateway.config.keys import KEYS, where
from gateway.core import authority

if TYPE_CHECKING:
    from gateway.config.settings import Config

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
# RFC 9110 §5.1 field-name token; a field value without CR, LF or NUL.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_INSTANCE = re.compile(r"[A-Za-z0-9._-]{1,64}")
_HEADER_VALUE = re.compile(r"[^\r\n\x00]*")


class ConfigError(Exception):
    """A setting the gateway cannot run with; the message names it.

    `settings`: the Config fields at fault, so that the layer that gave them
    (the environment, the command line) can be named as well
    (`config.layers`)."""

    def __init__(self, message: str, *, settings: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.settings = settings


_URL = ("upstream_url",)


def _check_upstream_url(url: str) -> None:
    """http(s)://HOST[:PORT][/path], the authority as strict as a Host header."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise ConfigError(f"upstream url must be http:// or https://, not {url!r}", settings=_URL)
    if any(c.isspace() for c in url) or "#" in url:
        raise ConfigError(f"upstream url {url!r} has whitespace or a fragment", settings=_URL)
    netloc = rest.split("/", 1)[0].split("?", 1)[0]
    try:
        authority.parse_host(netloc)
    except authority.BadAuthority as exc:
        hint = " (send credentials with [upstream] headers)" if "@" in netloc else ""
        raise ConfigError(f"upstream url {url!r}: bad host: {exc}{hint}", settings=_URL) from None


def _check_redirect_origins(cfg: Config) -> None:
    """Each an http(s) origin, as a redirect's target is compared with."""
    for origin in cfg.upstream_redirect_origins:
        try:
            scheme = authority.parse_origin(origin).scheme
            if scheme not in ("http", "https"):
                raise authority.BadAuthority("not http or https")
        except authority.BadAuthority as exc:
            raise ConfigError(
                f"[upstream] redirect_origins: {origin!r} is not http(s)://host[:port]: {exc}",
                settings=("upstream_redirect_origins",),
            ) from None


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
            f"listen must be 'stdio' or HOST:PORT (e.g. 127.0.0.1:8080), not {value!r}: {exc}",
            settings=("listen",),
        ) from None
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    return f"{host}:{parsed.port}"


def check(cfg: Config) -> None:  # noqa: PLR0912 - one check per setting, in the order a reader meets them
    """ConfigError naming the first setting the gateway cannot run with."""
    if cfg.upstream_era not in ("auto", "modern", "legacy"):
        raise ConfigError(
            f"upstream_era must be auto, modern or legacy, not {cfg.upstream_era!r}",
            settings=("upstream_era",),
        )
    if cfg.log_level not in LOG_LEVELS:
        raise ConfigError(
            f"log_level must be one of {', '.join(LOG_LEVELS)}, not {cfg.log_level!r}",
            settings=("log_level",),
        )
    if cfg.log_format not in ("console", "json"):
        raise ConfigError(
            f"log_format must be console or json, not {cfg.log_format!r}", settings=("log_format",)
        )
    normalize_listen(cfg.listen)
    url = cfg.upstream_url
    if url is not None:
        _check_upstream_url(url)
    if url is not None and cfg.command:
        raise ConfigError(
            "give the upstream as a command or as a url, not both",
            settings=("command", "upstream_url"),
        )
    if cfg.http_forward_authorization and (url is None or cfg.listen == "stdio"):
        raise ConfigError(
            "forward_authorization needs an HTTP front (--listen HOST:PORT) "
            "and an HTTP upstream (--upstream URL)",
            settings=("http_forward_authorization", "listen", "upstream_url"),
        )
    _check_bounds(cfg)
    _check_state_keys(cfg)
    for root in cfg.static_roots:
        check_root(root, where("static_roots"))
    for key in ("name", "version"):
        if not isinstance(cfg.client_info.get(key), str):
            raise ConfigError(
                f"[upstream] client_info needs a string {key}", settings=("client_info",)
            )
    for name, value in cfg.upstream_headers.items():
        if not _HEADER_NAME.fullmatch(name) or not _HEADER_VALUE.fullmatch(value):
            raise ConfigError(
                f"[upstream] headers: {name!r} is not a valid HTTP header",
                settings=("upstream_headers",),
            )
    _check_redirect_origins(cfg)
    _check_http(cfg)
    if cfg.http_affinity_cookie and not _HEADER_NAME.fullmatch(cfg.http_affinity_cookie):
        raise ConfigError(
            f"[http] affinity_cookie {cfg.http_affinity_cookie!r} is not a cookie name",
            settings=("http_affinity_cookie",),
        )
    if cfg.instance_id is not None and not _INSTANCE.fullmatch(cfg.instance_id):
        # It names the replica in a cookie and in requestState.
        raise ConfigError(
            f"[mrtr] instance_id {cfg.instance_id!r} must be 1-64 letters, digits, '.', '_' or '-'",
            settings=("instance_id",),
        )
    _check_tracing(cfg)
    for scope in [cfg.default_cache_scope, *cfg.cache_scope.values()]:
        if scope not in ("public", "private"):
            raise ConfigError(
                f"cache scope must be public or private, not {scope!r}",
                settings=("default_cache_scope", "cache_scope"),
            )
    for method in [*cfg.cache_ttl_ms, *cfg.cache_scope]:
        if method not in era.CACHEABLE:
            raise ConfigError(
                f"{method!r} is not a cacheable method ({', '.join(sorted(era.CACHEABLE))})",
                settings=("cache_ttl_ms", "cache_scope"),
            )


def _check_bounds(cfg: Config) -> None:
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
        "health_interval",
        "tasks_poll_interval",
        "tasks_max_wait",
        "tasks_after",
        "tasks_ttl",
    )
    for name in positive:
        value = getattr(cfg, name)
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(
                f"{where(name)} must be a positive number of seconds, not {value}",
                settings=(name,),
            )
    if not math.isfinite(cfg.input_batch_window) or cfg.input_batch_window < 0:
        raise ConfigError(
            "input_batch_window must be zero or a positive number of seconds",
            settings=("input_batch_window",),
        )
    for name in ("http_sse_poll_after", "http_sse_retry", "drain_delay"):
        value = getattr(cfg, name)
        if not math.isfinite(value) or value < 0:
            raise ConfigError(
                f"{where(name)} must be zero or a positive number of seconds",
                settings=(name,),
            )
    if cfg.restart_backoff_max < cfg.restart_backoff_initial:
        raise ConfigError(
            "restart_backoff_max must not be less than restart_backoff_initial",
            settings=("restart_backoff_max", "restart_backoff_initial"),
        )
    at_least_one = (
        "max_sessions",
        "max_processes",
        "max_rounds",
        "max_parked_calls",
        "max_inflight_per_client",
        "http_max_sessions",
        "http_max_concurrent",
        "http_max_queued_bytes_per_principal",
        "http_max_connections",
        "tasks_max_live",
        "max_listen_uris",
    )
    for name in at_least_one:
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{where(name)} must be at least 1", settings=(name,))
    for share, total in (
        ("max_parked_per_principal", "max_parked_calls"),
        ("tasks_max_live_per_principal", "tasks_max_live"),
        ("http_max_sessions_per_principal", "http_max_sessions"),
    ):
        if not 0 <= getattr(cfg, share) <= getattr(cfg, total):
            raise ConfigError(
                f"{where(share)} must be 0 (three quarters of {where(total)}) "
                f"or a count of at most {where(total)}",
                settings=(share, total),
            )
    if cfg.max_message_bytes < 1024:
        raise ConfigError(
            "max_message_bytes must be at least 1024", settings=("max_message_bytes",)
        )
    if not 0 < cfg.max_queued_notification_bytes <= cfg.max_queued_bytes:
        raise ConfigError(
            "max_queued_notification_bytes must be more than 0 and at most max_queued_bytes",
            settings=("max_queued_notification_bytes", "max_queued_bytes"),
        )
    if cfg.http_max_header_bytes < 1024:
        raise ConfigError(
            "[http] max_header_bytes must be at least 1024", settings=("http_max_header_bytes",)
        )
    for name, ttl in (
        ("default_ttl_ms", cfg.default_ttl_ms),
        ("notified_ttl_ms", cfg.notified_ttl_ms),
        *cfg.cache_ttl_ms.items(),
    ):
        if ttl < 0:
            raise ConfigError(
                f"the ttl_ms of {name} must not be negative",
                settings=("default_ttl_ms", "notified_ttl_ms", "cache_ttl_ms"),
            )


def _check_state_keys(cfg: Config) -> None:
    # The keys are secrets: an error says which one, never what it is.
    listed = cfg.state_keys()
    if cfg.state_key is not None and not listed:
        raise ConfigError(
            "state_key must be a key or a non-empty list of keys", settings=("state_key",)
        )
    for i, key in enumerate(listed, 1):
        if len(key.encode()) < 16:
            which = "" if isinstance(cfg.state_key, str) else f" (key {i} of {len(listed)})"
            raise ConfigError(
                f"state_key must be at least 16 bytes{which}", settings=("state_key",)
            )


def _check_http(cfg: Config) -> None:
    if not isinstance(cfg.http_sse_front, bool):
        raise ConfigError(
            f"[http] sse_front must be true or false, not {cfg.http_sse_front!r}",
            settings=("http_sse_front",),
        )
    for host in cfg.http_allowed_hosts:
        try:
            authority.parse_host_name(host)
        except authority.BadAuthority as exc:
            raise ConfigError(
                f"[http] allowed_hosts: {host!r} is not a host name: {exc}",
                settings=("http_allowed_hosts",),
            ) from None
    for origin in cfg.http_allowed_origins:
        try:
            authority.parse_origin(origin)
        except authority.BadAuthority as exc:
            raise ConfigError(
                f"[http] allowed_origins: {origin!r} is not scheme://host[:port]: {exc}",
                settings=("http_allowed_origins",),
            ) from None
    for table, tokens in (
        ("tokens", cfg.http_tokens),
        ("admin_tokens", cfg.http_admin_tokens),
    ):
        setting = (KEYS["http", table],)
        for name, token in tokens.items():
            if not isinstance(token, str) or not token.strip():
                raise ConfigError(
                    f"[http] {table}: the token of {name!r} must be a non-empty string",
                    settings=setting,
                )
        if len(set(tokens.values())) < len(tokens):
            raise ConfigError(f"[http] {table}: two names share one token", settings=setting)


def _check_tracing(cfg: Config) -> None:
    ratio = cfg.tracing_sample_ratio
    if not math.isfinite(ratio) or not 0 <= ratio <= 1:
        raise ConfigError(f"[tracing] sample_ratio must be between 0 and 1, not {ratio}")
    url = cfg.tracing_otlp_endpoint
    if url is not None:
        scheme, sep, rest = url.partition("://")
        if not sep or scheme.lower() not in ("http", "https") or not rest:
            raise ConfigError(
                f"[tracing] otlp_endpoint must be an http:// or https:// URL, not {url!r}"
            )
    if cfg.tracing_service_name is not None and not cfg.tracing_service_name.strip():
        raise ConfigError("[tracing] service_name must not be empty")


_ROOT_KEYS = frozenset({"uri", "name", "_meta"})


def check_root(root: dict[str, Any], where: str) -> None:
    """One root as 2025-11-25 `Root` has it; `where` names the setting."""
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
