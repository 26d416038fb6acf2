"""The MRTR bridge's protocol logic (2026-07-28 basic/patterns/mrtr; DESIGN
§5.1.6-5.1.8, §5.2.5). Pure: the runtime feeds it server requests, retries
and answers, and does the waiting.

Two directions:
- A legacy server's `sampling/createMessage`, `elicitation/create` and
  `roots/list` become `inputRequests` of an `input_required` answer to the
  modern client (core/held_call.py for the parked call, `replay_key` for
  replay mode).
- A modern server's `input_required` becomes server requests to a legacy
  client (`requests_for_legacy_client`, `legacy_answer_to_input_response`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway import era, wire
from gateway.core.request_state import Claims, Sealer, StateRejected

__all__ = ["Claims", "Prefilled", "Sealer", "StateRejected"]

REPLAY_PREFIX = "replay-"
ELICIT_ACTIONS = frozenset({"accept", "decline", "cancel"})
# URL mode and elicitationId arrived in 2025-11-25 (2025-11-25 changelog).
URL_ELICITATION_SINCE = "2025-11-25"


def elicitation_mode(params: dict[str, Any] | None) -> str:
    mode = (params or {}).get("mode")
    return mode if isinstance(mode, str) else "form"


def client_supports(caps: dict[str, Any], method: str, params: dict[str, Any] | None) -> bool:
    """Whether declared client capabilities cover a server request.

    2025-11-25 "Elicitation": an empty `elicitation` object means form mode only.
    """
    feature = era.CLIENT_FEATURE_METHODS.get(method)
    if feature is None:
        return False
    declared = caps.get(feature)
    if not isinstance(declared, dict):
        return False
    if method != "elicitation/create":
        return True
    if elicitation_mode(params) == "url":
        return "url" in declared
    return "form" in declared or "url" not in declared


def response_problem(method: str, response: object) -> str | None:
    """Why a client's answer to an input request is malformed, or None."""
    if not isinstance(response, dict):
        return "must be an object"
    if method == "elicitation/create":
        if response.get("action") not in ELICIT_ACTIONS:
            return 'needs "action": "accept", "decline" or "cancel"'
        content = response.get("content")
        if content is not None and not isinstance(content, dict):
            return '"content" must be an object'
    elif method == "sampling/createMessage":
        if "content" not in response or not isinstance(response.get("role"), str):
            return 'needs "role" and "content" (a CreateMessageResult)'
    elif method == "roots/list" and not isinstance(response.get("roots"), list):
        return 'needs a "roots" array (a ListRootsResult)'
    return None


@dataclass(slots=True)
class Ask:
    """One server request waiting for the client's answer."""

    key: str
    upstream_id: wire.RequestId
    method: str
    params: dict[str, Any]
    # URL elicitations of 2025-11-25 carry an id that modern clients never see.
    elicitation_id: str | None = None

    def as_input_request(self) -> dict[str, Any]:
        return {"method": self.method, "params": self.params}


def ask_from_server_request(key: str, msg: wire.Message) -> Ask:
    params = dict(msg.get("params") or {})
    elicitation_id = None
    if msg["method"] == "elicitation/create" and "elicitationId" in params:
        elicitation_id = params.pop("elicitationId")
    return Ask(key, msg["id"], msg["method"], params, elicitation_id)


