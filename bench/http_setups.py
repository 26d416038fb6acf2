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

from bench.setups import PY, ROOT, fast_server, py1_server

PROXIES = Path(os.environ.get("MCP_BENCH_PROXIES_DIR", ROOT / ".peers" / "bench-proxies"))
MCP_PROXY = PROXIES / "py" / "bin" / "mcp-proxy"
SUPERGATEWAY = PROXIES / "node" / "node_modules" / "supergateway" / "dist" / "index.js"
MCP_REMOTE = PROXIES / "node" / "node_modules" / "mcp-remote" / "dist" / "proxy.js"
FASTMCP_PY = PROXIES / "fastmcp" / "bin" / "python"
# What each other proxy needs on disk (bench/install_proxies.sh), by its kind.
PROXY_FILES = {
    "mcp-proxy": MCP_PROXY,
    "supergateway": SUPERGATEWAY,
    "mcp-remote": MCP_REMOTE,
    "fastmcp": FASTMCP_PY,
}
UPSTREAM_URL = "http://127.0.0.1:{upstream}/mcp"
OTHER_PROXIES = frozenset(PROXY_FILES)  # the kinds of HttpRun that are another proxy


@dataclass(frozen=True, slots=True)
class HttpRun:
    key: str
    label: str
    client_era: str  # modern | legacy
    kind: str  # direct | gateway | floor | mcp-proxy | supergateway | mcp-remote | fastmcp
    hop: tuple[str, ...] | None  # the proxy under test (None: direct)
    ready: str = "/readyz"  # the hop's readiness path (200 once it serves)
    server: tuple[str, ...] | None = None  # an HTTP server: direct target or HTTP back
    # How the client speaks to the hop: http | stdio (spawns the hop, or with no
    # hop the stdio server itself) | sse (the deprecated HTTP+SSE transport).
    front: str = "http"
    # The server's readiness: 200 on this path, or (None) any answer to GET /mcp,
    # for a server with no health route (mcp 1.30 FastMCP).
    server_ready: str | None = "/readyz"
    work: str = "echo"  # echo | ask (MRTR interactions; the client declares elicitation)


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
    real_server: bool = False  # judged by gateway/direct req/s (a real server), not floors


@dataclass(frozen=True, slots=True)
class MrtrHttp:
    """An elicitation round trip over HTTP (`ask` through the gateway's HTTP
    front), against a plain echo call on the same path: what the round trip adds."""

    run: HttpRun
    plain: HttpRun


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


def py1_http(port: str) -> tuple[str, ...]:
    """mcp 1.30 FastMCP (the py1 fixture server) over Streamable HTTP."""
    return (*py1_server(), "--http", port)


def fastmcp(*target: str, port: bool = True) -> tuple[str, ...]:
    """FastMCP's proxy: an HTTP front (port) or a stdio one, to a stdio server
    command or (--url) an HTTP server (bench/fastmcp_proxy.py)."""
    front = ("--port", "{port}") if port else ()
    return (str(FASTMCP_PY), str(ROOT / "bench" / "fastmcp_proxy.py"), *front, *target)


def mcp_proxy_front() -> tuple[str, ...]:
    # Client mode: a stdio server relaying to the Streamable HTTP server.
    url = (UPSTREAM_URL, "--transport", "streamablehttp", "--log-level", "WARNING")
    return (str(MCP_PROXY), *url)


def supergateway_front() -> tuple[str, ...]:
    # Streamable HTTP → stdio (streamableHttp → streamableHttp it refuses).
    return ("node", str(SUPERGATEWAY), "--streamableHttp", UPSTREAM_URL, "--logLevel", "none")


def mcp_remote() -> tuple[str, ...]:
    # A stdio front to a Streamable HTTP server; http-only: no SSE fallback probe.
    return ("node", str(MCP_REMOTE), UPSTREAM_URL, "--transport", "http-only")


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


def proxies_missing() -> dict[str, str]:
    """Why each other proxy that cannot run cannot, by kind."""
    return {
        kind: f"{path} is missing (run: bash bench/install_proxies.sh)"
        for kind, path in PROXY_FILES.items()
        if not path.exists()
    }


