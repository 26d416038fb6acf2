"""The credentials the gateway forwards upstream ([http] forward_authorization)
and what a refused one means."""

from __future__ import annotations

from collections import OrderedDict

from gateway import wire
from gateway.core import http_binding
from gateway.upstream_errors import UpstreamUnauthorized

# A principal's credential is kept to open its sessions (never logged or
# written anywhere); past this many principals the oldest go first.
CREDENTIALS_KEPT = 4096


class CredentialStore:
    """The Authorization value to forward for each principal, most recently
    given last (the HTTP front names principals so that one principal has
    one credential)."""

    def __init__(self, kept: int = CREDENTIALS_KEPT) -> None:
        self._kept = kept
        self._by_principal: OrderedDict[str, str] = OrderedDict()

    def remember(self, principal: str, credential: str) -> None:
        self._by_principal[principal] = credential
        self._by_principal.move_to_end(principal)
        if len(self._by_principal) > self._kept:
            self._by_principal.popitem(last=False)

    def __contains__(self, principal: object) -> bool:
        return principal in self._by_principal

    def __len__(self) -> int:
        return len(self._by_principal)

    def headers_for(self, principal: str) -> dict[str, str] | None:
        """The headers that carry `principal`'s credential upstream, if any."""
        credential = self._by_principal.get(principal)
        return {"Authorization": credential} if credential else None


def check_reply(reply: wire.Message) -> None:
    """UpstreamUnauthorized if the upstream refused the credential (an HTTP
    401/403): such a reply says nothing about the era or the call."""
    if http_binding.auth_refusal(reply) is not None:
        raise UpstreamUnauthorized(reply)
