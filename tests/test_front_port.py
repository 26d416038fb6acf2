"""Issue #11 item 4: "the fronts depend on a small protocol the runtime
implements (no fronts <-> runtime cycle); metrics render a snapshot
dataclass". Today's main has `metrics.render` reach into
`front.service.pool` and `service.bridge.held`, and the HTTP front import
gateway.runtime.service. Here the front runs on a stand-in for the gateway
that is nothing but the protocol: /readyz and /metrics read its snapshots."""

from __future__ import annotations

import platform
from typing import Any

import httpx
import pytest

from gateway import build_info, wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.fronts.http_front import HttpFront
from gateway.fronts.metrics import Metrics, build_info_lines
from gateway.fronts.port import GatewayPort, Readiness
from gateway.runtime.service import GatewayService
from tests.port_stand_in import SNAPSHOT, StandIn

pytestmark = pytest.mark.anyio


async def _get(port: GatewayPort, path: str) -> httpx.Response:
    front = HttpFront(port, Metrics())
    transport = httpx.ASGITransport(app=front)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await client.get(path)


def test_the_runtime_service_is_what_the_fronts_need() -> None:
    """GatewayService implements the fronts' protocol (mypy checks the
    signatures where http_app hands it to HttpFront; this checks the names)."""
    wanted = [n for n in dir(GatewayPort) if not n.startswith("_")]
    service = GatewayService(Config(command=("x",), state_key="k" * 32))
    assert [n for n in wanted if not hasattr(service, n)] == []
    assert {"config", "links"} <= set(GatewayPort.__annotations__)


def test_metrics_render_the_snapshot() -> None:
    """/metrics: the gateway's gauges come from the snapshot, the client
    sessions from the front."""
    text = Metrics().render(SNAPSHOT, client_sessions=4, client_queued_bytes=1234)
    for line in [
        "mcp_gateway_sessions 4",
        "mcp_gateway_upstream_sessions 3",
        "mcp_gateway_parked_calls 2",
        'mcp_gateway_mrtr_rounds_total{direction="to_modern_client"} 5',
        'mcp_gateway_mrtr_rounds_total{direction="to_legacy_client"} 7',
        "mcp_gateway_upstream_restarts_total 1",
        "mcp_gateway_upstream_ready 1",
        "mcp_gateway_log_lines_dropped_total 6",
        "mcp_gateway_client_queued_bytes 1234",
        'mcp_gateway_messages_dropped_total{toward="client",kind="lossy"} 8',
        'mcp_gateway_messages_dropped_total{toward="server",kind="request"} 1',
    ]:
        assert line in text.splitlines()


async def test_the_front_serves_metrics_from_the_port() -> None:
    """The front asks the port for the snapshot; it reaches into nothing else."""
    response = await _get(StandIn(Readiness(True, era="modern")), "/metrics")
    assert response.status_code == 200
    assert "mcp_gateway_parked_calls 2" in response.text.splitlines()


async def test_metrics_carry_the_build_info() -> None:
    """Issue #13: "the version in /metrics (build info)": a gauge of 1 whose
    labels are the gateway's version and Python's, in the style of the others."""
    response = await _get(StandIn(Readiness(True, era="modern")), "/metrics")
    lines = response.text.splitlines()
    labels = f'version="{build_info.version()}",python="{platform.python_version()}"'
    at = lines.index(f"mcp_gateway_build_info{{{labels}}} 1")
    assert lines[at - 2].startswith("# HELP mcp_gateway_build_info ")
    assert lines[at - 1] == "# TYPE mcp_gateway_build_info gauge"
    assert 'version="0.1.0"' in labels


def test_build_info_labels_are_escaped() -> None:
    assert (
        build_info_lines('1"x', "3.11")[2]
        == 'mcp_gateway_build_info{version="1\\"x",python="3.11"} 1'
    )


@pytest.mark.parametrize(
    ("ready", "status", "body"),
    [
        (
            Readiness(
                True,
                era="dual",
                server_info={"name": "s"},
                modern_version="2026-07-28",
                legacy_version="2025-11-25",
            ),
            200,
            {
                "status": "ready",
                "era": "dual",
                "server": {"name": "s"},
                "versions": {"modern": "2026-07-28", "legacy": "2025-11-25"},
            },
        ),
        (
            Readiness(True, era="legacy", server_info={"name": "s"}),
            200,
            {"status": "ready", "era": "legacy", "server": {"name": "s"}},
        ),
        (
            Readiness(False, awaiting_credentials=True),
            200,
            {
                "status": "ready",
                "era": None,
                "reason": "the upstream requires authorization; its era is probed "
                "with the first client's forwarded credential",
            },
        ),
        (
            Readiness(False, failure="[Errno 2] No such file or directory: 'x'"),
            503,
            {"status": "not ready", "reason": "[Errno 2] No such file or directory: 'x'"},
        ),
        (
            Readiness(False),
            503,
            {"status": "not ready", "reason": "upstream era not settled yet"},
        ),
    ],
    ids=["dual", "settled", "awaiting-credentials", "failed", "starting"],
)
async def test_readyz_reads_the_readiness_snapshot(
    ready: Readiness, status: int, body: dict[str, Any]
) -> None:
    """docs/http.md, "As an HTTP sidecar": /readyz says ready or not, and to those who
    may read /metrics the era, the server and the failure; unchanged, from
    the runtime's Readiness instead of the pool's fields."""
    response = await _get(StandIn(ready), "/readyz")
    assert response.status_code == status
    assert response.json() == body


def test_the_latency_histogram_is_cumulative_per_era_path() -> None:
    """Prometheus histograms: each `le` bucket counts the observations at or
    under its bound, `+Inf` and `_count` all of them, `_sum` their total."""
    metrics = Metrics()
    link = ClientLink(send=_never, send_nowait=print, principal="p", transport="streamable-http")
    reply = wire.result_response(1, {})
    for seconds in (0.001, 0.004, 0.004, 0.3, 99.0):
        metrics.observe_request("tools/call", link, reply, seconds, "legacy->legacy")
    metrics.observe_request("ping", link, reply, 0.0001, "modern->legacy")
    lines = metrics.render(SNAPSHOT, client_sessions=0).splitlines()
    series = 'path="legacy->legacy",transport="streamable-http"'
    bucket = "mcp_gateway_request_seconds_bucket{" + series + ',le="%s"} %d'
    for le, n in [("0.001", 1), ("0.0025", 1), ("0.005", 3), ("0.25", 3), ("0.5", 4)]:
        assert bucket % (le, n) in lines
    assert bucket % ("30.0", 4) in lines
    assert f'mcp_gateway_request_seconds_bucket{{{series},le="+Inf"}} 5' in lines
    assert f"mcp_gateway_request_seconds_count{{{series}}} 5" in lines
    assert f"mcp_gateway_request_seconds_sum{{{series}}} 99.309000" in lines
    assert (
        'mcp_gateway_request_seconds_bucket{path="modern->legacy",transport="streamable-http",'
        'le="0.001"} 1'
    ) in lines
    assert (
        'mcp_gateway_requests_total{path="legacy->legacy",method="tools/call",outcome="ok",'
        'transport="streamable-http"} 5'
    ) in lines


async def _never(msg: wire.Message) -> None:
    raise AssertionError("nothing is sent")
