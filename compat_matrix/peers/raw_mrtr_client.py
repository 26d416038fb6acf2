"""Modern-only MRTR client with no SDK (stdlib only; runs under any python3).

    python3 compat_matrix/peers/raw_mrtr_client.py \
        [--feature elicitation-form|elicitation-url|sampling|roots|all|elicitation-url-required] \
        [--elicit-action accept|decline|cancel] [--check-errors] [--check-binding] \
        [--timeout S] \
        (--url URL | -- SERVER_COMMAND ARGS...)

Multi round-trip requests by hand, as the 2026-07-28 spec words them: declare
elicitation (form+url), sampling and roots in `_meta`, `server/discover`, call
the feature's tool; on `resultType: "input_required"` answer every
`inputRequests` entry by its method and retry with a NEW id, `inputResponses`
and the exact `requestState` (omitted when the server sent none), for at most
MAX_ROUNDS rounds; the final result must be `complete` and carry the answer.
The modern wire has no -32042: `elicitation-url-required` (a legacy server's
-32042) must reach this client as `input_required` with URL elicitations.

`--check-errors`: on the first call that gets a `requestState`, retry once
with a tampered copy and expect `-32602` (spec: MUST reject state that fails
verification); the correct retry that follows must still succeed.
`--check-binding` (same call, gateway hold mode, DESIGN 5.1.7): before the
correct retry, present the state with other arguments, and after it, replay
the consumed state; both must get `-32602`. A stateless modern server may
accept both (the spec makes binding a SHOULD and single use optional).

`--url URL`: the same over Streamable HTTP (raw_modern_client.HttpPeer).
"""

from __future__ import annotations

import time
from typing import Any

from _common import Report, start_watchdog
from _mrtr_common import (
    ROOT_NAME,
    ROOT_URI,
    SAMPLED_TEXT,
    Call,
    Options,
    all_text,
    elicit_answer,
    parse_args,
    plan,
    result_matches,
    server_kind,
)
from raw_modern_client import Connection, RpcError, open_peer

VERSION = "2026-07-28"
MAX_ROUNDS = 8
INVALID_PARAMS = -32602
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {
        "elicitation": {"form": {}, "url": {}},
        "sampling": {},
        "roots": {},
    },
    "io.modelcontextprotocol/clientInfo": {"name": "raw-mrtr-client", "version": "0.1.0"},
}


def answer(request: dict[str, Any], action: str) -> dict[str, Any]:
    """The client's result for one embedded input request, by its method."""
    method = request.get("method")
    if method == "elicitation/create":
        return elicit_answer(action, (request.get("params") or {}).get("mode"))
    if method == "sampling/createMessage":
        return {
            "role": "assistant",
            "content": {"type": "text", "text": SAMPLED_TEXT},
            "model": "raw-mrtr-client",
            "stopReason": "endTurn",
        }
    if method == "roots/list":
        return {"roots": [{"uri": ROOT_URI, "name": ROOT_NAME}]}
    raise ValueError(f"unsupported input request method {method!r}")


def tampered(state: str) -> str:
    """The same state with one character changed in the middle."""
    i = len(state) // 2
    return state[:i] + ("A" if state[i] != "A" else "B") + state[i + 1 :]


