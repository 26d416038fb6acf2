"""What the `sse` group measures (issue #15: "the SSE front against
supergateway's SSE output on the same upstream"): an HTTP+SSE client
(bench/sse_client.py) through the gateway's SSE front and through
supergateway's `--outputTransport sse` to the same stdio server, the
gateway's Streamable HTTP front on the same path for reference, and the
direct stdio connection (bench/client.py) as the baseline of every ratio.

Commands are templates as in bench/http_setups.py (`{port}`: where the client
connects).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from bench.http_setups import SUPERGATEWAY, HttpRun, gateway
from bench.setups import fast_server, py1_server


@dataclass(frozen=True, slots=True)
class SseGroup:
    title: str
    direct: HttpRun  # the stdio client speaking the server's era to it, no hop
    gateway: HttpRun  # the SSE client through the gateway's SSE front
    supergateway: HttpRun | None  # the SSE client through supergateway (same era only)
    http: HttpRun | None  # a Streamable HTTP client through the gateway's HTTP front

    def runs(self) -> tuple[HttpRun, ...]:
        return tuple(
            r for r in (self.direct, self.gateway, self.supergateway, self.http) if r is not None
        )


def supergateway_sse(server: tuple[str, ...]) -> tuple[str, ...]:
    # One stdio child for every SSE session (bench/sse_client.py says what that means).
    return (
        "node",
        str(SUPERGATEWAY),
        "--stdio",
        shlex.join(server),
        "--outputTransport",
        "sse",
        "--port",
        "{port}",
        "--healthEndpoint",
        "/readyz",
        "--logLevel",
        "none",
    )


def groups(
    with_supergateway: bool = True, profile_to: Path | None = None, with_py1: bool = True
) -> list[SseGroup]:
    legacy, modern = fast_server("legacy"), fast_server("modern")

    def direct(key: str, era: str, label: str, server: tuple[str, ...]) -> HttpRun:
        return HttpRun(key, label, era, "direct", None, server=server, front="stdio")

    def sse_gw(key: str, label: str, server: tuple[str, ...]) -> HttpRun:
        return HttpRun(
            key, label, "legacy", "gateway", gateway(profile_to, key, "--", *server), front="sse"
        )

    def http_gw(key: str, label: str, server: tuple[str, ...]) -> HttpRun:
        return HttpRun(key, label, "legacy", "gateway", gateway(profile_to, key, "--", *server))

    def sg(key: str, label: str, server: tuple[str, ...]) -> HttpRun | None:
        if not with_supergateway:
            return None
        hop = supergateway_sse(server)
        return HttpRun(key, label, "legacy", "supergateway", hop, front="sse")

    direct_l = direct("sse-direct-L", "legacy", "stdio legacy client → fast legacy", legacy)
    out = [
        SseGroup(
            "legacy→legacy, SSE → stdio fast legacy",
            direct_l,
            sse_gw("sse-gw-LL", "SSE client → gateway SSE front → stdio fast legacy", legacy),
            sg("sse-supergw-LL", "SSE client → supergateway SSE → stdio fast legacy", legacy),
            http_gw(
                "sse-http-gw-LL",
                "Streamable HTTP legacy client → gateway → stdio fast legacy",
                legacy,
            ),
        ),
        SseGroup(
            "legacy→modern, SSE → stdio fast modern",
            direct("sse-direct-M", "modern", "stdio modern client → fast modern", modern),
            sse_gw("sse-gw-LM", "SSE client → gateway SSE front → stdio fast modern", modern),
            None,  # supergateway does not translate between eras
            http_gw(
                "sse-http-gw-LM",
                "Streamable HTTP legacy client → gateway → stdio fast modern",
                modern,
            ),
        ),
    ]
    if with_py1:
        py1 = py1_server()
        out.append(
            SseGroup(
                "legacy→legacy, SSE → stdio py1_server (mcp 1.30 FastMCP)",
                direct("sse-py1-direct", "legacy", "stdio legacy client → py1_server", py1),
                sse_gw("sse-gw-py1", "SSE client → gateway SSE front → stdio py1_server", py1),
                sg("sse-supergw-py1", "SSE client → supergateway SSE → stdio py1_server", py1),
                http_gw(
                    "sse-http-gw-py1",
                    "Streamable HTTP legacy client → gateway → stdio py1_server",
                    py1,
                ),
            )
        )
    return out


def runs_in_order(all_groups: list[SseGroup]) -> list[HttpRun]:
    """Each run once; the runs of a path next to each other, baseline first."""
    seen: dict[str, HttpRun] = {}
    for group in all_groups:
        for run in group.runs():
            seen.setdefault(run.key, run)
    return list(seen.values())
