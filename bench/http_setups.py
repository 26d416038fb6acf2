"""What the `http` group measures: Streamable HTTP clients against the
gateway's HTTP front (stdio back and HTTP back), against the same fast
server spoken to directly over HTTP, and against other proxies
(bench/install_proxies.sh) on the paths they can serve.

Commands are templates: `{port}` is the port the client connects to,
`{upstream}` the port of the fast HTTP server behind an HTTP-back gateway.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from bench.setups import PY, ROOT, fast_server

PROXIES = Path(os.environ.get("MCP_BENCH_PROXIES_DIR", ROOT / ".peers" / "bench-proxies"))
MCP_PROXY = PROXIES / "py" / "bin" / "mcp-proxy"
SUPERGATEWAY = PROXIES / "node" / "node_modules" / "supergateway" / "dist" / "index.js"


@dataclass(frozen=True, slots=True)
class HttpRun:
    key: str
    label: str
    client_era: str  # modern | legacy
    kind: str  # direct | gateway | mcp-proxy | supergateway
    hop: tuple[str, ...] | None  # the proxy under test (None: direct)
    ready: str = "/readyz"  # the hop's readiness path (200 once it serves)
    server: tuple[str, ...] | None = None  # a fast HTTP server: direct target or HTTP back


@dataclass(frozen=True, slots=True)
class HttpGroup:
    title: str
    direct: HttpRun
    gateway: HttpRun
    proxies: tuple[HttpRun, ...] = ()  # other proxies on the same path


def fast_http(era: str, port: str) -> tuple[str, ...]:
    return (PY, str(ROOT / "bench" / "fast_http_server.py"), "--era", era, "--port", port)


def gateway(profile_to: Path | None, tag: str, *back: str) -> tuple[str, ...]:
    head: tuple[str, ...] = (PY,)
    if profile_to is not None:
        head = (PY, "-m", "cProfile", "-o", str(profile_to / f"gateway-{tag}.prof"))
    listen = ("--listen", "127.0.0.1:{port}", "--log-level", "warning")
    return (*head, "-m", "gateway", *listen, *back)


def mcp_proxy(server: tuple[str, ...]) -> tuple[str, ...]:
    # One stdio session to the server shared by every HTTP session; JSON answers.
    port = ("--port", "{port}", "--host", "127.0.0.1", "--log-level", "WARNING")
    return (str(MCP_PROXY), *port, "--", *server)


def supergateway(server: tuple[str, ...]) -> tuple[str, ...]:
    # --stateful: one server process per Mcp-Session-Id (stateless mode spawns
    # and initializes a process per request).
    return (
        "node",
        str(SUPERGATEWAY),
        "--stdio",
        shlex.join(server),
        "--outputTransport",
        "streamableHttp",
        "--stateful",
        "--port",
        "{port}",
        "--healthEndpoint",
        "/readyz",
        "--logLevel",
        "none",
    )


def proxies_missing() -> str | None:
    """Why the other proxies cannot run, or None when they can."""
    for path in (MCP_PROXY, SUPERGATEWAY):
        if not path.exists():
            return f"{path} is missing (run: bash bench/install_proxies.sh)"
    return None


def groups(with_proxies: bool, profile_to: Path | None = None) -> list[HttpGroup]:
    legacy, modern = fast_server("legacy"), fast_server("modern")
    direct_l = HttpRun(
        "h-direct-L",
        "legacy client → fast HTTP legacy",
        "legacy",
        "direct",
        None,
        server=fast_http("legacy", "{port}"),
    )
    direct_m = HttpRun(
        "h-direct-M",
        "modern client → fast HTTP modern",
        "modern",
        "direct",
        None,
        server=fast_http("modern", "{port}"),
    )

    def gw(key: str, client: str, label: str, *back: str, http: str | None = None) -> HttpRun:
        server = fast_http(http, "{upstream}") if http else None
        return HttpRun(
            key, label, client, "gateway", gateway(profile_to, key, *back), server=server
        )

    upstream = ("--upstream", "http://127.0.0.1:{upstream}/mcp")
    out = [
        HttpGroup(
            "modern→legacy, HTTP front → stdio back",
            direct_l,
            gw("h-gw-ML", "modern", "modern client → gateway → stdio fast legacy", "--", *legacy),
        ),
        HttpGroup(
            "legacy→modern, HTTP front → stdio back",
            direct_m,
            gw("h-gw-LM", "legacy", "legacy client → gateway → stdio fast modern", "--", *modern),
        ),
        HttpGroup(
            "modern→legacy, HTTP ↔ HTTP",
            direct_l,
            gw(
                "h-gw-ML-h",
                "modern",
                "modern client → gateway → fast HTTP legacy",
                *upstream,
                http="legacy",
            ),
        ),
        HttpGroup(
            "legacy→modern, HTTP ↔ HTTP",
            direct_m,
            gw(
                "h-gw-LM-h",
                "legacy",
                "legacy client → gateway → fast HTTP modern",
                *upstream,
                http="modern",
            ),
        ),
    ]
    ll_proxies: tuple[HttpRun, ...] = ()
    mm_proxies: tuple[HttpRun, ...] = ()
    if with_proxies:
        ll_proxies = (
            HttpRun(
                "h-mcpproxy-LL",
                "legacy client → mcp-proxy → stdio fast legacy",
                "legacy",
                "mcp-proxy",
                mcp_proxy(legacy),
                ready="/status",
            ),
            HttpRun(
                "h-supergw-LL",
                "legacy client → supergateway → stdio fast legacy",
                "legacy",
                "supergateway",
                supergateway(legacy),
            ),
        )
        mm_proxies = (
            HttpRun(
                "h-supergw-MM",
                "modern client → supergateway → stdio fast modern",
                "modern",
                "supergateway",
                supergateway(modern),
            ),
        )
    out += [
        HttpGroup(
            "legacy→legacy, HTTP → stdio, other proxies",
            direct_l,
            gw("h-gw-LL", "legacy", "legacy client → gateway → stdio fast legacy", "--", *legacy),
            ll_proxies,
        ),
        HttpGroup(
            "modern→modern, HTTP → stdio, other proxies",
            direct_m,
            gw("h-gw-MM", "modern", "modern client → gateway → stdio fast modern", "--", *modern),
            mm_proxies,
        ),
    ]
    return out


def runs_in_order(all_groups: list[HttpGroup]) -> list[HttpRun]:
    """Each run once, baselines next to the runs they are compared with."""
    seen: dict[str, HttpRun] = {}
    for group in all_groups:
        for run in (group.direct, group.gateway, *group.proxies):
            seen.setdefault(run.key, run)
    return list(seen.values())
