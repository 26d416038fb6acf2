"""The HTTP front's edge: what /metrics exposes and to whom, Host and Origin,
the gateway's own 401s (issue "Nothing a client, a server or a connection
sends can crash, wedge or exhaust the gateway").

The front runs in-process as an ASGI app (httpx's transport) in front of a
scripted legacy upstream: no process, no port."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import era, wire
from gateway.config import Config
from gateway.core import authority
from gateway.fronts.http_front import HttpFront
from gateway.fronts.metrics import Metrics
from gateway.runtime.service import GatewayService
from tests.http_answers import answer_of
from tests.scripted import Upstream, legacy_server

pytestmark = pytest.mark.anyio

SPEC = Path("/work/shared/spec")
ACCEPT = "application/json, text/event-stream"
JSON_HEADERS = {"accept": ACCEPT, "content-type": "application/json"}


async def _echo(server: Any, msg: wire.Message) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "echo"}]}


@asynccontextmanager
async def sidecar(host: str = "127.0.0.1:8080", **config: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The HTTP front over a scripted legacy server; `host` is the base URL's
    authority, so the Host header every request carries by default."""
    cfg = Config(
        command=("scripted",),
        listen="127.0.0.1:8080",
        **{"probe_timeout": 0.5, "request_timeout": 5, "restart_backoff_initial": 0.01, **config},
    )
    cfg.check()
    async with anyio.create_task_group() as tg:
        upstream = Upstream(legacy_server({"tools/call": _echo}), tg)
        service = GatewayService(cfg, connect=upstream.connect)
        front = HttpFront(service, Metrics(cfg.passthrough_methods))
        front.tg = tg
        await service.start(tg)
        with anyio.fail_after(5):
            await service.pool.ready()
        transport = httpx.ASGITransport(app=front)
        async with httpx.AsyncClient(
            transport=transport, base_url=f"http://{host}", timeout=10
        ) as client:
            yield client
        await service.aclose()
        tg.cancel_scope.cancel()
    upstream.close()


async def legacy_session(client: httpx.AsyncClient, **headers: str) -> dict[str, str]:
    init = wire.request(
        1,
        "initialize",
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    )
    reply = await client.post("/mcp", json=init, headers={**JSON_HEADERS, **headers})
    assert reply.status_code == 200, reply.text
    session = {**JSON_HEADERS, **headers, "mcp-session-id": reply.headers["mcp-session-id"]}
    note = wire.notification("notifications/initialized")
    assert (await client.post("/mcp", json=note, headers=session)).status_code == 202
    return session


# -- /metrics -----------------------------------------------------------------------

# One sample line of the text exposition format 0.0.4: a metric name, optional
# labels whose values escape only \\, \" and \n, and a value.
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(
    rf"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{{(?P<labels>{_LABEL}(?:,{_LABEL})*)?\}})?"
    r" (?P<value>[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\+?Inf|NaN))$"
)


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every line a comment or a well-formed sample, or the test fails."""
    samples = []
    declared: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE ") or line.startswith("# HELP "):
            declared.add(line.split()[2])
            continue
        match = _SAMPLE.match(line)
        assert match is not None, f"not a sample line: {line!r}"
        labels = {
            key: value.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
            for key, value in re.findall(
                r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', match["labels"] or ""
            )
        }
        name = match["name"]
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in declared or family in declared, f"undeclared metric {name}"
        samples.append((name, labels, float(match["value"])))
    return samples


def test_spec_methods_are_the_methods_of_both_schemas() -> None:
    """The metric label set is 'the known MCP methods of both revisions'."""
    names: set[str] = set()
    for revision in ("2025-11-25", "2026-07-28"):
        schema = json.loads((SPEC / revision / "schema.json").read_text())
        for definition in (schema.get("definitions") or schema["$defs"]).values():
            method = definition.get("properties", {}).get("method", {})
            if "const" in method:
                names.add(method["const"])
    assert names == era.SPEC_METHODS


async def test_metrics_labels_cannot_be_forged_or_grown_by_clients() -> None:
    """Issue: "a legacy request whose method is `x"} 1\\nforged_total 1\\n#` adds
    a forged line; 3,000 unique method names grow /metrics to 3.3 MB". Only
    label values the gateway defines, escaped per the text format."""
    async with sidecar() as client:
        session = await legacy_session(client)
        forged = 'x"} 1\nforged_total 1\n#'
        reply = await client.post("/mcp", json=wire.request(2, forged, {}), headers=session)
        assert answer_of(reply)["error"]["code"] == wire.METHOD_NOT_FOUND
        for n in range(200):
            await client.post("/mcp", json=wire.request(10 + n, f"vendor/m{n}"), headers=session)
        call = wire.request(5, "tools/call", {"name": "echo", "arguments": {}})
        assert "result" in answer_of(await client.post("/mcp", json=call, headers=session))
        text = (await client.get("/metrics")).text
    samples = parse_metrics(text)
    assert not any(name.startswith("forged") for name, _, _ in samples)
    counted = {
        (labels["method"], labels["outcome"]): value
        for name, labels, value in samples
        if name == "mcp_gateway_requests_total"
    }
    # initialize, the forged name and 200 vendor names, then one call.
    assert counted == {("initialize", "ok"): 1, ("other", "error"): 201, ("tools/call", "ok"): 1}
    assert len(text) < 10_000


def test_label_values_are_escaped() -> None:
    """Prometheus text format: in label values, backslash, double quote and
    line feed are escaped as \\\\, \\" and \\n."""
    from gateway.fronts.metrics import label_value

    assert label_value('a\\b"c\nd') == 'a\\\\b\\"c\\nd'


