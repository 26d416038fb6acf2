"""`[http] forward_authorization`: the client's own `Authorization` goes
upstream (issue #4 "forwarding of the client's Authorization header upstream
only when configured"; DESIGN §7, §5.4: the gateway forwards credentials as
configured and never stores them).

The HTTP front runs in-process (ASGI over httpx's transport); the upstream is a
scripted Streamable HTTP server on 127.0.0.1 that only answers requests
carrying an accepted bearer credential, the way a resource server does
(2025-11-25 basic/authorization "Token Requirements": 401 with a
`WWW-Authenticate` challenge otherwise)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest

from gateway import era, wire
from gateway.backs import http_wire
from gateway.config import Config, ConfigError
from gateway.core import http_binding
from gateway.fronts.http_front import HttpFront
from gateway.fronts.metrics import Metrics
from gateway.runtime.service import GatewayService
from tests.http_answers import answer_of
from tests.servers.scripted_http import (
    HttpRequest,
    HttpServer,
    LegacyHttp,
    ModernHttp,
    Reply,
    serve,
)

pytestmark = pytest.mark.anyio

V = "2026-07-28"
CHALLENGE = 'Bearer resource_metadata="https://rs.example/.well-known/oauth-protected-resource"'
ACCEPT = "application/json, text/event-stream"


@dataclass
class AuthGate:
    """A resource server in front of `inner`: 401 unless the credential is accepted."""

    inner: Any
    accepted: frozenset[str]

    async def __call__(self, req: HttpRequest, server: HttpServer) -> Reply:
        if req.header("authorization") not in self.accepted:
            body = wire.error_response(None, -32001, "invalid_token")
            return Reply.json(body, 401, **{"www-authenticate": CHALLENGE})
        reply: Reply = await self.inner(req, server)
        return reply


async def hello(msg: wire.Message, req: HttpRequest, server: HttpServer) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "hello"}]}


HELLO_TOOL = {"name": "hello", "inputSchema": {"type": "object"}}


@asynccontextmanager
async def sidecar(
    url: str, **config: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, GatewayService]]:
    cfg = Config(
        upstream_url=url,
        listen="127.0.0.1:8080",
        **{
            "http_forward_authorization": True,
            "probe_timeout": 2,
            "request_timeout": 5,
            "restart_backoff_initial": 0.01,
            **config,
        },
    )
    cfg.check()
    async with anyio.create_task_group() as tg:
        service = GatewayService(cfg)
        front = HttpFront(service, Metrics())
        front.tg = tg
        await service.start(tg)
        transport = httpx.ASGITransport(app=front)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1:8080", timeout=10
        ) as client:
            yield client, service
        await service.aclose()
        tg.cancel_scope.cancel()


def modern_call(msg_id: int, name: str) -> dict[str, Any]:
    meta = {
        era.PROTOCOL_VERSION: V,
        era.CLIENT_CAPABILITIES: {},
        era.CLIENT_INFO: {"name": "t", "version": "1"},
    }
    return {
        "jsonrpc": "2.0",
        "id": msg_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": {}, "_meta": meta},
    }


def modern_headers(name: str, credential: str | None) -> dict[str, str]:
    headers = {
        "accept": ACCEPT,
        "content-type": "application/json",
        "mcp-protocol-version": V,
        "mcp-method": "tools/call",
        "mcp-name": name,
    }
    if credential is not None:
        headers["authorization"] = credential
    return headers


async def test_modern_upstream_sees_each_clients_own_credential_and_refusals_come_back() -> None:
    """A probe without a credential is refused: that is not an era verdict, and
    the sidecar stays ready; the first client's credential settles the era.
    A refused credential comes back as the upstream's 401 and challenge."""
    upstream = AuthGate(
        ModernHttp(tools=[HELLO_TOOL], calls={"hello": hello}),
        frozenset({"Bearer alice-token", "Bearer bob-token"}),
    )
    async with serve(upstream) as server, sidecar(server.url) as (client, service):
        ready = await client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["era"] is None
        assert service.pool.awaiting_credentials

        ok = await client.post(
            "/mcp",
            json=modern_call(1, "hello"),
            headers=modern_headers("hello", "Bearer alice-token"),
        )
        assert ok.status_code == 200, ok.text
        assert answer_of(ok)["result"]["content"][0]["text"] == "hello"
        assert service.pool.era is era.Era.MODERN

        bob = await client.post(
            "/mcp",
            json=modern_call(2, "hello"),
            headers=modern_headers("hello", "Bearer bob-token"),
        )
        assert bob.status_code == 200, bob.text

        refused = await client.post(
            "/mcp", json=modern_call(3, "hello"), headers=modern_headers("hello", "Bearer stolen")
        )
        missing = await client.post(
            "/mcp", json=modern_call(4, "hello"), headers=modern_headers("hello", None)
        )
    for answer, msg_id in ((refused, 3), (missing, 4)):
        assert answer.status_code == 401, answer.text
        assert answer.headers["www-authenticate"] == CHALLENGE
        body = answer.json()
        assert body["id"] == msg_id
        assert body["error"]["data"]["reason"] == "upstream-unauthorized"
    calls = server.posts("tools/call")
    assert [r.header("authorization") for r in calls] == ["Bearer alice-token", "Bearer bob-token"]
    # A new credential opens its connection with a server/discover: refused
    # ones get no further.
    discovers = {r.header("authorization") for r in server.posts("server/discover")}
    assert discovers == {None, "Bearer alice-token", "Bearer bob-token", "Bearer stolen"}