def retry_params(call: Call, responses: dict[str, Any], state: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {"_meta": META, "name": call.tool, "arguments": call.arguments}
    params["inputResponses"] = responses
    if state is not None:
        params["requestState"] = state
    return params


def error_of(peer: Connection, params: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON-RPC error a tools/call gets, or None if it succeeded."""
    try:
        peer.request("tools/call", params)
    except RpcError as exc:
        return exc.error
    return None


def expect_invalid_params(
    peer: Connection, report: Report, name: str, params: dict[str, Any]
) -> None:
    error = error_of(peer, params)
    report.step(name, (error or {}).get("code") == INVALID_PARAMS, error=error)


def check_before_retry(
    peer: Connection, report: Report, opts: Options, retry: dict[str, Any]
) -> None:
    """Wrong variants of a correct retry; each must be refused without harm."""
    state = retry["requestState"]
    if opts.check_errors:
        bad = dict(retry, requestState=tampered(state))
        expect_invalid_params(peer, report, "tampered requestState rejected", bad)
    if opts.check_binding:
        other = dict(retry, arguments={**retry["arguments"], "other": 1})
        expect_invalid_params(peer, report, "requestState with other arguments rejected", other)


def run_call(peer: Connection, report: Report, call: Call, opts: Options, checks: bool) -> bool:
    """One feature: call, answer input_required rounds, check the final result.
    With `checks`, the first retry that carries a state gets the requestState
    checks; returns whether they ran."""
    params: dict[str, Any] = {"_meta": META, "name": call.tool, "arguments": call.arguments}
    rounds: list[dict[str, Any]] = []
    checked: dict[str, Any] | None = None  # the retry the checks ran on
    try:
        result = peer.request("tools/call", params)
        while result.get("resultType") == "input_required" and len(rounds) < MAX_ROUNDS:
            requests: dict[str, Any] = result.get("inputRequests") or {}
            state = result.get("requestState")
            methods = {key: request.get("method") for key, request in requests.items()}
            rounds.append({"inputRequests": methods, "requestState": state is not None})
            responses = {key: answer(request, opts.action) for key, request in requests.items()}
            params = retry_params(call, responses, state)
            if checks and checked is None and state is not None:
                check_before_retry(peer, report, opts, params)
                checked = params
            result = peer.request("tools/call", params)
        if opts.check_binding and checked is not None and result.get("resultType") == "complete":
            # The state of a call that has completed must not be accepted again.
            expect_invalid_params(peer, report, "replayed requestState rejected", checked)
    except (RpcError, ValueError) as exc:
        detail = exc.error if isinstance(exc, RpcError) else str(exc)
        report.step(f"{call.feature}: {call.tool}", False, error=detail, rounds=rounds)
        return checked is not None
    text = all_text(result.get("content"))
    complete = result.get("resultType") == "complete"
    report.step(
        f"{call.feature}: {call.tool}",
        complete and result_matches(call, opts.action, text, bool(result.get("isError"))),
        resultType=result.get("resultType"),
        text=text,
        isError=result.get("isError"),
        rounds=rounds,
    )
    return checked is not None


def converse(peer: Connection, report: Report, opts: Options) -> None:
    try:
        discover = peer.request("server/discover", {"_meta": META})
    except RpcError as exc:
        report.step("server/discover", False, error=exc.error)
        report.fail(f"server/discover failed, server is not modern: {exc}")
        return
    versions = discover.get("supportedVersions") or []
    if not report.step("server/discover", VERSION in versions, supportedVersions=versions):
        report.fail(f"server does not support {VERSION}")
        return

    tools = peer.request("tools/list", {"_meta": META}).get("tools") or []
    names = {str(tool.get("name")) for tool in tools}
    kind = server_kind(names)
    report.step("tools/list", kind != "unknown", server=kind, tools=sorted(names))

    checks = opts.check_errors or opts.check_binding  # on the first call with a state
    for feature in opts.features:
        call = plan(kind, feature, opts.action)
        listed = report.step(f"{feature}: {call.tool} listed", call.tool in names)
        if listed and run_call(peer, report, call, opts, checks):
            checks = False
    if checks:
        report.step("requestState checks ran (a call returned a requestState)", False)
    if peer.unexpected:
        report.step("no server-to-client requests or junk", False, unexpected=peer.unexpected[:5])


def main() -> None:
    opts = parse_args(__doc__.splitlines()[0], check_errors=True)
    report = Report(era="modern")
    start_watchdog(report, opts.timeout)
    peer: Connection | None = None
    try:
        peer = open_peer(opts.server, opts.url, time.monotonic() + opts.timeout)
        converse(peer, report, opts)
    except (RpcError, TimeoutError, EOFError, OSError) as exc:
        report.fail(f"{type(exc).__name__}: {exc}")
    finally:
        if peer is not None:
            peer.close()
    report.finish()


if __name__ == "__main__":
    main()