# -- Host and Origin ------------------------------------------------------------------

MCP_CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {
        "name": "echo",
        "arguments": {},
        "_meta": {era.PROTOCOL_VERSION: "2026-07-28", era.CLIENT_CAPABILITIES: {}},
    },
}
MODERN_HEADERS = {
    **JSON_HEADERS,
    "mcp-protocol-version": "2026-07-28",
    "mcp-method": "tools/call",
    "mcp-name": "echo",
}


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("localhost:80@evil.com", 400),  # userinfo: a lenient parser reads "localhost"
        ("127.0.0.1:99999", 400),  # no such port
        ("127.0.0.1:0", 400),
        ("127.0.0.1:", 400),
        ("[::1", 400),
        ("127.1", 400),  # a browser's 127.0.0.1, but not the allowed name
        ("localhost/evil", 400),
        ("evil.example", 403),  # well-formed, not allowed
        ("localhost.evil.example:8080", 403),
        ("[::2]:8080", 403),
        ("127.0.0.1:8080", 200),
        ("LOCALHOST:8080", 200),
        ("[::1]:8080", 200),
        ("[0:0:0:0:0:0:0:1]", 200),
    ],
)
async def test_host_is_parsed_strictly(host: str, status: int) -> None:
    """Issue: "`Host: localhost:80@evil.com` and `Host: 127.0.0.1:99999` are
    accepted". RFC 9110 §7.2 / RFC 3986 §3.2.2 authority, no userinfo, port
    1-65535: 400 when malformed, 403 when not allowed (2026-07-28
    streamable-http "Security Warning": DNS rebinding)."""
    async with sidecar() as client:
        reply = await client.post("/mcp", json=MCP_CALL, headers={**MODERN_HEADERS, "host": host})
        assert reply.status_code == status, reply.text
        if status != 200:
            error = reply.json()["error"]
            assert error["data"]["source"] == "mcp-era-gateway"
            assert error["data"]["reason"] in ("malformed-host", "host-not-allowed")
        # Nothing about the upstream reaches a refused Host on /metrics either.
        metrics = await client.get("/metrics", headers={"host": host})
        assert metrics.status_code == status


@pytest.mark.parametrize(
    ("origin", "status"),
    [
        ("http://localhost:80@evil.com", 403),
        ("http://127.0.0.1:99999", 403),
        ("null", 403),
        ("http://evil.example", 403),
        ("https://app.example:8443", 200),  # in allowed_origins
        ("HTTPS://APP.example:8443", 200),
        ("https://app.example", 403),  # another port: another origin
        ("http://localhost:3000", 200),  # an allowed host name
        ("https://plain.example", 200),  # allowed as https://plain.example:443
        ("https://plain.example:443", 200),
        ("http://plain.example", 403),
    ],
)
async def test_origin_is_parsed_strictly(origin: str, status: int) -> None:
    """RFC 6454 §7 serialised origin; an allowed origin or an allowed host
    name, else 403 (2026-07-28 streamable-http: "Servers MUST validate the
    Origin header ... respond with HTTP 403 Forbidden")."""
    allowed = ("https://app.example:8443", "https://plain.example:443")
    async with sidecar(http_allowed_origins=allowed) as client:
        reply = await client.post(
            "/mcp", json=MCP_CALL, headers={**MODERN_HEADERS, "origin": origin}
        )
        assert reply.status_code == status, reply.text


async def test_two_host_headers_are_a_bad_request() -> None:
    """RFC 9112 §3.2: a request with more than one Host field line gets 400."""
    async with sidecar() as client:
        transport = client._transport
        request = httpx.Request(
            "GET",
            "http://127.0.0.1:8080/metrics",
            headers=[("host", "127.0.0.1:8080"), ("host", "evil.example")],
        )
        reply = await transport.handle_async_request(request)
        assert reply.status_code == 400


_NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9](\.[a-z][a-z0-9]{0,5}){0,3}", fullmatch=True)
_HOSTS = st.one_of(
    _NAMES,
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda ip: f"[{ip}]"),
)


@given(host=_HOSTS, port=st.none() | st.integers(1, 65535))
def test_well_formed_authorities_parse_to_what_they_say(host: str, port: int | None) -> None:
    """Property: a well-formed authority parses to its host and port."""
    text = host if port is None else f"{host}:{port}"
    parsed = authority.parse_host(text)
    assert parsed.port == port
    assert parsed.host == authority.parse_host_name(host)
    assert authority.parse_host(text.upper()) == parsed


