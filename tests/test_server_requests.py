"""Who answers a legacy server's request to its client, as playbooks
(DESIGN §5.1.5-5.1.6; 2026-07-28 basic/patterns/mrtr; issue #11 item 1):
no sockets, no sleeps. End-to-end wiring stays in test_service.py and
test_mrtr_bridge.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import wire
from gateway.core.engine import Command, Log
from gateway.core.server_requests import (
    AskClient,
    Claim,
    FailClientCall,
    HandToHeldCall,
    OwnerCall,
    RespondToServer,
    ServerRequestArrived,
    ServerRequests,
    ServerRequestSettings,
)
from tests.playbook import Playbook, matching


@dataclass(eq=False)
class Client:
    """A client as the engine sees it (the runtime's ClientLink)."""

    session: object | None = None
    features: frozenset[str] = field(default_factory=frozenset)

    def declared(self, feature: str) -> bool:
        return self.session is not None and feature in self.features


LEGACY_SAMPLER = Client(session="legacy", features=frozenset({"sampling", "roots"}))
LEGACY_PLAIN = Client(session="legacy")
MODERN = Client()
ROOTS = ({"uri": "file:///srv", "name": "srv"},)

SAMPLE = wire.request(
    7, "sampling/createMessage", {"messages": [], "maxTokens": 10, "_meta": {"x": 1}}
)
ELICIT = wire.request(8, "elicitation/create", {"message": "name?", "requestedSchema": {}})
LIST_ROOTS = wire.request(9, "roots/list")
PING = wire.request(10, "ping")


def desk(**overrides: Any) -> ServerRequests[Client]:
    base: dict[str, Any] = {"max_waiting": 4, "static_roots": ()}
    return ServerRequests(ServerRequestSettings(**{**base, **overrides}))


def arrived(msg: wire.Message, claim: Claim[Client], **facts: Any) -> ServerRequestArrived[Client]:
    return ServerRequestArrived(msg, claim, **facts)


def alone(client: Client, *calls: OwnerCall) -> Claim[Client]:
    """The one client with calls on the session, holding no lease."""
    return Claim(None, None, client, calls)


def refused(msg_id: wire.RequestId, why: str) -> RespondToServer:
    return RespondToServer(
        {
            "jsonrpc": "2.0",
            "id": msg_id,
            "error": {"code": wire.METHOD_NOT_FOUND, "message": matching(why)},
        }
    )


# -- to a legacy client ---------------------------------------------------------------


def test_a_request_goes_to_the_legacy_client_that_declared_the_feature() -> None:
    """DESIGN §5.1.5: legacy client, legacy server: the request is the client's,
    passed on whole (`_meta` and unknown fields included)."""
    assert (
        Playbook(desk())
        >> arrived(SAMPLE, alone(LEGACY_SAMPLER))
        << AskClient(LEGACY_SAMPLER, SAMPLE)
    )


def test_a_legacy_client_that_did_not_declare_it_is_not_asked() -> None:
    """A client MUST declare sampling to be asked for it (2025-11-25
    client/sampling "Capabilities"): the server gets -32601 naming why."""
    assert (
        Playbook(desk())
        >> arrived(SAMPLE, alone(LEGACY_PLAIN))
        << refused(7, "did not declare the sampling capability")
    )


def test_the_exclusive_lease_holder_owns_the_request_over_other_clients() -> None:
    """DESIGN §5.1.6: a legacy client holding the session alone is its owner,
    though other clients have calls on the session."""
    claim = Claim(None, LEGACY_SAMPLER, None)
    assert Playbook(desk()) >> arrived(SAMPLE, claim) << AskClient(LEGACY_SAMPLER, SAMPLE)


def test_no_single_owner_is_a_refusal() -> None:
    """Two clients with calls on a shared legacy session, none holding it:
    nothing on the wire says whose the request is, so the gateway does not guess."""
    assert (
        Playbook(desk())
        >> arrived(ELICIT, Claim(None, None, None))
        << refused(8, "no single client call it can belong to")
    )


# -- to a modern client's call ------------------------------------------------------------


def test_the_held_call_holding_the_session_owns_the_request() -> None:
    """DESIGN §5.1.6: a bridged modern call holding the lease turns it into
    input_required (the MRTR bridge takes it from here)."""
    claim = Claim("held-1", None, MODERN)
    assert Playbook(desk()) >> arrived(ELICIT, claim) << HandToHeldCall("held-1", ELICIT)


def test_a_held_call_is_not_failed_for_the_sessions_roots() -> None:
    """Roots are the session's, not a call's (2025-11-25 client/roots: a
    server asks at start and on list_changed). server-everything asks 350 ms
    after `initialized`, inside whatever call then runs: a held call of a
    client that declared elicitation but not roots (holding the session's
    lease) is not failed -32021 for it. The server is refused, or answered
    from `[upstream] roots`; the call goes on."""
    call = OwnerCall(41, "tools/call", "client-7")
    held = Claim("held-1", None, MODERN, (call,), frozenset({"elicitation"}))
    session = frozenset({"elicitation", "sampling", "roots"})
    assert (
        Playbook(desk())
        >> arrived(LIST_ROOTS, held, session_features=session)
        << refused(9, "roots belong to the session")
    )
    assert (
        Playbook(desk(static_roots=ROOTS))
        >> arrived(LIST_ROOTS, held, session_features=session)
        << RespondToServer(wire.result_response(9, {"roots": list(ROOTS)}))
    )
    # Its own input still goes to it; and roots, once its client declared them.
    assert (
        Playbook(desk())
        >> arrived(ELICIT, held, session_features=session)
        << HandToHeldCall("held-1", ELICIT)
    )
    rooted = Claim("held-1", None, MODERN, (call,), frozenset({"elicitation", "roots"}))
    assert (
        Playbook(desk())
        >> arrived(LIST_ROOTS, rooted, session_features=session)
        << HandToHeldCall("held-1", LIST_ROOTS)
    )


def test_the_one_modern_call_that_cannot_take_it_fails_with_32021() -> None:
    """2026-07-28 basic/patterns/mrtr: a server needing a client capability the
    request did not declare answers -32021 with requiredCapabilities; the
    gateway does so for the legacy server, and refuses the server's request."""
    call = OwnerCall(41, "tools/call", "client-7")
    assert (
        Playbook(desk())
        >> arrived(SAMPLE, alone(MODERN, call))
        << refused(7, "did not declare the sampling capability")
        << FailClientCall(
            41,
            {
                "jsonrpc": "2.0",
                "id": "client-7",
                "error": {
                    "code": wire.MISSING_REQUIRED_CLIENT_CAPABILITY,
                    "message": matching("Missing required client capability"),
                    "data": {"requiredCapabilities": {"sampling": {}}},
                },
            },
        )
    )


def test_a_request_on_the_get_stream_fails_no_call() -> None:
    """2025-11-25 transports: messages on the GET stream SHOULD be unrelated to
    running requests, so the one call in progress is not failed for it."""
    call = OwnerCall(41, "tools/call", "client-7")
    assert (
        Playbook(desk())
        >> arrived(SAMPLE, alone(MODERN, call), outside_calls=True)
        << refused(7, r"no call of the modern client that can carry it.*tools/call")
    )


def test_a_call_whose_result_cannot_be_input_required_is_not_failed() -> None:
    """2026-07-28: tools/list cannot answer input_required; a server asking at
    session start is not asking for that call."""
    call = OwnerCall(41, "tools/list", "client-7")
    assert (
        Playbook(desk())
        >> arrived(ELICIT, alone(MODERN, call))
        << refused(8, r"in progress: tools/list")
    )


def test_roots_of_the_session_do_not_fail_a_call_that_declared_none() -> None:
    """Roots are the session's (server-everything asks 350 ms after initialized):
    a call of a client that declared none is not failed for them."""
    call = OwnerCall(41, "tools/call", "client-7")
    assert (
        Playbook(desk())
        >> arrived(LIST_ROOTS, alone(MODERN, call), session_features=frozenset({"roots"}))
        << refused(9, "roots belong to the session")
    )


def test_a_gateway_call_has_no_client_id_to_fail() -> None:
    """The gateway's own calls carry no client id: the server is refused, no
    client call is failed."""
    call = OwnerCall(41, "tools/call", None)
    assert (
        Playbook(desk())
        >> arrived(SAMPLE, alone(MODERN, call))
        << refused(7, "did not declare the sampling capability")
    )


def test_a_modern_servers_request_is_refused_and_fails_no_call() -> None:
    """2026-07-28 basic/patterns/mrtr: server-initiated requests are no longer
    supported; a server asks with input_required. A defect the upstream fuzz
    test found: a hostile 2026-07-28 server's roots/list, arriving while one
    modern client's call was the only one on the shared connection, failed that
    call with -32021. It is refused (one rate-limited line) and fails nothing."""
    call = OwnerCall(41, "tools/call", "client-7")
    for claim in (alone(MODERN, call), alone(LEGACY_SAMPLER), Claim("held", None, None)):
        assert (
            Playbook(desk(), logs=True)
            >> arrived(LIST_ROOTS, claim, server_is_modern=True)
            << Log(
                "request from a 2026-07-28 server refused",
                "warning",
                {"method": "roots/list"},
                rate_limited=True,
            )
            << refused(9, "asks for client input with input_required")
        )


# -- answered by the gateway ------------------------------------------------------------


def test_ping_is_answered_by_the_gateway() -> None:
    """DESIGN §5.1.5: a legacy server's ping is the gateway's to answer."""
    assert (
        Playbook(desk())
        >> arrived(PING, alone(LEGACY_SAMPLER))
        << RespondToServer(wire.result_response(10, {}))
    )


def test_a_dual_era_servers_ping_reaches_its_legacy_client() -> None:
    """DESIGN §5.3: a dual-era server's legacy session is the client's own."""
    assert (
        Playbook(desk())
        >> arrived(PING, alone(LEGACY_PLAIN), dual_legacy=True)
        << AskClient(LEGACY_PLAIN, PING)
    )
    assert (
        Playbook(desk())
        >> arrived(PING, alone(MODERN), dual_legacy=True)
        << RespondToServer(wire.result_response(10, {}))
    )


def test_configured_roots_answer_a_client_that_cannot() -> None:
    """DESIGN §5.1.6: roots the client cannot give may come from configuration,
    with one (rate-limited) line saying why."""
    assert (
        Playbook(desk(static_roots=ROOTS), logs=True)
        >> arrived(LIST_ROOTS, alone(MODERN))
        << Log(
            "roots/list answered from the configured roots",
            "info",
            {"why": matching("no call of the modern client")},
            rate_limited=True,
        )
        << RespondToServer(wire.result_response(9, {"roots": list(ROOTS)}))
    )
    # A client that declared roots is asked itself.
    assert (
        Playbook(desk(static_roots=ROOTS))
        >> arrived(LIST_ROOTS, alone(LEGACY_SAMPLER))
        << AskClient(LEGACY_SAMPLER, LIST_ROOTS)
    )


def test_an_unknown_method_is_method_not_found() -> None:
    """JSON-RPC 2.0: -32601 for a method the client side does not have."""
    msg = wire.request(11, "tools/call", {"name": "x"})
    assert (
        Playbook(desk())
        >> arrived(msg, alone(LEGACY_SAMPLER))
        << RespondToServer(
            wire.error_response(11, wire.METHOD_NOT_FOUND, "Method not found: tools/call")
        )
    )


# -- hostile servers ----------------------------------------------------------------------


def test_bad_params_are_refused_with_one_rate_limited_line() -> None:
    """2025-11-25 schema CreateMessageRequestParams: maxTokens is required; a
    server breaking it gets -32602 and the operator one line a minute."""
    bad = wire.request(12, "sampling/createMessage", {"messages": []})
    assert (
        Playbook(desk(), logs=True)
        >> arrived(bad, alone(LEGACY_SAMPLER))
        << Log(
            "server request with bad params refused",
            "warning",
            {"method": "sampling/createMessage", "error": matching("maxTokens")},
            rate_limited=True,
        )
        << RespondToServer(
            {
                "jsonrpc": "2.0",
                "id": 12,
                "error": {"code": wire.INVALID_PARAMS, "message": matching("maxTokens")},
            }
        )
    )


def test_requests_over_the_limit_are_refused_not_queued() -> None:
    """A server that asks without end must not pile up waiting requests: past
    the limit each is refused at once."""
    assert (
        Playbook(desk(max_waiting=2))
        >> arrived(SAMPLE, alone(LEGACY_SAMPLER), waiting=2)
        << RespondToServer(
            wire.error_response(7, wire.INTERNAL_ERROR, "Too many requests in progress (limit 2)")
        )
    )


METHODS = st.sampled_from(
    ["sampling/createMessage", "elicitation/create", "roots/list", "ping", "tools/call", "x/y"]
)
PARAMS: st.SearchStrategy[dict[str, Any] | None] = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["messages", "maxTokens", "message", "requestedSchema", "mode", "url"]),
        st.one_of(st.none(), st.integers(), st.text(max_size=5), st.just([]), st.just({})),
    ),
)
CLIENTS = st.sampled_from([None, LEGACY_SAMPLER, LEGACY_PLAIN, MODERN])
CALLS = st.lists(
    st.builds(
        OwnerCall,
        st.integers(0, 5),
        st.sampled_from(["tools/call", "tools/list", "prompts/get"]),
        st.one_of(st.none(), st.integers()),
    ),
    max_size=2,
)


