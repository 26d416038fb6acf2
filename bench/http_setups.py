"""What the `http` group measures: Streamable HTTP clients against the
gateway's HTTP front (stdio back and HTTP back), stdio clients against its
HTTP back, each against the same fast server spoken to directly over HTTP,
against the floors of issue #12 (a bare Python hop doing the same transport
work: bench/http_stdio_floor.py, bench/stdio_http_floor.py) and against
other proxies (bench/install_proxies.sh) on the paths they can serve.

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
    kind: str  # direct | gateway | floor | mcp-proxy | supergateway
    hop: tuple[str, ...] | None  # the proxy under test (None: direct)
    ready: str = "/readyz"  # the hop's readiness path (200 once it serves)
    server: tuple[str, ...] | None = None  # a fast HTTP server: direct target or HTTP back
    front: str = "http"  # how the client speaks to the hop: http | stdio (spawns the hop)


@dataclass(frozen=True, slots=True)
class Floor:
    """A floor run and the direct run its added p50 is measured against."""

    run: HttpRun
    direct: HttpRun


# Which of issue #12's goals a group is judged by (against its floors).
HTTP_STDIO, STDIO_HTTP, HTTP_HTTP = (
    "HTTP front → stdio back",
    "stdio front → HTTP back",
    "HTTP ↔ HTTP",
)


@dataclass(frozen=True, slots=True)
class HttpGroup:
    title: str
    direct: HttpRun
    gateway: HttpRun
    proxies: tuple[HttpRun, ...] = ()  # other proxies on the same path
    path: str = HTTP_STDIO
    floors: tuple[Floor, ...] = ()  # HTTP ↔ HTTP: the front's and the back's


def fast_http(era: str, port: str) -> tuple[str, ...]:
    return (PY, str(ROOT / "bench" / "fast_http_server.py"), "--era", era, "--port", port)


def gateway(profile_to: Path | None, tag: str, *back: str) -> tuple[str, ...]:
    head: tuple[str, ...] = (PY,)
    if profile_to is not None:
        head = (PY, "-m", "cProfile", "-o", str(profile_to / f"gateway-{tag}.prof"))
    listen = ("--listen", "127.0.0.1:{port}", "--log-level", "warning")
    return (*head, "-m", "gateway", *listen, *back)


def http_stdio_floor(server: tuple[str, ...]) -> tuple[str, ...]:
    return (PY, str(ROOT / "bench" / "http_stdio_floor.py"), "--port", "{port}", "--", *server)


def raw_http(era: str) -> tuple[str, ...]:
    """The HTTP→stdio floor's HTTP server with fast_server's logic inline (no hop)."""
    script = str(ROOT / "bench" / "http_stdio_floor.py")
    return (PY, script, "--port", "{port}", "--inline", era)


def stdio_http_floor() -> tuple[str, ...]:
    url = "http://127.0.0.1:{upstream}/mcp"
    return (PY, str(ROOT / "bench" / "stdio_http_floor.py"), "--url", url)


def stdio_gateway(profile_to: Path | None, tag: str) -> tuple[str, ...]:
    head: tuple[str, ...] = (PY,)
    if profile_to is not None:
        head = (PY, "-m", "cProfile", "-o", str(profile_to / f"gateway-{tag}.prof"))
    upstream = ("--upstream", "http://127.0.0.1:{upstream}/mcp", "--log-level", "warning")
    return (*head, "-m", "gateway", *upstream)


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
    # The HTTP→stdio floors' baseline: their own HTTP server answering inline.
    # (fast_http_server's uvicorn + ASGI cost more than the floor's whole hop.)
    raw_l = HttpRun(
        "h-raw-L",
        "legacy client → raw asyncio HTTP, fast legacy inline",
        "legacy",
        "direct",
        None,
        server=raw_http("legacy"),
    )
    raw_m = HttpRun(
        "h-raw-M",
        "modern client → raw asyncio HTTP, fast modern inline",
        "modern",
        "direct",
        None,
        server=raw_http("modern"),
    )
    # The floors: no era translation, so each client speaks the server's era.
    floor_l = Floor(
        HttpRun(
            "h-floor-L",
            "legacy client → HTTP→stdio floor → stdio fast legacy",
            "legacy",
            "floor",
            http_stdio_floor(legacy),
        ),
        raw_l,
    )
    floor_m = Floor(
        HttpRun(
            "h-floor-M",
            "modern client → HTTP→stdio floor → stdio fast modern",
            "modern",
            "floor",
            http_stdio_floor(modern),
        ),
        raw_m,
    )
    sfloor_l = Floor(
        HttpRun(
            "s-floor-L-h",
            "stdio legacy client → stdio→HTTP floor → fast HTTP legacy",
            "legacy",
            "floor",
            stdio_http_floor(),
            server=fast_http("legacy", "{upstream}"),
            front="stdio",
        ),
        direct_l,
    )
    sfloor_m = Floor(
        HttpRun(
            "s-floor-M-h",
            "stdio modern client → stdio→HTTP floor → fast HTTP modern",
            "modern",
            "floor",
            stdio_http_floor(),
            server=fast_http("modern", "{upstream}"),
            front="stdio",
        ),
        direct_m,
    )

    def gw(key: str, client: str, label: str, *back: str, http: str | None = None) -> HttpRun:
        server = fast_http(http, "{upstream}") if http else None
        return HttpRun(
            key, label, client, "gateway", gateway(profile_to, key, *back), server=server
        )

    def stdio_gw(key: str, client: str, label: str, http: str) -> HttpRun:
        command = stdio_gateway(profile_to, key)
        server = fast_http(http, "{upstream}")
        return HttpRun(key, label, client, "gateway", command, server=server, front="stdio")

    upstream = ("--upstream", "http://127.0.0.1:{upstream}/mcp")
    out = [
        HttpGroup(
            "modern→legacy, HTTP front → stdio back",
            direct_l,
            gw("h-gw-ML", "modern", "modern client → gateway → stdio fast legacy", "--", *legacy),
            floors=(floor_l,),
        ),
        HttpGroup(
            "legacy→modern, HTTP front → stdio back",
            direct_m,
            gw("h-gw-LM", "legacy", "legacy client → gateway → stdio fast modern", "--", *modern),
            floors=(floor_m,),
        ),
        HttpGroup(
            "modern→legacy, stdio front → HTTP back",
            direct_l,
            stdio_gw(
                "s-gw-ML-h", "modern", "stdio modern client → gateway → fast HTTP legacy", "legacy"
            ),
            path=STDIO_HTTP,
            floors=(sfloor_l,),
        ),
        HttpGroup(
            "legacy→modern, stdio front → HTTP back",
            direct_m,
            stdio_gw(
                "s-gw-LM-h", "legacy", "stdio legacy client → gateway → fast HTTP modern", "modern"
            ),
            path=STDIO_HTTP,
            floors=(sfloor_m,),
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
            path=HTTP_HTTP,
            floors=(floor_m, sfloor_l),  # the client's era in front, the server's behind
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
            path=HTTP_HTTP,
            floors=(floor_l, sfloor_m),
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
            floors=(floor_l,),
        ),
        HttpGroup(
            "modern→modern, HTTP → stdio, other proxies",
            direct_m,
            gw("h-gw-MM", "modern", "modern client → gateway → stdio fast modern", "--", *modern),
            mm_proxies,
            floors=(floor_m,),
        ),
    ]
    return out


def runs_in_order(all_groups: list[HttpGroup]) -> list[HttpRun]:
    """Each run once, baselines next to the runs they are compared with."""
    seen: dict[str, HttpRun] = {}
    for group in all_groups:
        floors = [run for f in group.floors for run in (f.direct, f.run)]
        for run in (group.direct, *floors, group.gateway, *group.proxies):
            seen.setdefault(run.key, run)
    return list(seen.values())