@given(text=st.text(max_size=40) | st.from_regex(r"[a-z0-9.:@\[\]%/-]{0,30}", fullmatch=True))
def test_whatever_parses_is_one_unambiguous_authority(text: str) -> None:
    """Property: anything accepted has no userinfo, path or whitespace, a
    port in 1-65535, and re-serialises to an authority that parses the same;
    everything else is a BadAuthority, never another exception."""
    try:
        parsed = authority.parse_host(text)
    except authority.BadAuthority:
        return
    assert not set(text) & set("@/?#% \t\r\n\\")
    assert parsed.port is None or 0 < parsed.port < 65536
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    again = host if parsed.port is None else f"{host}:{parsed.port}"
    assert authority.parse_host(again) == parsed


# -- 401, /metrics and /readyz -------------------------------------------------------------


async def test_a_401_carries_a_bearer_challenge() -> None:
    """Issue: "A 401 carries no WWW-Authenticate". RFC 6750 §3: a request
    without a token gets the bare challenge, one with a wrong token
    `error="invalid_token"` (RFC 9110 §11.6.1: a 401 MUST carry one)."""
    async with sidecar(http_tokens={"alice": "alice-token"}) as client:
        none = await client.post("/mcp", json=MCP_CALL, headers=MODERN_HEADERS)
        assert none.status_code == 401
        assert none.headers["www-authenticate"] == 'Bearer realm="mcp-era-gateway"'
        assert none.json()["error"]["data"]["reason"] == "unauthorized"
        wrong = await client.post(
            "/mcp", json=MCP_CALL, headers={**MODERN_HEADERS, "authorization": "Bearer nope"}
        )
        assert wrong.status_code == 401
        challenge = wrong.headers["www-authenticate"]
        assert challenge.startswith('Bearer realm="mcp-era-gateway", error="invalid_token"')
        right = await client.post(
            "/mcp",
            json=MCP_CALL,
            headers={**MODERN_HEADERS, "authorization": "Bearer alice-token"},
        )
        assert right.status_code == 200


async def test_metrics_and_readyz_details_need_what_mcp_needs() -> None:
    """Issue: "/metrics and /readyz (with serverInfo) answer anyone, any Host,
    without a token". With `[http] tokens`: a token for /metrics and for the
    /readyz details; /healthz and the bare /readyz status stay open to probes."""
    async with sidecar(http_tokens={"alice": "alice-token"}) as client:
        assert (await client.get("/metrics")).status_code == 401
        bare = await client.get("/readyz", headers={"host": "10.1.2.3:8080"})
        assert bare.status_code == 200 and bare.json() == {"status": "ready"}
        assert (await client.get("/readyz")).json() == {"status": "ready"}
        alive = await client.get("/healthz", headers={"host": "10.1.2.3:8080"})
        assert alive.status_code == 200
        token = {"authorization": "Bearer alice-token"}
        assert (await client.get("/metrics", headers=token)).status_code == 200
        details = (await client.get("/readyz", headers=token)).json()
        assert details["era"] == "legacy" and details["server"]["name"] == "scripted-legacy"
        # A token does not open them to a foreign Host.
        foreign = {**token, "host": "evil.example"}
        assert (await client.get("/metrics", headers=foreign)).status_code == 403
        assert (await client.get("/readyz", headers=foreign)).json() == {"status": "ready"}


async def test_admin_tokens_alone_read_metrics() -> None:
    """With `[http] admin_tokens`, /metrics and the /readyz details take those
    tokens and no client token; /mcp takes client tokens only."""
    async with sidecar(
        http_tokens={"alice": "alice-token"}, http_admin_tokens={"prometheus": "scrape-token"}
    ) as client:
        alice = {"authorization": "Bearer alice-token"}
        scrape = {"authorization": "Bearer scrape-token"}
        assert (await client.get("/metrics", headers=alice)).status_code == 401
        assert (await client.get("/metrics", headers=scrape)).status_code == 200
        assert (await client.get("/readyz", headers=alice)).json() == {"status": "ready"}
        assert "server" in (await client.get("/readyz", headers=scrape)).json()
        call = await client.post("/mcp", json=MCP_CALL, headers={**MODERN_HEADERS, **scrape})
        assert call.status_code == 401


async def test_without_tokens_details_are_for_allowed_hosts() -> None:
    """Without tokens (a loopback sidecar): /metrics and the /readyz details
    for allowed Hosts only, which is what a DNS-rebinding page cannot send."""
    async with sidecar() as client:
        assert (await client.get("/metrics")).status_code == 200
        assert "server" in (await client.get("/readyz")).json()
        rebound = {"host": "evil.example"}
        assert (await client.get("/metrics", headers=rebound)).status_code == 403
        assert (await client.get("/readyz", headers=rebound)).json() == {"status": "ready"}