def groups(
    proxies: frozenset[str] = frozenset(PROXY_FILES),
    profile_to: Path | None = None,
    with_py1: bool = True,
) -> list[HttpGroup]:
    """The HTTP paths; `proxies`: the kinds of other proxy to measure on them."""
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

    def other(kind: str, *runs: HttpRun) -> tuple[HttpRun, ...]:
        return runs if kind in proxies else ()

    def fm_stdio(key: str, client: str, label: str, server: tuple[str, ...]) -> HttpRun:
        return HttpRun(key, label, client, "fastmcp", fastmcp("--", *server))

    def fm_http(key: str, client: str, label: str, http: str) -> HttpRun:
        server = fast_http(http, "{upstream}")
        hop = fastmcp("--url", UPSTREAM_URL)
        return HttpRun(key, label, client, "fastmcp", hop, server=server)

    def fm_front(key: str, client: str, label: str, http: str) -> HttpRun:
        server = fast_http(http, "{upstream}")
        hop = fastmcp("--url", UPSTREAM_URL, port=False)
        return HttpRun(key, label, client, "fastmcp", hop, server=server, front="stdio")

    upstream = ("--upstream", UPSTREAM_URL)
    out = [
        HttpGroup(
            "modern→legacy, HTTP front → stdio back",
            direct_l,
            gw("h-gw-ML", "modern", "modern client → gateway → stdio fast legacy", "--", *legacy),
            other(
                "fastmcp",
                fm_stdio(
                    "h-fastmcp-ML", "modern", "modern client → FastMCP → stdio fast legacy", legacy
                ),
            ),
            floors=(floor_l,),
        ),
        HttpGroup(
            "legacy→modern, HTTP front → stdio back",
            direct_m,
            gw("h-gw-LM", "legacy", "legacy client → gateway → stdio fast modern", "--", *modern),
            other(
                "fastmcp",
                fm_stdio(
                    "h-fastmcp-LM", "legacy", "legacy client → FastMCP → stdio fast modern", modern
                ),
            ),
            floors=(floor_m,),
        ),
        HttpGroup(
            "modern→legacy, stdio front → HTTP back",
            direct_l,
            stdio_gw(
                "s-gw-ML-h", "modern", "stdio modern client → gateway → fast HTTP legacy", "legacy"
            ),
            other(
                "fastmcp",
                fm_front(
                    "s-fastmcp-ML-h",
                    "modern",
                    "stdio modern client → FastMCP → fast HTTP legacy",
                    "legacy",
                ),
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
            other(
                "fastmcp",
                fm_front(
                    "s-fastmcp-LM-h",
                    "legacy",
                    "stdio legacy client → FastMCP → fast HTTP modern",
                    "modern",
                ),
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
            other(
                "fastmcp",
                fm_http(
                    "h-fastmcp-ML-h",
                    "modern",
                    "modern client → FastMCP → fast HTTP legacy",
                    "legacy",
                ),
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
            other(
                "fastmcp",
                fm_http(
                    "h-fastmcp-LM-h",
                    "legacy",
                    "legacy client → FastMCP → fast HTTP modern",
                    "modern",
                ),
            ),
            path=HTTP_HTTP,
            floors=(floor_l, sfloor_m),
        ),
    ]
    ll_proxies = other(
        "mcp-proxy",
        HttpRun(
            "h-mcpproxy-LL",
            "legacy client → mcp-proxy → stdio fast legacy",
            "legacy",
            "mcp-proxy",
            mcp_proxy(legacy),
            ready="/status",
        ),
    ) + other(
        "supergateway",
        HttpRun(
            "h-supergw-LL",
            "legacy client → supergateway → stdio fast legacy",
            "legacy",
            "supergateway",
            supergateway(legacy),
        ),
    )
    ll_proxies += other(
        "fastmcp",
        fm_stdio("h-fastmcp-LL", "legacy", "legacy client → FastMCP → stdio fast legacy", legacy),
    )
    mm_proxies = other(
        "supergateway",
        HttpRun(
            "h-supergw-MM",
            "modern client → supergateway → stdio fast modern",
            "modern",
            "supergateway",
            supergateway(modern),
        ),
    ) + other(
        "fastmcp",
        fm_stdio("h-fastmcp-MM", "modern", "modern client → FastMCP → stdio fast modern", modern),
    )
    out += [
        HttpGroup(
            "legacy→legacy, HTTP → stdio",
            direct_l,
            gw("h-gw-LL", "legacy", "legacy client → gateway → stdio fast legacy", "--", *legacy),
            ll_proxies,
            floors=(floor_l,),
        ),
        HttpGroup(
            "modern→modern, HTTP → stdio",
            direct_m,
            gw("h-gw-MM", "modern", "modern client → gateway → stdio fast modern", "--", *modern),
            mm_proxies,
            floors=(floor_m,),
        ),
        HttpGroup(
            "legacy→legacy, stdio front → HTTP back",
            direct_l,
            stdio_gw(
                "s-gw-LL-h", "legacy", "stdio legacy client → gateway → fast HTTP legacy", "legacy"
            ),
            other(
                "mcp-proxy",
                HttpRun(
                    "s-mcpproxy-LL-h",
                    "stdio legacy client → mcp-proxy → fast HTTP legacy",
                    "legacy",
                    "mcp-proxy",
                    mcp_proxy_front(),
                    server=fast_http("legacy", "{upstream}"),
                    front="stdio",
                ),
            )
            + other(
                "supergateway",
                HttpRun(
                    "s-supergw-LL-h",
                    "stdio legacy client → supergateway → fast HTTP legacy",
                    "legacy",
                    "supergateway",
                    supergateway_front(),
                    server=fast_http("legacy", "{upstream}"),
                    front="stdio",
                ),
            )
            + other(
                "mcp-remote",
                HttpRun(
                    "s-mcpremote-LL-h",
                    "stdio legacy client → mcp-remote → fast HTTP legacy",
                    "legacy",
                    "mcp-remote",
                    mcp_remote(),
                    server=fast_http("legacy", "{upstream}"),
                    front="stdio",
                ),
            )
            + other(
                "fastmcp",
                fm_front(
                    "s-fastmcp-LL-h",
                    "legacy",
                    "stdio legacy client → FastMCP → fast HTTP legacy",
                    "legacy",
                ),
            ),
            path=STDIO_HTTP,
            floors=(sfloor_l,),
        ),
        HttpGroup(
            "modern→modern, stdio front → HTTP back",
            direct_m,
            stdio_gw(
                "s-gw-MM-h", "modern", "stdio modern client → gateway → fast HTTP modern", "modern"
            ),
            other(
                "fastmcp",
                fm_front(
                    "s-fastmcp-MM-h",
                    "modern",
                    "stdio modern client → FastMCP → fast HTTP modern",
                    "modern",
                ),
            ),
            path=STDIO_HTTP,
            floors=(sfloor_m,),
        ),
    ]
    if with_py1:
        out += py1_groups(profile_to)
    return out


def py1_groups(profile_to: Path | None) -> list[HttpGroup]:
    """A real server, mcp 1.30 FastMCP, behind the gateway's HTTP front (stdio
    back), its HTTP back (stdio front) and both, against a legacy client speaking
    Streamable HTTP to the same server directly."""
    py1 = py1_server()
    direct = HttpRun(
        "h-py1-direct",
        "legacy client → py1_server over HTTP",
        "legacy",
        "direct",
        None,
        server=py1_http("{port}"),
        server_ready=None,
    )
    back = ("--upstream", UPSTREAM_URL)
    title = "modern→legacy, real server (mcp 1.30 FastMCP)"
    return [
        HttpGroup(
            f"{title}, HTTP front → stdio back",
            direct,
            HttpRun(
                "h-gw-py1",
                "modern client → gateway → stdio py1_server",
                "modern",
                "gateway",
                gateway(profile_to, "h-gw-py1", "--", *py1),
            ),
            real_server=True,
        ),
        HttpGroup(
            f"{title}, stdio front → HTTP back",
            direct,
            HttpRun(
                "s-gw-py1-h",
                "stdio modern client → gateway → py1_server over HTTP",
                "modern",
                "gateway",
                stdio_gateway(profile_to, "s-gw-py1-h"),
                server=py1_http("{upstream}"),
                front="stdio",
                server_ready=None,
            ),
            path=STDIO_HTTP,
            real_server=True,
        ),
        HttpGroup(
            f"{title}, HTTP ↔ HTTP",
            direct,
            HttpRun(
                "h-gw-py1-h",
                "modern client → gateway → py1_server over HTTP",
                "modern",
                "gateway",
                gateway(profile_to, "h-gw-py1-h", *back),
                server=py1_http("{upstream}"),
                server_ready=None,
            ),
            path=HTTP_HTTP,
            real_server=True,
        ),
    ]


def mrtr_http(all_groups: list[HttpGroup], profile_to: Path | None = None) -> MrtrHttp:
    """`ask` through the gateway's HTTP front to fast legacy, and h-gw-ML's echo."""
    plain = next(g.gateway for g in all_groups if g.gateway.key == "h-gw-ML")
    run = HttpRun(
        "h-mrtr-gw",
        "modern client → gateway → stdio fast legacy, ask: input_required + retry",
        "modern",
        "gateway",
        gateway(profile_to, "h-mrtr-gw", "--", *fast_server("legacy")),
        work="ask",
    )
    return MrtrHttp(run, plain)


def runs_in_order(all_groups: list[HttpGroup]) -> list[HttpRun]:
    """Each run once, baselines next to the runs they are compared with."""
    seen: dict[str, HttpRun] = {}
    for group in all_groups:
        floors = [run for f in group.floors for run in (f.direct, f.run)]
        for run in (group.direct, *floors, group.gateway, *group.proxies):
            seen.setdefault(run.key, run)
    return list(seen.values())