@settings(max_examples=300, deadline=None)
@given(
    method=METHODS,
    params=PARAMS,
    held=st.booleans(),
    holder=CLIENTS,
    sole=CLIENTS,
    calls=CALLS,
    waiting=st.integers(0, 5),
    dual=st.booleans(),
    outside=st.booleans(),
    roots=st.booleans(),
    modern=st.booleans(),
)
def test_every_request_gets_exactly_one_answer_or_one_owner(
    method: str,
    params: dict[str, Any] | None,
    held: bool,
    holder: Client | None,
    sole: Client | None,
    calls: list[OwnerCall],
    waiting: int,
    dual: bool,
    outside: bool,
    roots: bool,
    modern: bool,
) -> None:
    """Whatever a server sends and whoever is around, the server gets exactly
    one answer or the request exactly one owner (nothing is left unanswered,
    nothing answered twice), and the answer carries the server's id."""
    msg = wire.request(99, method, params)
    claim = Claim("held" if held else None, holder, sole, tuple(calls))
    commands: list[Command] = desk(max_waiting=4, static_roots=ROOTS if roots else ()).handle(
        arrived(
            msg,
            claim,
            dual_legacy=dual,
            waiting=waiting,
            outside_calls=outside,
            server_is_modern=modern,
        )
    )
    owners = [c for c in commands if isinstance(c, AskClient | HandToHeldCall | RespondToServer)]
    assert len(owners) == 1, commands
    if isinstance(owners[0], RespondToServer):
        assert owners[0].reply["id"] == 99
    if isinstance(owners[0], AskClient):
        assert owners[0].client.session is not None  # only legacy clients are asked
    for failed in (c for c in commands if isinstance(c, FailClientCall)):
        assert failed.reply["error"]["code"] == wire.MISSING_REQUIRED_CLIENT_CAPABILITY
        assert not modern  # a 2026-07-28 server's request is no call's
    if modern and method != "ping":
        assert isinstance(owners[0], RespondToServer)