async def test_legacy_upstream_gets_one_session_per_credential() -> None:
    """Sessions are never shared across principals (DESIGN §7): two
    credentials are two upstream sessions, each initialized and used with its own."""

    async def hi(ask: Any, args: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": "hi"}]}

    upstream = AuthGate(LegacyHttp(tools={"hi": hi}), frozenset({"Bearer a", "Bearer b"}))
    async with serve(upstream) as server, sidecar(server.url, max_sessions=2) as (client, _):
        for msg_id, credential in enumerate(["Bearer a", "Bearer b", "Bearer a"], 1):
            answer = await client.post(
                "/mcp", json=modern_call(msg_id, "hi"), headers=modern_headers("hi", credential)
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["result"]["content"][0]["text"] == "hi"
    # The start-up probe had no credential; after it, every request carries
    # one, and no upstream session is ever used with two.
    probe, *rest = server.posts()
    assert probe.header("authorization") is None
    assert all(r.header("authorization") in ("Bearer a", "Bearer b") for r in rest)
    credential_of: dict[str | None, set[str | None]] = {}
    for r in rest:
        if r.header("mcp-session-id") is not None:
            credential_of.setdefault(r.header("mcp-session-id"), set()).add(
                r.header("authorization")
            )
    assert all(len(c) == 1 for c in credential_of.values())
    calls = server.posts("tools/call")
    assert [r.header("authorization") for r in calls] == ["Bearer a", "Bearer b", "Bearer a"]
    assert calls[0].header("mcp-session-id") == calls[2].header("mcp-session-id")


async def test_without_forwarding_the_clients_authorization_stays_at_the_gateway() -> None:
    upstream = ModernHttp(tools=[HELLO_TOOL], calls={"hello": hello})
    async with (
        serve(upstream) as server,
        sidecar(
            server.url,
            http_forward_authorization=False,
            http_tokens={"ci": "gw-token"},
            upstream_headers={"Authorization": "Bearer service-token"},
        ) as (client, _),
    ):
        answer = await client.post(
            "/mcp", json=modern_call(1, "hello"), headers=modern_headers("hello", "Bearer gw-token")
        )
        assert answer.status_code == 200, answer.text
    assert {r.header("authorization") for r in server.posts()} == {"Bearer service-token"}


def test_forwarding_needs_an_http_front_and_back() -> None:
    with pytest.raises(ConfigError, match="forward_authorization"):
        Config(command=("server",), listen="127.0.0.1:1", http_forward_authorization=True).check()
    with pytest.raises(ConfigError, match="forward_authorization"):
        Config(upstream_url="http://x/mcp", http_forward_authorization=True).check()


def test_a_401_is_an_authorization_refusal_whatever_its_body() -> None:
    json_body = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"expired"}}'
    for body in (json_body, b"Unauthorized", None):
        reply = http_wire.refusal_reply(7, 401, body, CHALLENGE)
        assert reply["id"] == 7
        assert http_binding.auth_refusal(reply) == (401, CHALLENGE)
    assert "expired" in http_wire.refusal_reply(7, 403, json_body)["error"]["message"]
    assert http_binding.auth_refusal(http_wire.refusal_reply(7, 403, None)) == (403, None)
    # Other refusals, and errors the upstream made itself, are not.
    assert http_binding.auth_refusal(http_wire.refusal_reply(7, 400, None)) is None
    forged = wire.error_response(7, -32600, "x", {"reason": "upstream-unauthorized", "status": 401})
    assert http_binding.auth_refusal(forged) is None


async def test_a_legacy_client_session_is_bound_to_its_credential() -> None:
    """A legacy client's session (2025-11-25 "Session Management") belongs to
    the credential that opened it: its calls reach the modern upstream with
    that credential, and the session id under another credential is unknown
    (404), so a stolen session id is worth nothing without its token."""
    upstream = AuthGate(
        ModernHttp(tools=[HELLO_TOOL], calls={"hello": hello}),
        frozenset({"Bearer alice-token", "Bearer bob-token"}),
    )
    legacy = {"accept": ACCEPT, "content-type": "application/json"}
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "ide-plugin", "version": "1"},
        },
    }
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "hello", "arguments": {}},
    }
    async with serve(upstream) as server, sidecar(server.url) as (client, _):
        alice = {**legacy, "authorization": "Bearer alice-token"}
        opened = await client.post("/mcp", json=init, headers=alice)
        assert opened.status_code == 200, opened.text
        session = {"mcp-session-id": opened.headers["mcp-session-id"]}
        session["mcp-protocol-version"] = opened.json()["result"]["protocolVersion"]
        done = await client.post(
            "/mcp",
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers={**alice, **session},
        )
        assert done.status_code == 202
        ok = await client.post("/mcp", json=call, headers={**alice, **session})
        assert ok.status_code == 200, ok.text
        assert answer_of(ok)["result"]["content"][0]["text"] == "hello"
        bob = {**legacy, **session, "authorization": "Bearer bob-token"}
        stolen = await client.post("/mcp", json=call, headers=bob)
        anonymous = await client.post("/mcp", json=call, headers={**legacy, **session})
    assert stolen.status_code == 404 and anonymous.status_code == 404
    calls = server.posts("tools/call")
    assert [r.header("authorization") for r in calls] == ["Bearer alice-token"]
