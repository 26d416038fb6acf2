"""Sealed `requestState` tokens (2026-07-28 MRTR "Server Requirements" 4-5).

The gateway's requestState is attacker-controlled input that comes back on the
client's retry. It is an HMAC-SHA256-signed claim set binding the gateway
instance, principal, method, a digest of the original params, the parked call,
the round and an expiry. Integrity is what matters here (nothing in it is
secret from the client that supplied the answers), so a keyed MAC from the
standard library does the job without a crypto dependency.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.core import mrtr_shapes

FORMAT = "g1"
# Request fields that are MRTR plumbing, not part of what the call asks for.
_NOT_SALIENT = ("_meta", *mrtr_shapes.RETRY_PARAMS)


class StateRejected(Exception):
    """The retry's requestState cannot be honoured; the message says why,
    `reason` names the case for the client's program (`data.reason`)."""

    def __init__(self, message: str, reason: str = "request-state-rejected") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Claims:
    instance: str
    principal: str
    method: str
    digest: str
    round: int
    expires_ms: int
    # Hold mode: the parked upstream call this retry continues.
    handle: str | None = None
    # Replay mode: the answers given so far, by input key.
    answers: dict[str, Any] = field(default_factory=dict)
    # The server asked for a URL elicitation by error (-32042): re-send on retry.
    resend: bool = False
    # Names this one state, so that a state whose retry re-runs the call
    # (replay, resend) is honoured once (`ConsumedStates`).
    nonce: str | None = None


def params_digest(params: dict[str, Any] | None) -> str:
    """A digest of the salient params: what the retry must repeat exactly."""
    salient = {k: v for k, v in (params or {}).items() if k not in _NOT_SALIENT}
    return hashlib.sha256(orjson.dumps(salient, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    """Strict base64url without padding: only the encoding `_b64` produces.

    The decoder alone also takes padding, skips characters outside the
    alphabet and ignores unused trailing bits, so many strings would open as
    the same state; re-encoding and comparing leaves exactly one.
    """
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(data) != text:
        raise ValueError("not the canonical encoding")
    return data


class Sealer:
    """Seals with the first key and opens with any listed one, so that
    replicas can roll to a new key one at a time (docs/deployment.md:
    the new key is added second everywhere, then moved first, then the old
    one dropped once every state it sealed has expired)."""

    def __init__(self, keys: bytes | Sequence[bytes], instance: str) -> None:
        listed = (keys,) if isinstance(keys, bytes) else tuple(keys)
        if not listed:
            raise ValueError("the requestState needs at least one key")
        if any(len(key) < 16 for key in listed):
            raise ValueError("each requestState key must be at least 16 bytes")
        self._keys = listed
        self.instance = instance

    def _mac(self, body: bytes, key: bytes) -> bytes:
        return hmac.new(key, body, hashlib.sha256).digest()

    def _verifies(self, body: bytes, mac: bytes) -> bool:
        # Which key opened it is no secret; a MAC is compared in constant time.
        return any(hmac.compare_digest(mac, self._mac(body, key)) for key in self._keys)

    def seal(self, claims: Claims) -> str:
        body = orjson.dumps(
            {
                "i": claims.instance,
                "p": claims.principal,
                "m": claims.method,
                "d": claims.digest,
                "r": claims.round,
                "e": claims.expires_ms,
                "h": claims.handle,
                "a": claims.answers,
                "s": claims.resend,
                "n": claims.nonce,
            }
        )
        return f"{FORMAT}.{_b64(body)}.{_b64(self._mac(body, self._keys[0]))}"

    def open(
        self, token: object, *, principal: str, method: str, digest: str, now_ms: int
    ) -> Claims:
        """Verify a token against the retry that carries it; StateRejected if not."""
        if not isinstance(token, str):
            raise StateRejected("requestState must be a string")
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != FORMAT:
            raise StateRejected("requestState was not issued by this gateway")
        try:
            body, mac = _unb64(parts[1]), _unb64(parts[2])
        except (ValueError, TypeError):
            raise StateRejected("requestState is malformed") from None
        if not self._verifies(body, mac):
            raise StateRejected("requestState failed verification (tampered or another key)")
        try:
            raw = orjson.loads(body)
            claims = Claims(
                instance=raw["i"],
                principal=raw["p"],
                method=raw["m"],
                digest=raw["d"],
                round=raw["r"],
                expires_ms=raw["e"],
                handle=raw["h"],
                answers=raw["a"],
                resend=raw["s"],
                nonce=raw.get("n"),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise StateRejected("requestState is malformed") from None
        # Only a parked call lives on one instance; a state that re-runs the
        # call (replay mode, a re-send) is good on any replica with the key.
        if claims.handle is not None and claims.instance != self.instance:
            raise StateRejected(
                f"requestState was issued by another gateway instance ({claims.instance!r}; "
                f"this is {self.instance!r}); retry on the instance that issued it, or start "
                "the request afresh",
                reason="other-instance",
            )
        if claims.expires_ms <= now_ms:
            raise StateRejected("requestState has expired; start the request afresh")
        if claims.principal != principal:
            raise StateRejected("requestState belongs to another principal")
        if claims.method != method:
            raise StateRejected(f"requestState was issued for {claims.method}, not {method}")
        if claims.digest != digest:
            raise StateRejected("requestState was issued for a request with other params")
        return claims


class ConsumedStates:
    """The states this gateway has honoured whose retry re-runs the call, each
    kept until it expires, so that it is honoured once (a replayed state would
    run the tool again). Per process: see docs/mrtr.md
    for what that means across replicas.

    Bounded: at `limit` unexpired entries a new one is refused (`Full`) rather
    than an old one forgotten, which would let that state run twice.
    """

    class Full(Exception):
        pass

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._expiry: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._expiry)

    def consume(self, claims: Claims, now_ms: int) -> None:
        """Mark the state used; StateRejected if it already was, Full if no
        room is left."""
        nonce = claims.nonce
        if not isinstance(nonce, str) or not nonce:
            raise StateRejected("requestState is malformed")
        self._forget_expired(now_ms)
        if nonce in self._expiry:
            raise StateRejected(
                "requestState was already used; each state is honoured once, "
                "send the one from the latest answer"
            )
        if len(self._expiry) >= self.limit:
            raise ConsumedStates.Full(f"more than {self.limit} re-run states in use")
        self._expiry[nonce] = claims.expires_ms

    def _forget_expired(self, now_ms: int) -> None:
        # Every state lives state_ttl, so entries expire about in the order
        # they were added: the oldest go from the front until one is alive.
        while self._expiry:
            nonce, expires_ms = next(iter(self._expiry.items()))
            if expires_ms > now_ms:
                return
            del self._expiry[nonce]
