"""Strict parsing of the `Host` and `Origin` request headers, and the
allow-list check the HTTP front applies to them (2026-07-28 streamable-http
"Security Warning": validate `Origin`, and `Host` against DNS rebinding).

`Host` is RFC 9110 §7.2 `uri-host [ ":" port ]`, with uri-host the RFC 3986
§3.2.2 host: an IPv6 literal in brackets, a dotted-quad IPv4 address, or a
DNS-style name. Anything a lenient parser could read two ways is refused:
userinfo (`localhost:80@evil.com`), a port outside 1-65535 or empty, a path,
percent-encoding, zone ids, IPvFuture, and numbers that a browser would read
as an IPv4 address but that are not a dotted quad (`2130706433`, `127.1`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
# WHATWG URL "ends in a number": such a host is parsed as an IPv4 address.
_NUMBER = re.compile(r"[0-9]+|0x[0-9a-f]*")
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_MAX_NAME = 253
_DEFAULT_PORTS = {"http": 80, "https": 443}


class BadAuthority(ValueError):
    """The header is not a well-formed authority; the message says why."""


@dataclass(frozen=True, slots=True)
class Authority:
    host: str  # lower case; an IPv6 address without its brackets
    port: int | None = None


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    authority: Authority

    def serialize(self) -> str:
        """RFC 6454 §6.2 form: lower case, no default port."""
        host = self.authority.host
        if ":" in host:
            host = f"[{host}]"
        port = self.authority.port
        if port is None or _DEFAULT_PORTS.get(self.scheme) == port:
            return f"{self.scheme}://{host}"
        return f"{self.scheme}://{host}:{port}"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request's Host or Origin is refused, as the front answers it."""

    status: int  # 400: malformed, 403: well-formed but not allowed
    reason: str  # a short code for data.reason
    message: str


def parse_host_name(text: str) -> str:
    """A host without a port (IPv6 with or without brackets), normalised: lower
    case, no trailing dot. Raises BadAuthority."""
    if text.startswith("["):
        if not text.endswith("]"):
            raise BadAuthority("an IPv6 literal must end with ']'")
        return _ipv6(text[1:-1])
    if ":" in text:
        return _ipv6(text)
    return _name(text)


def parse_host(text: str) -> Authority:
    """A `Host` header value. Raises BadAuthority."""
    if not text:
        raise BadAuthority("empty")
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise BadAuthority("an IPv6 literal must end with ']'")
        host = _ipv6(text[1:end])
        rest = text[end + 1 :]
        if not rest:
            return Authority(host)
        if not rest.startswith(":"):
            raise BadAuthority("only ':' and a port may follow an IPv6 literal")
        return Authority(host, _port(rest[1:]))
    if "@" in text:
        raise BadAuthority("userinfo is not allowed")
    name, colon, port = text.partition(":")
    host = _name(name)
    return Authority(host, _port(port) if colon else None)


def parse_origin(text: str) -> Origin:
    """An `Origin` header value (RFC 6454 §7: scheme "://" host [":" port]).
    The opaque origin `null` is well-formed but names no host: BadAuthority
    too, so that nothing can allow it by host name."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise BadAuthority("an origin is scheme://host[:port]")
    scheme = scheme.lower()
    if not _SCHEME.fullmatch(scheme):
        raise BadAuthority("malformed scheme")
    return Origin(scheme, parse_host(rest))


def check(
    host_values: list[str],
    origin_values: list[str],
    allowed_hosts: Iterable[str],
    allowed_origins: Iterable[str],
) -> Refusal | None:
    """None if the request may go on. `*_values`: every occurrence of the
    header (two `Host` fields are a malformed request, RFC 9112 §3.2).
    `allowed_hosts` hold normalised host names (`parse_host_name`),
    `allowed_origins` serialised origins (`Origin.serialize`)."""
    if len(host_values) != 1:
        why = "is missing" if not host_values else "appears more than once"
        return Refusal(400, "malformed-host", f"Bad Request: the Host header {why}")
    try:
        host = parse_host(host_values[0])
    except BadAuthority as exc:
        return Refusal(400, "malformed-host", f"Bad Request: malformed Host header: {exc}")
    hosts = frozenset(allowed_hosts)
    if host.host not in hosts:
        return Refusal(403, "host-not-allowed", f"Forbidden: host {host.host!r} is not allowed")
    if not origin_values:
        return None
    if len(origin_values) > 1:
        return Refusal(400, "malformed-origin", "Bad Request: the Origin header appears twice")
    try:
        origin = parse_origin(origin_values[0])
    except BadAuthority:
        return Refusal(
            403,
            "origin-not-allowed",
            f"Forbidden: origin {origin_values[0][:100]!r} is not allowed",
        )
    if origin.serialize() in frozenset(allowed_origins) or origin.authority.host in hosts:
        return None
    return Refusal(
        403, "origin-not-allowed", f"Forbidden: origin {origin.serialize()!r} is not allowed"
    )


def _ipv6(text: str) -> str:
    if "%" in text or text.lower().startswith("v"):
        raise BadAuthority("zone ids and IPvFuture literals are not accepted")
    try:
        return str(ipaddress.IPv6Address(text))
    except ipaddress.AddressValueError:
        raise BadAuthority("malformed IPv6 literal") from None


def _name(text: str) -> str:
    name = text.lower()
    if name.endswith("."):  # the absolute form names the same host
        name = name[:-1]
    if not name or len(name) > _MAX_NAME:
        raise BadAuthority("empty or over-long host name")
    if _NUMBER.fullmatch(name.rsplit(".", 1)[-1]):
        try:
            return str(ipaddress.IPv4Address(name))
        except ipaddress.AddressValueError:
            # Browsers read 127.1, 0x7f.1 or 2130706433 as an IPv4 address.
            raise BadAuthority("a numeric host must be a dotted-quad IPv4 address") from None
    if not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise BadAuthority("a host name is dot-separated letters, digits, '-' and '_'")
    return name


def _port(text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 5 or not 0 < int(text) < 65536:
        raise BadAuthority("the port must be a number from 1 to 65535")
    return int(text)
