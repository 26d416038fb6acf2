"""Who may use the HTTP front: Host and Origin (2026-07-28 streamable-http
"Security Warning"), bearer tokens and the principals they name, and who may
read /metrics and the /readyz details."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from gateway import wire
from gateway.config import Config
from gateway.core import authority
from gateway.fronts.asgi import Scope
from gateway.fronts.http_answers import HttpError, all_values, bearer

# Host/Origin verdicts remembered: how many, and the longest pair remembered.
_VERDICTS_MAX = 256
_VERDICT_KEY_MAX = 512


class HttpAccess:
    def __init__(self, config: Config, remember_credential: Callable[[str, str], None]) -> None:
        self.config = config
        self._remember_credential = remember_credential
        # Config.check has parsed them, so they are well-formed here.
        self._allowed_hosts = frozenset(
            authority.parse_host_name(host) for host in config.http_allowed_hosts
        )
        self._allowed_origins = frozenset(
            authority.parse_origin(origin).serialize() for origin in config.http_allowed_origins
        )
        self._host_verdicts: dict[tuple[str | None, str | None], authority.Refusal | None] = {}
        # Requests in progress per principal (http_max_concurrent).
        self.busy: dict[str, int] = {}

    def check_host(self, scope: Scope, headers: dict[str, str]) -> None:
        """Host and Origin, parsed strictly: 400 when malformed, 403 when not allowed."""
        if len(headers) < len(scope["headers"]):
            # Some field came twice (`headers` kept the last): judge them all.
            refusal = self._judge_host(all_values(scope, b"host"), all_values(scope, b"origin"))
        else:
            refusal = self._judge_host_once(headers.get("host"), headers.get("origin"))
        if refusal is not None:
            raise HttpError(refusal.status, refusal.message, reason=refusal.reason)

    def _judge_host_once(self, host: str | None, origin: str | None) -> authority.Refusal | None:
        """The verdict on one Host and Origin pair, remembered for the few
        pairs real clients send (bounded: short pairs, a few hundred)."""
        key = (host, origin)
        try:
            return self._host_verdicts[key]
        except KeyError:
            pass
        verdict = self._judge_host(
            [] if host is None else [host], [] if origin is None else [origin]
        )
        if len(host or "") + len(origin or "") <= _VERDICT_KEY_MAX:
            if len(self._host_verdicts) >= _VERDICTS_MAX:
                self._host_verdicts.clear()
            self._host_verdicts[key] = verdict
        return verdict

    def _judge_host(self, hosts: list[str], origins: list[str]) -> authority.Refusal | None:
        return authority.check(hosts, origins, self._allowed_hosts, self._allowed_origins)

    def check_admin(self, headers: dict[str, str]) -> None:
        """/metrics and /readyz details: with tokens configured, a bearer token
        of `[http] admin_tokens`, or of `[http] tokens` when there are none."""
        tokens = self.config.http_admin_tokens or self.config.http_tokens
        if tokens:
            bearer(headers, tokens)

    def may_read_details(self, scope: Scope, headers: dict[str, str]) -> bool:
        try:
            self.check_host(scope, headers)
            self.check_admin(headers)
        except HttpError:
            return False
        return True

    def principal(self, headers: dict[str, str]) -> str:
        principal = self._token_principal(headers)
        credential = headers.get("authorization")
        if self.config.http_forward_authorization and credential:
            if principal is None:
                # The upstream judges the credential: each one is a principal
                # of its own, so no two share a session or a requestState.
                digest = hashlib.sha256(credential.encode()).hexdigest()[:32]
                principal = f"credential:{digest}"
            self._remember_credential(principal, credential)
        # "local": the principal of the session the gateway opens at start-up,
        # so the first HTTP client does not need a process of its own.
        return principal or "local"

    def _token_principal(self, headers: dict[str, str]) -> str | None:
        tokens = self.config.http_tokens
        if not tokens:
            return None
        return bearer(headers, tokens)

    def begin(self, principal: str, msg_id: wire.RequestId) -> None:
        """Count a request against its principal's `http_max_concurrent`
        (429 beyond it); the caller calls end() on every way out."""
        busy = self.busy.get(principal, 0)
        if busy >= self.config.http_max_concurrent:
            raise HttpError(429, "Too many requests in progress", wire.INTERNAL_ERROR, msg_id)
        self.busy[principal] = busy + 1

    def end(self, principal: str) -> None:
        left = self.busy[principal] - 1
        if left:
            self.busy[principal] = left
        else:
            del self.busy[principal]
