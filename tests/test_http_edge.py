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

from gateway import era, wire
from gateway.config import Config
from gateway.fronts.http_front import HttpFront
from gateway.runtime.metrics import Metrics
from gateway.runtime.service import GatewayService
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
        assert reply.json()["error"]["code"] == wire.METHOD_NOT_FOUND
        for n in range(200):
            await client.post("/mcp", json=wire.request(10 + n, f"vendor/m{n}"), headers=session)
        call = wire.request(5, "tools/call", {"name": "echo", "arguments": {}})
        assert "result" in (await client.post("/mcp", json=call, headers=session)).json()
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
    from gateway.runtime.metrics import label_value

    assert label_value('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
