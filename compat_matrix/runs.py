"""One run of a cell: a client x server pair, direct or through the gateway
(`Run`), and what to start for it (`Launch`); the plan: every run of the ready
cells, filtered by --only and --skip (`plan`), or the one run a test asks for
(`find_run`)."""

from __future__ import annotations

import fnmatch
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compat_matrix.cells import Cell, Matrix, Peer, Via, cell_id
from compat_matrix.environment import Context
from compat_matrix.processes import HOST, Background, free_port

# How a client that does not spawn its server is told where to connect, by front.
URL_OPTIONS = {"http": "--url", "sse": "--sse-url"}
# The path of the gateway's endpoint a client of that front connects to.
FRONT_PATHS = {"http": "/mcp", "sse": "/sse"}


@dataclass(frozen=True)
class Run:
    cell: Cell
    client: Peer
    server: Peer
    via: Via
    # What an MRTR client checks when not the cell's feature (elicitation-url-required).
    feature_arg: str | None = None
    options: tuple[str, ...] = ()  # extra client options, e.g. ("--check-errors",)

    @property
    def pair(self) -> str:
        return f"{self.client.name}>{self.server.name}"

    @property
    def checks(self) -> str:
        """The feature this run is judged on."""
        return self.feature_arg or self.cell.feature

    @property
    def key(self) -> str:
        """`<cell id>:<client>><server>@<via>`; --only matches against it."""
        key = f"{self.cell.id}:{self.pair}@{self.via}"
        extra = [self.feature_arg] if self.feature_arg else []
        extra += self.options
        return f"{key}[{' '.join(extra)}]" if extra else key

    @property
    def route(self) -> str:
        """`front→back`, e.g. `http→stdio`."""
        return f"{self.cell.front}→{self.cell.back}"

    def launch(
        self, ctx: Context, feature: str | None = None, ports: Callable[[], int] | None = None
    ) -> Launch:
        """What to start for this run: the HTTP server and/or HTTP gateway that
        run.py starts itself (in order), and the client's command line. `feature`
        overrides what {feature} becomes (`all` when one client run serves several
        cells); `ports` hands out the free ports (default: `free_port`)."""
        next_port = ports or free_port
        front, back = self.cell.front, self.cell.back
        background: list[Background] = []
        server: list[str] = []
        upstream: str | None = None
        if back == "http":
            if self.server.http_command is None:
                raise ValueError(f"server {self.server.name} has no http_command")
            port = next_port()
            upstream = f"http://{HOST}:{port}/mcp"
            argv = ctx.expand(self.server.http_command, port=port)
            background.append(Background("server", argv, port, None))
        else:
            server = ctx.expand(self.server.command)
        url: str | None = None
        if self.via == "direct":
            if front != back:
                raise ValueError(f"{self.key}: no direct run from {front} to {back}")
            url = upstream
        else:
            listen: list[str] = []
            gateway_port: int | None = None
            if front in URL_OPTIONS:
                gateway_port = next_port()
                listen = ["--listen", f"{HOST}:{gateway_port}"]
            if upstream is not None:
                gateway = ctx.expand(ctx.gateway_upstream_command, listen=listen, upstream=upstream)
            else:
                gateway = ctx.expand(ctx.gateway_command, server, listen=listen)
            if gateway_port is None:
                server = gateway
            else:
                ready = f"http://{HOST}:{gateway_port}/readyz"
                background.append(Background("gateway", gateway, gateway_port, ready))
                url = f"http://{HOST}:{gateway_port}{FRONT_PATHS[front]}"
        client = ctx.expand(
            self.client.command,
            server,
            feature=feature or self.checks,
            options=self.options,
            url=url,
            url_option=URL_OPTIONS.get(front, "--url"),
        )
        return Launch(tuple(background), client, self.cell.env)

    def argv(self, ctx: Context, feature: str | None = None) -> list[str]:
        """The client's command line (HTTP ports shown as 0)."""
        return self.launch(ctx, feature, ports=lambda: 0).client


@dataclass(frozen=True)
class Launch:
    background: tuple[Background, ...]
    client: list[str]
    env: tuple[tuple[str, str], ...] = ()  # the cell's additions to every process's environment

    def describe(self) -> list[str]:
        """Each command, shell-quoted, with its role (the cell's environment first)."""
        env = [f"env: {' '.join(f'{k}={shlex.quote(v)}' for k, v in self.env)}"] if self.env else []
        return (
            env
            + [f"{b.role}: {shlex.join(b.argv)}" for b in self.background]
            + [f"client: {shlex.join(self.client)}"]
        )


def expand(matrix: Matrix, cell: Cell, vias: Sequence[Via] = ("direct", "gateway")) -> list[Run]:
    runs = []
    for client in cell.clients:
        for server in cell.servers:
            for via in vias:
                if via == "direct" and cell.direct == "n/a":
                    continue
                runs.append(Run(cell, matrix.clients[client], matrix.servers[server], via))
    return runs


def matches(pattern: str, *names: str) -> bool:
    if any(ch in pattern for ch in "*?["):
        return any(fnmatch.fnmatchcase(n, pattern) for n in names)
    return any(pattern in n for n in names)


def plan(matrix: Matrix, only: str | None = None, skip: Sequence[str] = ()) -> list[Run]:
    """Every run of every ready cell, filtered by --only and --skip (glob, else
    substring, matched against `<cell id>:<client>><server>@<via>`)."""
    runs = [run for cell in matrix.cells if cell.ready for run in expand(matrix, cell)]
    if only:
        runs = [r for r in runs if matches(only, r.key)]
    return [r for r in runs if not any(matches(pattern, r.key) for pattern in skip)]


def find_run(
    matrix: Matrix,
    client: str,
    server: str,
    via: Via,
    feature: str = "basic",
    *,
    feature_arg: str | None = None,
    options: Sequence[str] = (),
    front: str = "stdio",
    back: str = "stdio",
) -> Run:
    """The run of this client/server pair for the cell of `feature` over
    `front`→`back` (default stdio→stdio). `feature_arg` makes an MRTR client
    check something else under that cell's expectations
    (elicitation-url-required); `options` are extra client options."""
    c, s = matrix.clients[client], matrix.servers[server]
    cell = matrix.cell(cell_id(c.era, s.era, front, back, feature))
    return Run(cell, c, s, via, feature_arg=feature_arg, options=tuple(options))
