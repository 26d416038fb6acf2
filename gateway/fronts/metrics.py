"""Prometheus metrics for the HTTP front's /metrics (text exposition 0.0.4).

The front counts what it answers; the rest is a snapshot the runtime fills
(gateway.fronts.port.GatewaySnapshot)."""

from __future__ import annotations

import bisect
from collections import Counter

from gateway import build_info, era, flow_control, wire
from gateway.client_link import ClientLink
from gateway.core import mrtr_shapes
from gateway.fronts.port import GatewaySnapshot

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# The label every method name outside the known set is counted under: a
# client chooses the method, and a label value it chooses could forge lines or
# grow /metrics without bound.
OTHER = "other"


def label_value(value: str) -> str:
    """A label value escaped per the Prometheus text exposition format:
    backslash, double quote and line feed."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def build_info_lines(version: str, python: str) -> list[str]:
    """The build-info gauge: always 1, the facts in its labels, so that a
    dashboard can tell which replicas run which version."""
    labels = f'version="{label_value(version)}",python="{label_value(python)}"'
    return [
        "# HELP mcp_gateway_build_info The gateway's version and Python's; always 1.",
        "# TYPE mcp_gateway_build_info gauge",
        f"mcp_gateway_build_info{{{labels}}} 1",
    ]


class Metrics:
    def __init__(self, extra_methods: frozenset[str] = frozenset()) -> None:
        self.build_info = build_info_lines(build_info.version(), build_info.python_version())
        # Method names counted by name: both revisions' methods, and the
        # vendor methods the operator lets through.
        self.known_methods = era.SPEC_METHODS | extra_methods
        # (transport, era path, method, outcome) -> requests answered.
        self.requests: Counter[tuple[str, str, str, str]] = Counter()
        self.http_errors: Counter[int] = Counter()
        # Per (transport, era path): how many latencies fell in each bucket
        # (not yet cumulative: one count a request; the last past every bound).
        self.latency_buckets: dict[tuple[str, str], list[int]] = {}
        self.latency_sum: dict[tuple[str, str], float] = {}

    def observe_request(
        self,
        method: str,
        link: ClientLink,
        reply: wire.Message,
        seconds: float,
        path: str = "",
    ) -> None:
        """`path`: the era path the call took (`UpstreamPool.path_for`), e.g.
        "legacy->legacy(dual)" for a legacy client a dual-era server serves
        natively, "legacy->modern" for one translated onto a modern server.
        The transport is the link's ("streamable-http", "sse")."""
        path = path or f"{'legacy' if link.session is not None else 'modern'}->upstream"
        error = reply.get("error")
        result = reply.get("result")
        if isinstance(error, dict):
            outcome = "error"
        elif mrtr_shapes.is_input_required(result):
            outcome = "input_required"
        else:
            outcome = "ok"
        if method not in self.known_methods:
            method = OTHER
        self.requests[(link.transport, path, method, outcome)] += 1
        key = (link.transport, path)
        self.latency_sum[key] = self.latency_sum.get(key, 0.0) + seconds
        counts = self.latency_buckets.get(key)
        if counts is None:
            counts = self.latency_buckets[key] = [0] * (len(BUCKETS) + 1)
        counts[bisect.bisect_left(BUCKETS, seconds)] += 1  # the first bound it is <= to

    def count_http_error(self, status: int) -> None:
        self.http_errors[status] += 1

    def render(
        self,
        gateway: GatewaySnapshot,
        client_sessions: int,
        sse_sessions: int = 0,
        client_queued_bytes: int = 0,
    ) -> str:
        """`client_sessions`: the legacy client sessions open on the front
        over Streamable HTTP; `sse_sessions`: over the deprecated HTTP+SSE
        transport; `client_queued_bytes`: the bytes waiting for the front's
        clients to read them."""
        lines = [
            *self.build_info,
            "# HELP mcp_gateway_requests_total Requests answered, by era path, method,"
            " outcome and client transport.",
            "# TYPE mcp_gateway_requests_total counter",
        ]
        for (transport, path, method, outcome), n in sorted(self.requests.items()):
            labels = (
                f'path="{label_value(path)}",method="{label_value(method)}",'
                f'outcome="{label_value(outcome)}",transport="{label_value(transport)}"'
            )
            lines.append(f"mcp_gateway_requests_total{{{labels}}} {n}")
        lines += [
            "# HELP mcp_gateway_request_seconds Time from request to answer, by era path and"
            " client transport.",
            "# TYPE mcp_gateway_request_seconds histogram",
        ]
        for key in sorted(self.latency_buckets):
            transport, path = key
            series = f'path="{label_value(path)}",transport="{label_value(transport)}"'
            n = 0
            for bound, in_bucket in zip(BUCKETS, self.latency_buckets[key], strict=False):
                n += in_bucket
                lines.append(f'mcp_gateway_request_seconds_bucket{{{series},le="{bound}"}} {n}')
            count = sum(self.latency_buckets[key])
            lines.append(f'mcp_gateway_request_seconds_bucket{{{series},le="+Inf"}} {count}')
            lines.append(f"mcp_gateway_request_seconds_sum{{{series}}} {self.latency_sum[key]:.6f}")
            lines.append(f"mcp_gateway_request_seconds_count{{{series}}} {count}")
        lines += [
            "# HELP mcp_gateway_http_errors_total Requests refused at the HTTP layer, by status.",
            "# TYPE mcp_gateway_http_errors_total counter",
            *(
                f'mcp_gateway_http_errors_total{{status="{s}"}} {n}'
                for s, n in sorted(self.http_errors.items())
            ),
            "# HELP mcp_gateway_sessions Legacy client sessions open on the HTTP front.",
            "# TYPE mcp_gateway_sessions gauge",
            f"mcp_gateway_sessions {client_sessions + sse_sessions}",
            "# HELP mcp_gateway_client_sessions Legacy client sessions open on the HTTP front,"
            " by transport.",
            "# TYPE mcp_gateway_client_sessions gauge",
            f'mcp_gateway_client_sessions{{transport="streamable-http"}} {client_sessions}',
            f'mcp_gateway_client_sessions{{transport="sse"}} {sse_sessions}',
            "# HELP mcp_gateway_upstream_sessions Upstream sessions (processes or HTTP sessions).",
            "# TYPE mcp_gateway_upstream_sessions gauge",
            f"mcp_gateway_upstream_sessions {gateway.upstream_sessions}",
            "# HELP mcp_gateway_parked_calls Calls parked waiting for client input (MRTR).",
            "# TYPE mcp_gateway_parked_calls gauge",
            f"mcp_gateway_parked_calls {gateway.parked_calls}",
            "# HELP mcp_gateway_mrtr_rounds_total Input rounds bridged, by direction.",
            "# TYPE mcp_gateway_mrtr_rounds_total counter",
            f'mcp_gateway_mrtr_rounds_total{{direction="to_modern_client"}} '
            f"{gateway.rounds_to_modern_client}",
            f'mcp_gateway_mrtr_rounds_total{{direction="to_legacy_client"}} '
            f"{gateway.rounds_to_legacy_client}",
            "# HELP mcp_gateway_tasks_polled_total A modern server's tasks the gateway polled"
            " to answer a legacy client's call.",
            "# TYPE mcp_gateway_tasks_polled_total counter",
            f"mcp_gateway_tasks_polled_total {gateway.tasks_polled_for_legacy_clients}",
            "# HELP mcp_gateway_upstream_restarts_total Upstream exits followed by a restart.",
            "# TYPE mcp_gateway_upstream_restarts_total counter",
            f"mcp_gateway_upstream_restarts_total {gateway.upstream_restarts}",
            "# HELP mcp_gateway_upstream_ready Whether the upstream's era is settled.",
            "# TYPE mcp_gateway_upstream_ready gauge",
            f"mcp_gateway_upstream_ready {1 if gateway.upstream_ready else 0}",
            "# HELP mcp_gateway_log_lines_dropped_total Log lines stderr could not take"
            " (its reader gone, a full disk).",
            "# TYPE mcp_gateway_log_lines_dropped_total counter",
            f"mcp_gateway_log_lines_dropped_total {gateway.log_lines_dropped}",
            "# HELP mcp_gateway_client_queued_bytes Bytes queued toward HTTP clients, not yet"
            " written to their connections.",
            "# TYPE mcp_gateway_client_queued_bytes gauge",
            f"mcp_gateway_client_queued_bytes {client_queued_bytes}",
            "# HELP mcp_gateway_messages_dropped_total Messages not delivered to a peer that"
            " reads too slowly (a reply is replaced by a peer-not-reading error), by kind.",
            "# TYPE mcp_gateway_messages_dropped_total counter",
            *(
                f'mcp_gateway_messages_dropped_total{{toward="{toward}",kind="{kind}"}} '
                f"{gateway.messages_dropped.get((toward, kind), 0)}"
                for toward in ("client", "server")
                for kind in flow_control.KINDS
            ),
        ]
        return "\n".join(lines) + "\n"
