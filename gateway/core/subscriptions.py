"""`subscriptions/listen` for legacy servers (2026-07-28 basic/patterns/
subscriptions; DESIGN §5.1.9): the filter, what a legacy server can honour,
who listens to what, and which URIs the shared upstream session must be
subscribed to. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway import era, wire

LIST_CHANGED = {
    "toolsListChanged": ("tools", "notifications/tools/list_changed"),
    "promptsListChanged": ("prompts", "notifications/prompts/list_changed"),
    "resourcesListChanged": ("resources", "notifications/resources/list_changed"),
}
UPDATED = "notifications/resources/updated"


class BadFilter(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Filter:
    kinds: frozenset[str] = frozenset()  # keys of LIST_CHANGED
    uris: tuple[str, ...] = ()

    def as_params(self) -> dict[str, Any]:
        out: dict[str, Any] = {kind: True for kind in sorted(self.kinds)}
        if self.uris:
            out["resourceSubscriptions"] = list(self.uris)
        return out


def parse_filter(params: dict[str, Any] | None) -> Filter:
    raw = (params or {}).get("notifications", {})
    if not isinstance(raw, dict):
        raise BadFilter("notifications must be an object")
    kinds = set()
    for key in LIST_CHANGED:
        value = raw.get(key)
        if value is not None and not isinstance(value, bool):
            raise BadFilter(f"notifications.{key} must be a boolean")
        if value:
            kinds.add(key)
    uris = raw.get("resourceSubscriptions", [])
    if not isinstance(uris, list) or not all(isinstance(u, str) for u in uris):
        raise BadFilter("notifications.resourceSubscriptions must be an array of strings")
    return Filter(frozenset(kinds), tuple(dict.fromkeys(uris)))


def supported(wanted: Filter, server_caps: dict[str, Any]) -> Filter:
    """The subset a legacy server can deliver: list_changed kinds it declares
    `listChanged` for, and resource updates if it declares `subscribe`."""
    kinds = frozenset(
        k
        for k in wanted.kinds
        if isinstance(server_caps.get(LIST_CHANGED[k][0]), dict)
        and server_caps[LIST_CHANGED[k][0]].get("listChanged")
    )
    resources = server_caps.get("resources")
    can_subscribe = isinstance(resources, dict) and bool(resources.get("subscribe"))
    return Filter(kinds, wanted.uris if can_subscribe else ())


# Which capability says a cacheable list can notify its changes.
_NOTIFIED_BY = {
    "tools/list": "tools",
    "prompts/list": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resources",
}


def notifies_changes(method: str, server_caps: dict[str, Any]) -> bool:
    kind = _NOTIFIED_BY.get(method)
    caps = server_caps.get(kind) if kind else None
    return isinstance(caps, dict) and bool(caps.get("listChanged"))


def subscription_id(msg: wire.Message) -> object:
    """The subscription id a modern server's notification carries, if any."""
    meta = (msg.get("params") or {}).get("_meta")
    return meta.get(era.SUBSCRIPTION_ID) if isinstance(meta, dict) else None


def tagged(msg: wire.Message, subscription_id: wire.RequestId) -> wire.Message:
    """A notification as it goes out on a subscription, its id in `_meta`."""
    params = dict(msg.get("params") or {})
    params["_meta"] = {**(params.get("_meta") or {}), era.SUBSCRIPTION_ID: subscription_id}
    return wire.notification(msg["method"], params)


def acknowledgement(filter_: Filter, subscription_id: wire.RequestId) -> wire.Message:
    return wire.notification(
        "notifications/subscriptions/acknowledged",
        {
            "_meta": {era.SUBSCRIPTION_ID: subscription_id},
            "notifications": filter_.as_params(),
        },
    )


def closing_result(subscription_id: wire.RequestId) -> dict[str, Any]:
    """ "Graceful Closure": the listen request's own answer when the server ends it."""
    return {"resultType": "complete", "_meta": {era.SUBSCRIPTION_ID: subscription_id}}


@dataclass(eq=False)
class Listener:
    owner: object
    subscription_id: wire.RequestId
    filter: Filter

    def wants(self, msg: wire.Message) -> bool:
        method = msg.get("method")
        if method == UPDATED:
            return (msg.get("params") or {}).get("uri") in self.filter.uris
        return any(LIST_CHANGED[k][1] == method for k in self.filter.kinds)


@dataclass
class SubscriptionTable:
    """Listeners, and how many of them want each URI (one upstream
    subscription per URI, however many listeners share it)."""

    listeners: list[Listener] = field(default_factory=list)
    uri_refs: dict[str, int] = field(default_factory=dict)

    def add(self, listener: Listener) -> list[str]:
        """Register; the URIs to subscribe upstream now."""
        self.listeners.append(listener)
        new = []
        for uri in listener.filter.uris:
            self.uri_refs[uri] = self.uri_refs.get(uri, 0) + 1
            if self.uri_refs[uri] == 1:
                new.append(uri)
        return new

    def remove(self, listener: Listener) -> list[str]:
        """Unregister; the URIs nobody wants any more (unsubscribe upstream)."""
        if listener not in self.listeners:
            return []
        self.listeners.remove(listener)
        gone = []
        for uri in listener.filter.uris:
            self.uri_refs[uri] -= 1
            if self.uri_refs[uri] == 0:
                del self.uri_refs[uri]
                gone.append(uri)
        return gone

    def matching(self, msg: wire.Message) -> list[Listener]:
        return [listener for listener in self.listeners if listener.wants(msg)]