@dataclass(slots=True)
class RetryOutcome:
    answers: list[tuple[Ask, dict[str, Any]]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def required_capability(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """The `requiredCapabilities` of a -32021 for a server request (2026-07-28
    "Per-request protocol fields": MissingRequiredClientCapabilityError)."""
    feature = era.CLIENT_FEATURE_METHODS.get(method, method)
    if method == "elicitation/create":
        return {"elicitation": {elicitation_mode(params): {}}}
    return {feature: {}}


@dataclass(frozen=True, slots=True)
class MissingCapability:
    """A server request the client cannot take: processing the call needs a
    capability the client did not declare."""

    required: dict[str, Any]
    reason: str

    def error(self, msg_id: wire.RequestId) -> wire.Message:
        return wire.error_response(
            msg_id,
            wire.MISSING_REQUIRED_CLIENT_CAPABILITY,
            f"Missing required client capability: {self.reason}",
            {"requiredCapabilities": self.required},
        )


def check_capability(
    caps: dict[str, Any], method: str, params: dict[str, Any] | None
) -> MissingCapability | None:
    if client_supports(caps, method, params):
        return None
    what = era.CLIENT_FEATURE_METHODS.get(method, method)
    if method == "elicitation/create":
        what = f"elicitation ({elicitation_mode(params)} mode)"
    return MissingCapability(
        required_capability(method, params),
        f"the server asked for {method}, and the client did not declare the {what} capability",
    )


@dataclass(frozen=True, slots=True)
class Prefilled:
    """Replay mode: a server request the client already answered in an earlier round."""

    result: dict[str, Any]


# -- replay mode (DESIGN §5.1.8) --------------------------------------------------


def merge_replay_answers(claims: Claims, input_responses: object) -> dict[str, Any]:
    """Replay mode: the answers so far plus the retry's new ones.

    Keys that are not replay keys were never asked and are ignored; a
    malformed answer is caught when the re-run meets its request.
    """
    if input_responses is None:
        input_responses = {}
    if not isinstance(input_responses, dict):
        raise StateRejected("inputResponses must be an object", reason="input-responses")
    merged = dict(claims.answers)
    merged.update({k: v for k, v in input_responses.items() if k.startswith(REPLAY_PREFIX)})
    return merged


def replay_key(method: str, params: dict[str, Any] | None) -> str:
    """A server request's identity across re-runs of the same call: a
    deterministic tool asks the same questions, so their digest is the key."""
    body = orjson.dumps([method, params or {}], option=orjson.OPT_SORT_KEYS)
    return REPLAY_PREFIX + hashlib.sha256(body).hexdigest()[:20]


# -- URL elicitation required, 2025-11-25 (-32042) --------------------------------


def url_elicitations(error: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The URL elicitations a -32042 error asks for, elicitationId removed."""
    data = error.get("data")
    items = data.get("elicitations") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        return None
    out = []
    for item in items:
        if not isinstance(item, dict):
            return None
        params = {k: v for k, v in item.items() if k != "elicitationId"}
        params.setdefault("mode", "url")
        out.append(params)
    return out


def url_refusal(input_responses: object) -> str | None:
    """Why the answers to -32042's URL elicitations do not allow a re-send:
    None when every one was accepted."""
    if not isinstance(input_responses, dict) or not input_responses:
        return "no answer was given"
    for key, answer in input_responses.items():
        problem = response_problem("elicitation/create", answer)
        if problem is not None:
            return f"inputResponses[{key!r}] {problem}"
        if answer["action"] != "accept":
            return f"the user chose {answer['action']}"
    return None


# -- modern server → legacy client (DESIGN §5.2.5) ---------------------------------


def requests_for_legacy_client(
    input_requests: object,
    caps: dict[str, Any],
    version: str,
    new_elicitation_id: Callable[[], str],
) -> dict[str, wire.Message] | str:
    """The server requests to send a legacy client, by input key; or why not.

    URL elicitations without one get an `elicitationId` from
    `new_elicitation_id` (2025-11-25 requires one; the caller mints it);
    clients older than 2025-11-25 never see URL mode.
    """
    if not isinstance(input_requests, dict):
        return "the server's inputRequests is not an object"
    out: dict[str, wire.Message] = {}
    for key, request in input_requests.items():
        if not isinstance(request, dict) or not isinstance(request.get("method"), str):
            return f"the server's inputRequests[{key!r}] is not a request"
        method = request["method"]
        params = request.get("params")
        params = dict(params) if isinstance(params, dict) else {}
        if method not in era.CLIENT_FEATURE_METHODS:
            return f"the server asked for {method}, which is no client request"
        url_mode = method == "elicitation/create" and elicitation_mode(params) == "url"
        if url_mode and version < URL_ELICITATION_SINCE:
            return f"the server needs a URL elicitation, which protocol {version} does not have"
        if not client_supports(caps, method, params):
            return f"the server needs {method}, which the client did not declare"
        if url_mode and "elicitationId" not in params:
            params["elicitationId"] = new_elicitation_id()
        out[key] = {"method": method, "params": params}
    return out
