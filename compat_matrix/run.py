#!/usr/bin/env python3
"""Run the compatibility matrix with real peers and write REPORT.md.

    python compat_matrix/run.py [--only PATTERN] [--jobs N] [--out compat_matrix/REPORT.md]

Every "ready" cell of `cells.toml` is expanded into its client x server peer
pairs, and every pair runs twice: DIRECT and THROUGH THE GATEWAY. How depends
on the cell's front (client ↔ gateway) and back (gateway ↔ server) transports:

    stdio→stdio  direct: the client spawns the server; gateway: the client
                 spawns the gateway, which spawns the server
    stdio→http   the server serves HTTP on a free 127.0.0.1 port (run.py starts
                 it and waits until it accepts connections); the client spawns
                 `gateway --upstream URL`. No direct run (n/a).
    http→stdio   run.py starts `gateway --listen 127.0.0.1:PORT -- SERVER` and
                 waits for its /readyz; the client connects with `--url`. No
                 direct run (n/a).
    http→http    the server on HTTP as above; direct: the client connects to
                 the server's URL; gateway: `gateway --listen ... --upstream URL`
                 and the client connects to the gateway's URL.
    sse→stdio,   legacy clients only: the gateway starts as for an http front,
    sse→http     and the client connects with `--sse-url http://127.0.0.1:PORT/sse`
                 (the deprecated HTTP+SSE transport). No direct run (n/a): no
                 back is HTTP+SSE.

Every client gets the cell's feature (`--feature F`). A basic or
notifications run is judged on the client's whole report, and a notifications
(tasks) run must also contain the client's `notifications: ` (`tasks: `) steps.
A cell's `env` is added to the environment of all its processes (the gateway
reads its `MCP_ERA_GATEWAY_*` settings there). An MRTR client's
run is judged on that feature's steps of its report; when all four MRTR cells
of one client x server pair and route are planned, one client run with
`--feature all` serves them (`--separate-features` runs one per cell).
Each client run has a hard timeout, runs in its own process group and is
tagged through its environment, so everything it started (including upstream
servers that the gateway put in sessions of their own) is found and killed at
the end. The HTTP servers and gateways that run.py starts itself get the same
tag, their own process groups, and are stopped (SIGTERM, then SIGKILL) by
process group once the client has exited. The exit status is 1 iff an
observed outcome differs from the expected one (a direct run that works where
the spec says it fails counts), 2 if the matrix or the peers are unusable.

The module is also the library the real-peer tests use: `load_matrix`,
`find_run`, `run_many`, `judge`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import fnmatch
import hashlib
import json
import os
import platform
import random
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run as a script: `compat_matrix` is importable
from compat_matrix.conformance import report as conformance_report  # noqa: E402

CONFORMANCE_HEADING = "## Conformance suite through the gateway"
REPO = HERE.parent
CELLS_FILE = HERE / "cells.toml"
DEFAULT_REPORT = HERE / "REPORT.md"
PEER_SRC = HERE / "peers"

ERAS = ("modern", "legacy", "dual")
# The server dimension: the three eras, and "dual-push", a dual-era server whose
# tools push their server requests on the session whatever the era (the SDK 2.x
# everything-server style; issue #10). Such a tool has no back-channel on a
# modern request, which its cells expect (`tool_error`).
SERVER_ERAS = (*ERAS, "dual-push")
# Backs, and the fronts every client era has.
TRANSPORTS = ("stdio", "http")
# Fronts only a legacy client uses: HTTP+SSE (2024-11-05, deprecated since
# 2025-03-26) predates the modern era, so a modern or dual-era client never
# speaks it. The gateway serves it (`GET /sse`, `POST /messages`), but no back is SSE.
LEGACY_FRONTS = ("sse",)
FRONTS = (*TRANSPORTS, *LEGACY_FRONTS)
FEATURES = (
    "basic",
    "elicitation-form",
    "elicitation-url",
    "sampling",
    "roots",
    "notifications",
    "tasks",
)
# The features the MRTR fixture clients check, one tools/call each; `--feature all`
# is exactly these four (the other clients check `basic` or `notifications`).
# elicitation-url-required (the -32042 path) is a client option that no cell
# has: tests run it with `find_run(..., feature_arg=...)`.
MRTR_FEATURES = ("elicitation-form", "elicitation-url", "sampling", "roots")
URL_REQUIRED = "elicitation-url-required"
# The steps of a client's notifications check start with this.
NOTIFY_STEP = "notifications: "
# ... and those of its tasks check (io.modelcontextprotocol/tasks, issue #16) with this;
# its `tasks: path` step says what happened (task statuses, or the ordinary answers).
TASKS_STEP = "tasks: "
# The features judged on the client's whole report that must hold their own steps.
STEPPED_FEATURES = {"notifications": NOTIFY_STEP, "tasks": TASKS_STEP}
OUTCOMES = ("works", "fails", "n/a")
STATUSES = ("ready", "not yet")
# Set in every run's environment; the fixture clients hand their whole
# environment to the servers they spawn, and so does the gateway.
RUN_TAG_VAR = "MCP_COMPAT_RUN"
INSTALL_HINT = "run `bash peers/install.sh` (or set MCP_PEERS_DIR to an installed peers dir)"

Via = Literal["direct", "gateway"]
VIAS: tuple[Via, ...] = ("direct", "gateway")
ROUTES = tuple((f, b) for f in FRONTS for b in TRANSPORTS)  # (front, back)
# How a client that does not spawn its server is told where to connect, by front.
URL_OPTIONS = {"http": "--url", "sse": "--sse-url"}
# The path of the gateway's endpoint a client of that front connects to.
FRONT_PATHS = {"http": "/mcp", "sse": "/sse"}


def fronts_for(client_era: str) -> tuple[str, ...]:
    """The fronts a client of this era can use: HTTP+SSE is legacy-only."""
    return FRONTS if client_era == "legacy" else TRANSPORTS


def routes_for(client_era: str) -> tuple[tuple[str, str], ...]:
    """(front, back) routes of the matrix for a client of this era."""
    return tuple((f, b) for f, b in ROUTES if f in fronts_for(client_era))


HOST = "127.0.0.1"  # every HTTP peer is reached here, whatever it binds


class MatrixError(Exception):
    """cells.toml is inconsistent; the message lists every problem found."""


# -- the data ------------------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    name: str
    role: Literal["client", "server"]
    era: str
    label: str
    command: str
    transports: tuple[str, ...]
    features: tuple[str, ...]
    unused: str | None = None
    # Servers: the command that serves Streamable HTTP at http://127.0.0.1:{port}/mcp.
    http_command: str | None = None

    @property
    def takes_feature(self) -> bool:
        """Its command has a {feature} placeholder: it is told what to check."""
        return "{feature}" in self.command

    @property
    def mrtr(self) -> bool:
        """An MRTR fixture client: judged per feature on its report's steps."""
        return bool(set(self.features) & set(MRTR_FEATURES))


@dataclass(frozen=True)
class Cell:
    id: str
    client_era: str
    server_era: str
    front: str
    back: str
    feature: str
    clients: tuple[str, ...]
    servers: tuple[str, ...]
    direct: str
    direct_era: str | None
    gateway: str
    gateway_era: str | None
    status: str
    issues: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # why a peer is not listed, etc.
    # An MRTR cell whose server answers the feature's tool call with an error,
    # direct and through the gateway alike (a push-style tool on a modern
    # request): every other step must pass, and the call must fail with an
    # error containing this text.
    tool_error: str | None = None
    # Added to the environment of every process of the cell's runs, e.g. the
    # gateway's MCP_ERA_GATEWAY_TASKS_AFTER for the tasks cells.
    env: tuple[tuple[str, str], ...] = ()

    @property
    def note(self) -> str | None:
        return "; ".join(self.notes) or None

    @property
    def ready(self) -> bool:
        return self.status == "ready"

    def expected(self, via: Via) -> tuple[str, str | None]:
        """(outcome, era) this cell expects for a run `via` direct or gateway."""
        if via == "direct":
            return self.direct, self.direct_era
        return self.gateway, self.gateway_era


@dataclass(frozen=True)
class Matrix:
    cells: tuple[Cell, ...]
    clients: dict[str, Peer]
    servers: dict[str, Peer]
    gateway_command: str
    client_timeout: float
    hard_timeout: float
    jobs: int
    spec: dict[str, dict[str, str]]
    gateway_upstream_command: str = ""
    start_timeout: float = 30.0

    def cell(self, cell_id: str) -> Cell:
        for cell in self.cells:
            if cell.id == cell_id:
                return cell
        raise KeyError(cell_id)


def cell_id(client_era: str, server_era: str, front: str, back: str, feature: str) -> str:
    return f"{client_era}-{server_era}.{front}-{back}.{feature}"


def _strs(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"expected a list of strings, got {value!r}")
    return tuple(value)


def _peer(name: str, role: Literal["client", "server"], raw: dict[str, Any]) -> Peer:
    return Peer(
        name=name,
        role=role,
        era=str(raw["era"]),
        label=str(raw.get("label", name)),
        command=str(raw["command"]),
        transports=_strs(raw.get("transports", ["stdio"])),
        features=_strs(raw.get("features", [])),
        unused=raw.get("unused"),
        http_command=raw.get("http_command"),
    )


def _cell(raw: dict[str, Any]) -> Cell:
    return Cell(
        id=str(raw["id"]),
        client_era=str(raw["client_era"]),
        server_era=str(raw["server_era"]),
        front=str(raw["front"]),
        back=str(raw["back"]),
        feature=str(raw["feature"]),
        clients=_strs(raw.get("clients", [])),
        servers=_strs(raw.get("servers", [])),
        direct=str(raw["direct"]),
        direct_era=raw.get("direct_era"),
        gateway=str(raw["gateway"]),
        gateway_era=raw.get("gateway_era"),
        status=str(raw["status"]),
        issues=_strs(raw.get("issues", [])),
        notes=(raw["note"],) if isinstance(raw.get("note"), str) else _strs(raw.get("note", [])),
        tool_error=raw.get("tool_error"),
        env=tuple((str(k), str(v)) for k, v in dict(raw.get("env", {})).items()),
    )


def load_matrix(path: Path = CELLS_FILE) -> Matrix:
    """Parse and validate cells.toml: every dimension combination exactly once,
    consistent ids, known peers of the right era, spec-consistent expectations."""
    with path.open("rb") as fh:
        raw = tomllib.load(fh)
    problems: list[str] = []
    try:
        clients = {n: _peer(n, "client", p) for n, p in raw.get("clients", {}).items()}
        servers = {n: _peer(n, "server", p) for n, p in raw.get("servers", {}).items()}
        cells = tuple(_cell(c) for c in raw.get("cell", []))
        gateway_command = str(raw["gateway"]["command"])
        gateway_upstream_command = str(raw["gateway"]["upstream_command"])
        run_cfg = raw.get("run", {})
        spec: dict[str, dict[str, str]] = {k: dict(v) for k, v in raw.get("spec", {}).items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise MatrixError(f"{path}: malformed entry: {exc!r}") from exc

    for peer in [*clients.values(), *servers.values()]:
        if peer.era not in (ERAS if peer.role == "client" else SERVER_ERAS):
            problems.append(f"{peer.role} {peer.name}: unknown era {peer.era!r}")
        if peer.role == "client" and shlex.split(peer.command)[-2:] != ["--", "{server}"]:
            problems.append(f"client {peer.name}: command must end with `-- {{server}}`")
        if peer.role == "client" and (len(peer.features) > 1) != peer.takes_feature:
            problems.append(
                f"client {peer.name}: a client with several features (and only one) "
                "must take a {feature} placeholder"
            )
        if peer.role == "client" and peer.mrtr and not set(peer.features) <= set(MRTR_FEATURES):
            problems.append(f"client {peer.name}: an MRTR client checks only MRTR features")
    for peer in clients.values():
        unknown = set(peer.transports) - set(fronts_for(peer.era))
        if unknown:
            problems.append(
                f"client {peer.name}: a {peer.era} client has no {', '.join(sorted(unknown))} front"
            )
    for peer in servers.values():
        if not set(peer.transports) <= set(TRANSPORTS):
            problems.append(f"server {peer.name}: a server's transports are stdio and http")
        if ("http" in peer.transports) != (peer.http_command is not None):
            problems.append(f"server {peer.name}: an http transport needs an http_command")
        if peer.http_command is not None and "{port}" not in peer.http_command:
            problems.append(f"server {peer.name}: http_command needs the {{port}} placeholder")
    if "{server}" not in gateway_command.split():
        problems.append("[gateway].command must contain the {server} placeholder as a word")
    if "{upstream}" not in gateway_upstream_command.split():
        problems.append("[gateway].upstream_command must contain {upstream} as a word")
    for key, template in (
        ("command", gateway_command),
        ("upstream_command", gateway_upstream_command),
    ):
        if "{listen}" not in template.split():
            problems.append(f"[gateway].{key} must contain the {{listen}} placeholder as a word")

    seen: Counter[str] = Counter(c.id for c in cells)
    problems += [f"cell {cid}: listed {n} times" for cid, n in seen.items() if n > 1]
    wanted = {
        cell_id(ce, se, f, b, feat)
        for ce in ERAS
        for se in SERVER_ERAS
        for f, b in routes_for(ce)
        for feat in FEATURES
    }
    problems += [f"cell {cid}: missing from the matrix" for cid in sorted(wanted - set(seen))]

    for c in cells:
        where = f"cell {c.id}"
        if c.id != cell_id(c.client_era, c.server_era, c.front, c.back, c.feature):
            problems.append(f"{where}: id does not match its fields")
        if c.id not in wanted:
            problems.append(f"{where}: outside the declared dimensions")
        if c.direct not in OUTCOMES or c.gateway not in OUTCOMES or c.status not in STATUSES:
            problems.append(f"{where}: bad direct/gateway/status value")
        rule = spec.get(f"{c.client_era}-{c.server_era}", {}).get("direct")
        want_direct = "n/a" if c.front != c.back else rule
        if c.direct != want_direct:
            problems.append(f"{where}: direct={c.direct!r} but the spec says {want_direct!r}")
        if c.gateway != "works":
            problems.append(f"{where}: the gateway must make every cell work")
        if c.tool_error is not None and c.feature not in MRTR_FEATURES:
            problems.append(f"{where}: only an MRTR cell can expect a tool error")
        if c.status == "not yet" and not c.issues:
            problems.append(f"{where}: a 'not yet' cell must name the issue that adds it")
        for name in c.clients:
            client = clients.get(name)
            if client is None:
                problems.append(f"{where}: unknown client {name!r}")
            elif client.era != c.client_era:
                problems.append(f"{where}: client {name} is {client.era}, not {c.client_era}")
        for name in c.servers:
            server = servers.get(name)
            if server is None:
                problems.append(f"{where}: unknown server {name!r}")
            elif server.era != c.server_era:
                problems.append(f"{where}: server {name} is {server.era}, not {c.server_era}")
        if c.ready:
            if not c.clients or not c.servers:
                problems.append(f"{where}: a ready cell needs at least one client and server")
            for name in c.clients:
                client = clients.get(name)
                if client is not None and (
                    c.front not in client.transports or c.feature not in client.features
                ):
                    problems.append(f"{where}: client {name} cannot run {c.front}/{c.feature}")
            for name in c.servers:
                server = servers.get(name)
                if server is not None and (
                    c.back not in server.transports or c.feature not in server.features
                ):
                    problems.append(f"{where}: server {name} cannot run {c.back}/{c.feature}")
    if problems:
        raise MatrixError(f"{path}:\n  " + "\n  ".join(problems))
    return Matrix(
        cells=cells,
        clients=clients,
        servers=servers,
        gateway_command=gateway_command,
        client_timeout=float(run_cfg.get("client_timeout", 30)),
        hard_timeout=float(run_cfg.get("hard_timeout", 50)),
        jobs=int(run_cfg.get("jobs", 2)),
        spec=spec,
        gateway_upstream_command=gateway_upstream_command,
        start_timeout=float(run_cfg.get("start_timeout", 30)),
    )


# -- the environment -----------------------------------------------------------


def peers_dir() -> Path:
    """$MCP_PEERS_DIR, else <repo>/.peers (as peers/install.sh)."""
    configured = os.environ.get("MCP_PEERS_DIR")
    return Path(configured).resolve() if configured else REPO / ".peers"


def missing_peers(peers: Path | None = None) -> list[str]:
    """What peers/install.sh should have created but did not (empty when usable)."""
    peers = peers or peers_dir()
    needed = [
        peers / "py1" / "bin" / "python",
        peers / "py2" / "bin" / "python",
        peers / "node" / "node_modules" / ".bin" / "mcp-server-everything",
        peers / "node" / "node_modules" / "@modelcontextprotocol" / "client",
        peers / "node" / "node_modules" / "@modelcontextprotocol" / "server",
    ]
    return [str(p) for p in needed if not p.exists()]


DEFAULT_GATEWAY = "{python} -m gateway --log-level warning {listen} -- {server}"
DEFAULT_GATEWAY_UPSTREAM = "{python} -m gateway --log-level warning {listen} --upstream {upstream}"


@dataclass(frozen=True)
class Context:
    """What fills the placeholders of cells.toml."""

    peers: Path
    python: str = sys.executable
    client_timeout: float = 30.0
    hard_timeout: float = 50.0
    gateway_command: str = DEFAULT_GATEWAY
    gateway_upstream_command: str = DEFAULT_GATEWAY_UPSTREAM
    start_timeout: float = 30.0  # an HTTP server or gateway run.py starts must be ready by then

    @classmethod
    def for_matrix(cls, matrix: Matrix, peers: Path | None = None) -> Context:
        return cls(
            peers=peers or peers_dir(),
            client_timeout=matrix.client_timeout,
            hard_timeout=matrix.hard_timeout,
            gateway_command=matrix.gateway_command,
            gateway_upstream_command=matrix.gateway_upstream_command or DEFAULT_GATEWAY_UPSTREAM,
            start_timeout=matrix.start_timeout,
        )

    def placeholders(self) -> dict[str, str]:
        return {
            "{python}": self.python,
            "{peers}": str(self.peers),
            "{py1}": str(self.peers / "py1" / "bin" / "python"),
            "{py2}": str(self.peers / "py2" / "bin" / "python"),
            "{node_bin}": str(self.peers / "node" / "node_modules" / ".bin"),
            "{src}": str(PEER_SRC),
            "{timeout}": f"{self.client_timeout:g}",
        }

    def expand(
        self,
        template: str,
        server: Sequence[str] = (),
        *,
        feature: str | None = None,
        options: Sequence[str] = (),
        url: str | None = None,
        url_option: str = "--url",
        listen: Sequence[str] = (),
        upstream: str | None = None,
        port: int | None = None,
    ) -> list[str]:
        """Split a command template into argv; the word `{server}` becomes `server`,
        `{feature}` becomes `feature`, and `options` go just before the `--` that
        precedes `{server}` (a client's extra options). With `url`, a client's
        `-- {server}` becomes `--url URL` (Streamable HTTP), or `url_option URL`
        (`--sse-url URL` for HTTP+SSE). The gateway's words
        `{listen}` (nothing, or `--listen HOST:PORT`) and `{upstream}` (a URL),
        and a server's `{port}`, are filled in as given."""
        words: list[str] = []
        template_words = shlex.split(template)
        values = self.placeholders()
        if feature is not None:
            values["{feature}"] = feature
        if port is not None:
            values["{port}"] = str(port)
        skip = False
        for index, word in enumerate(template_words):
            if skip:
                skip = False
                continue
            if word == "{server}":
                words.extend(server)
                continue
            if word == "{listen}":
                words.extend(listen)
                continue
            if word == "{upstream}":
                if upstream is None:
                    raise ValueError(f"{template!r} needs an upstream URL")
                words.append(upstream)
                continue
            if word == "--" and template_words[index + 1 : index + 2] == ["{server}"]:
                words.extend(options)
                if url is not None:
                    words.extend([url_option, url])
                    skip = True
                    continue
            filled = word
            for key, value in values.items():
                filled = filled.replace(key, value)
            words.append(filled)
        return words


# -- one run -----------------------------------------------------------------


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
class Background:
    """A process run.py starts before the client: an HTTP server or gateway."""

    role: Literal["server", "gateway"]
    argv: list[str]
    port: int
    ready_url: str | None  # GET must answer 200 (the gateway's /readyz); None: TCP accept


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


_ports_lock = threading.Lock()
_ports_given: set[int] = set()
# Below the usual ephemeral range (32768-60999), so the source port of some
# outgoing connection cannot take a port between our check and the server's bind.
PORT_RANGE = (20000, 32000)


def free_port() -> int:
    """A port on 127.0.0.1 that is free now and that this process has not handed out."""
    with _ports_lock:
        for _ in range(1000):
            port = random.randrange(*PORT_RANGE)
            if port in _ports_given:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind((HOST, port))
                except OSError:
                    continue
            _ports_given.add(port)
            return port
    raise OSError("no free port found")


@dataclass
class Observation:
    run: Run
    ok: bool
    duration: float
    exit_code: int | None
    timed_out: bool = False
    era: str | None = None
    protocol_version: str | None = None
    route: str | None = None  # py2: server/discover or initialize
    error: str | None = None
    leftovers: list[str] = field(default_factory=list)
    stderr_tail: list[str] = field(default_factory=list)
    report: dict[str, Any] | None = None  # the client's whole report
    shared: int = 1  # how many cell runs this one client run served (--feature all)
    # MRTR: how the server's input requests reached the client; notifications:
    # how the change notifications did (the client's `notifications: delivered` step)
    input_path: str | None = None
    commands: list[str] = field(default_factory=list)  # role: command, as run (real ports)

    @property
    def outcome(self) -> str:
        return "works" if self.ok else "fails"

    @property
    def evidence(self) -> str:
        if not self.ok:
            return ("timeout: " if self.timed_out else "") + (self.error or "failed")
        bits = [self.era or "?"]
        if self.protocol_version:
            bits.append(self.protocol_version)
        if self.route:
            bits.append(f"via {self.route}")
        text = " ".join(bits)
        return f"{text}; {self.input_path}" if self.input_path else text

    def steps(self, feature: str | None = None) -> list[dict[str, Any]]:
        """The report's steps; with `feature`, only that feature's own steps."""
        steps = [s for s in (self.report or {}).get("steps") or [] if isinstance(s, dict)]
        if feature is None:
            return steps
        return [s for s in steps if _step_feature(s) == feature]


def first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _parse_report(stdout: str) -> dict[str, Any] | None:
    """The fixture clients print one JSON object; take the last line that is one."""
    for raw in reversed(stdout.strip().splitlines()):
        line = raw.strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                parsed = json.loads(line)
                if isinstance(parsed, dict):
                    return parsed
    return None


def _tagged_pids(tag: str) -> dict[int, str]:
    """Processes (other than us) whose environment carries this run's tag."""
    needle = f"{RUN_TAG_VAR}={tag}".encode()
    found: dict[int, str] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    me = os.getpid()
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone, or not ours to read
        found[int(entry.name)] = cmdline.strip()
    return found


def _signal(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _reap_tagged(tag: str, grace: float = 1.0) -> list[str]:
    """Give stragglers `grace` to exit on their own, then TERM, then KILL them.
    Returns a short description of each straggler that had to be killed."""
    deadline = time.monotonic() + grace
    left = _tagged_pids(tag)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _tagged_pids(tag)
    if not left:
        return []
    killed = [_short_cmd(cmd) for cmd in left.values()]
    _signal(left, signal.SIGTERM)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        left = _tagged_pids(tag)
        if not left:
            break
        time.sleep(0.1)
    _signal(_tagged_pids(tag), signal.SIGKILL)
    return killed


def _short_cmd(cmdline: str) -> str:
    words = cmdline.split()
    interesting = [Path(w).name for w in words if "/" in w or w.startswith("-m")] or words
    return " ".join(interesting[:3])[:80]


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=2)
            return
        except subprocess.TimeoutExpired:
            continue


def _step_feature(step: dict[str, Any]) -> str | None:
    """The MRTR feature (or notifications) a report step belongs to
    (`<feature>: ...`), else None."""
    name = str(step.get("step", ""))
    for feature in (*MRTR_FEATURES, URL_REQUIRED, *STEPPED_FEATURES):
        if name.startswith(f"{feature}: "):
            return feature
    return None


def _input_path(steps: Sequence[dict[str, Any]]) -> str | None:
    """How the input a tool needed reached the client, from its call step:
    `input_required` rounds (the raw client: keys and methods, and whether a
    requestState came along) or the callbacks the SDK called (method#request id;
    a pushed request's JSON-RPC id, or the inputRequests key when the SDK ran the
    MRTR rounds itself)."""
    calls = [s for s in steps if not str(s.get("step", "")).endswith(" listed")]
    bits: list[str] = []
    for step in calls:
        tool = str(step.get("step", "")).split(": ", 1)[-1]
        rounds = step.get("rounds")
        callbacks = step.get("callbacks")
        if isinstance(rounds, list):
            asked = [
                f"{key}={method}"
                for item in rounds
                if isinstance(item, dict)
                for key, method in (item.get("inputRequests") or {}).items()
            ]
            state = any(isinstance(i, dict) and i.get("requestState") for i in rounds)
            bits.append(
                f"{tool}: input_required x{len(rounds)} [{', '.join(asked)}]"
                + (" +requestState" if state else "")
                if rounds
                else f"{tool}: no input_required"
            )
        elif isinstance(callbacks, list):
            seen = [
                f"{c.get('method')}#{c.get('request_id')}"
                if c.get("request_id") is not None
                else str(c.get("method"))
                for c in callbacks
                if isinstance(c, dict)
            ]
            bits.append(
                f"{tool}: callbacks [{', '.join(seen)}]"
                if seen
                else f"{tool}: no callback during the call"
            )
    return "; ".join(bits) or None


def _observe(
    run: Run,
    report: dict[str, Any] | None,
    *,
    duration: float,
    exit_code: int | None,
    timed_out: bool,
    hard_timeout: float,
    leftovers: list[str],
    stderr: str,
    first_stderr: str,
    shared: int,
) -> Observation:
    """One run's observation from its client's report. A basic client's run works
    iff its report is ok (and exit 0); so does a notifications run, whose report
    must also hold the client's notifications steps (a client that ignored
    `--feature notifications` does not pass). An MRTR client's run is judged on
    the feature it
    checks: every step that belongs to no feature (connect, tools/list, the
    requestState checks, ...) and every step of this feature must pass, its
    tool call must have run, and the client must not have died (timeout, crash,
    an error outside the steps). Steps of the other features of a shared
    `--feature all` run do not count."""
    obs = Observation(
        run,
        ok=False,
        duration=duration,
        exit_code=exit_code,
        timed_out=timed_out,
        leftovers=leftovers,
        stderr_tail=stderr.strip().splitlines()[-20:],
        report=report,
        shared=shared,
    )
    if report is None:
        obs.error = (
            f"hard timeout after {hard_timeout:g}s"
            if timed_out
            else f"no JSON report (exit {exit_code}): {first_stderr or 'no stderr'}"
        )
        return obs
    obs.era = report.get("era")
    steps = obs.steps()
    for item in steps:
        if obs.protocol_version is None and isinstance(item.get("protocolVersion"), str):
            obs.protocol_version = item["protocolVersion"]
            obs.route = item.get("via")
        versions = item.get("supportedVersions")
        if obs.protocol_version is None and item.get("ok") and isinstance(versions, list):
            # raw modern client: no negotiation, the discovered versions say it
            obs.protocol_version = ",".join(str(v) for v in versions)
            obs.route = "server/discover"
    error = report.get("error")
    if not run.client.mrtr:
        obs.ok = report.get("ok") is True and exit_code == 0 and not timed_out
        if not obs.ok:
            failed = [s for s in steps if not s.get("ok")]
            detail = (
                f"failed step {failed[0].get('step')}: "
                f"{failed[0].get('error') or failed[0].get('text') or ''}"
                if failed and str(error or "").startswith("failed step: ")
                else error
            )
            obs.error = first_line(str(detail or f"exit {exit_code}"))
        prefix = STEPPED_FEATURES.get(run.checks)
        if prefix is not None:
            own = obs.steps(run.checks)
            last = "delivered" if run.checks == "notifications" else "path"
            told = [s for s in own if s.get("step") == f"{prefix}{last}"]
            obs.input_path = str(told[-1].get("path")) if told else None
            if obs.ok and not own:
                obs.ok = False
                obs.error = f"the report has no {run.checks} check"
        return obs

    feature = run.checks
    own = obs.steps(feature)
    common = [s for s in steps if _step_feature(s) is None]
    called = [s for s in own if not str(s.get("step", "")).endswith(" listed")]
    failed = [s for s in [*common, *own] if not s.get("ok")]
    # The client's own error, unless it only names a failed step (judged above).
    fatal = error is not None and not str(error).startswith("failed step: ")
    obs.input_path = _input_path(own)
    expected_error = run.cell.tool_error
    if expected_error is not None:
        # The call must fail with the server's error, and only the call.
        refused = [s for s in called if not s.get("ok")]
        others = [s for s in failed if s not in refused]
        texts = [str(s.get("error") or s.get("text") or "") for s in refused]
        if refused:
            obs.input_path = f"tool error: {first_line(texts[0], 120)}"
        if timed_out:
            obs.error = f"hard timeout after {hard_timeout:g}s"
        elif others:
            first = others[0]
            obs.error = first_line(
                f"failed step {first.get('step')}: {first.get('error') or first.get('text')}"
            )
        elif fatal:
            obs.error = first_line(str(error))
        elif not called:
            obs.error = f"the report has no {feature} tool call"
        elif len(refused) != len(called) or not all(expected_error in t for t in texts):
            obs.error = first_line(
                f"the {feature} call should fail with {expected_error!r}: "
                f"{texts[0] if texts else called[0].get('text')}"
            )
        else:
            obs.ok = True
        return obs
    if timed_out:
        obs.error = f"hard timeout after {hard_timeout:g}s"
    elif failed:
        first = failed[0]
        detail = first.get("error") or first.get("text")
        obs.error = first_line(f"failed step {first.get('step')}: {detail}")
        if fatal:  # the client's own account says more (e.g. why discover failed)
            obs.error = first_line(str(error))
    elif fatal:
        obs.error = first_line(str(error))
    elif not called:
        obs.error = f"the report has no {feature} tool call"
    elif report.get("ok") is True and exit_code != 0:
        obs.error = f"report ok, but exit {exit_code}"
    else:
        obs.ok = True
    return obs


ADDRESS_IN_USE = ("address already in use", "eaddrinuse", "errno 98")


class StartError(Exception):
    """A background process did not become ready; `retry` if it lost a port race."""

    def __init__(self, message: str, retry: bool = False) -> None:
        super().__init__(message)
        self.retry = retry


@dataclass
class Started:
    spec: Background
    proc: subprocess.Popen[bytes]
    output: IO[bytes]

    def tail(self, lines: int = 8) -> list[str]:
        self.output.seek(0)
        text = self.output.read().decode(errors="replace")
        return [f"[{self.spec.role}] {line}" for line in text.strip().splitlines()[-lines:]]


def _is_ready(spec: Background) -> bool:
    if spec.ready_url is None:
        try:
            with socket.create_connection((HOST, spec.port), timeout=0.5):
                return True
        except OSError:
            return False
    try:
        with urllib.request.urlopen(spec.ready_url, timeout=1.0) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _start(spec: Background, env: dict[str, str], timeout: float) -> Started:
    """Start `spec` in its own session (output to a temporary file) and wait until
    it is ready: it accepts TCP connections, or its ready_url answers 200."""
    output = tempfile.TemporaryFile()  # noqa: SIM115 (kept with the process, closed by its owner)
    try:
        proc = subprocess.Popen(
            spec.argv,
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        output.close()
        raise StartError(f"{spec.role} did not start: {exc}") from exc
    started = Started(spec, proc, output)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            tail = started.tail(4)
            _stop(started)
            output.close()
            text = " / ".join(tail).lower()
            retry = any(marker in text for marker in ADDRESS_IN_USE)
            raise StartError(
                f"{spec.role} exited ({proc.returncode}) before it was ready: "
                + (" / ".join(tail) or "no output"),
                retry=retry,
            )
        if _is_ready(spec):
            return started
        if time.monotonic() > deadline:
            tail = started.tail(4)
            _stop(started)
            output.close()
            raise StartError(
                f"{spec.role} not ready after {timeout:g}s on port {spec.port}: "
                + (" / ".join(tail) or "no output")
            )
        time.sleep(0.05)


def _stop(started: Started, grace: float = 3.0) -> None:
    """SIGTERM the process group, wait `grace`, then SIGKILL it; close its output."""
    proc = started.proc
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    # Anything else left in the group (the process itself has been waited for).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _start_all(
    run: Run, ctx: Context, feature: str | None, env: dict[str, str]
) -> tuple[Launch, list[Started]]:
    """Start the run's background processes in order; a port lost to a race
    (address in use) is retried with new ports, twice at most."""
    for attempt in range(3):
        launch = run.launch(ctx, feature)
        started: list[Started] = []
        try:
            for spec in launch.background:
                started.append(_start(spec, env, ctx.start_timeout))
            return launch, started
        except StartError as exc:
            for item in reversed(started):
                _stop(item)
                item.output.close()
            if not exc.retry or attempt == 2:
                raise
    raise AssertionError("unreachable")


def run_job(runs: Sequence[Run], ctx: Context) -> list[Observation]:
    """One client process for `runs`: a single run, or the MRTR runs of one
    client x server pair, route and transports that `--feature all` serves
    together. HTTP servers and gateways are started first and stopped after."""
    first = runs[0]
    feature = "all" if len(runs) > 1 else None
    tag = uuid.uuid4().hex
    env = dict(os.environ, **dict(first.cell.env))
    env.update({"MCP_PEERS_DIR": str(ctx.peers), RUN_TAG_VAR: tag})
    env.setdefault("PYTHONUNBUFFERED", "1")
    timed_out = False
    started_at = time.monotonic()
    background: list[Started] = []
    try:
        launch, background = _start_all(first, ctx, feature, env)
    except (StartError, OSError) as exc:
        leftovers = _reap_tagged(tag)
        failed = first.launch(ctx, feature, ports=lambda: 0)
        return [
            Observation(
                run,
                ok=False,
                duration=time.monotonic() - started_at,
                exit_code=None,
                error=f"setup failed: {first_line(str(exc), 300)}",
                leftovers=leftovers,
                commands=failed.describe(),
                shared=len(runs),
            )
            for run in runs
        ]
    # Temporary files, not pipes: a grandchild holding a pipe open must not
    # block us after the client itself has exited.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            try:
                proc = subprocess.Popen(
                    launch.client,
                    cwd=REPO,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            except OSError as exc:
                return [
                    Observation(
                        run,
                        ok=False,
                        duration=0.0,
                        exit_code=None,
                        error=str(exc),
                        commands=launch.describe(),
                    )
                    for run in runs
                ]
            try:
                proc.wait(timeout=ctx.hard_timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc)
            duration = time.monotonic() - started_at
        finally:
            background_tail: list[str] = []
            for item in reversed(background):  # the gateway before its upstream
                _stop(item)
                background_tail += item.tail()
                item.output.close()
        leftovers = _reap_tagged(tag)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    report = _parse_report(stdout)
    observations = [
        _observe(
            run,
            report,
            duration=duration,
            exit_code=proc.returncode,
            timed_out=timed_out,
            hard_timeout=ctx.hard_timeout,
            leftovers=leftovers,
            stderr=stderr,
            first_stderr=first_line(stderr),
            shared=len(runs),
        )
        for run in runs
    ]
    for obs in observations:
        obs.commands = launch.describe()
        obs.stderr_tail = obs.stderr_tail + background_tail
    return observations


def run_one(run: Run, ctx: Context) -> Observation:
    """Run one client against one server (direct or through the gateway)."""
    return run_job([run], ctx)[0]


def group_runs(runs: Sequence[Run], group: bool = True) -> list[list[int]]:
    """Indices of `runs`, one list per client process. With `group`, the four
    MRTR cells' runs of one client x server pair, route and options share one
    `--feature all` run; everything else (and an incomplete set of the four)
    runs on its own."""
    jobs: list[list[int]] = []
    buckets: dict[tuple[str, str, str, str, str, tuple[str, ...]], list[int]] = {}
    for index, run in enumerate(runs):
        if (
            group
            and run.feature_arg is None
            and run.cell.feature in MRTR_FEATURES
            and run.client.takes_feature
        ):
            cell = run.cell
            key = (run.client.name, run.server.name, run.via, cell.front, cell.back, run.options)
            if key not in buckets:
                buckets[key] = []
                jobs.append(buckets[key])  # first appearance keeps its place
            buckets[key].append(index)
        else:
            jobs.append([index])
    split: list[list[int]] = []
    for job in jobs:
        features = sorted(runs[i].cell.feature for i in job)
        if len(job) > 1 and features != sorted(MRTR_FEATURES):
            split.extend([i] for i in job)
        else:
            split.append(job)
    return split


def run_many(
    runs: Sequence[Run],
    ctx: Context,
    jobs: int = 2,
    progress: Callable[[int, int, Observation], None] | None = None,
    *,
    group: bool = True,
) -> list[Observation]:
    """Run independent client runs `jobs` at a time (see `group_runs`);
    observations in the order of `runs`."""
    results: list[Observation | None] = [None] * len(runs)
    done = 0
    lock = threading.Lock()

    def one(indices: list[int]) -> None:
        nonlocal done
        observations = run_job([runs[i] for i in indices], ctx)
        with lock:
            for index, obs in zip(indices, observations, strict=True):
                results[index] = obs
                done += 1
                if progress is not None:
                    progress(done, len(runs), obs)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for future in [pool.submit(one, job) for job in group_runs(runs, group)]:
            future.result()
    return [r for r in results if r is not None]


# -- planning and judging ----------------------------------------------------


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


@dataclass(frozen=True)
class Verdict:
    expected: str
    observed: str
    matched: bool
    reason: str


def judge(obs: Observation) -> Verdict:
    """Compare an observation with what its cell expects for that route."""
    want, want_era = obs.run.cell.expected(obs.run.via)
    expected = f"{want} ({want_era})" if want == "works" and want_era else want
    observed = obs.outcome
    if want == "works":
        # A push-style tool refused on a modern request: the era works, the call does not.
        refused = ", tool error" if obs.run.cell.tool_error else ""
        expected += refused
        if not obs.ok:
            return Verdict(expected, observed, False, f"fails: {obs.error}")
        if want_era and obs.era != want_era:
            return Verdict(expected, f"works ({obs.era})", False, f"works, but in era {obs.era}")
        return Verdict(expected, f"works ({obs.era}){refused}", True, obs.evidence)
    if want == "fails":
        if obs.ok:
            return Verdict(
                expected,
                f"works ({obs.era})",
                False,
                f"works where the spec says it fails ({obs.evidence})",
            )
        return Verdict(expected, observed, True, obs.evidence)
    return Verdict(expected, observed, False, f"ran a cell whose outcome is {want!r}")


# -- the report ------------------------------------------------------------


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").replace("`", "'")


def code_version() -> str:
    """The commit checked out, and which tracked files of gateway/ and
    compat_matrix/ differ from it (untracked files and REPORT.md aside)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                "gateway",
                "compat_matrix",
                ":!compat_matrix/REPORT.md",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    changed = sorted(line[3:] for line in dirty if line.strip())
    if not changed:
        return f"commit `{head}`, no uncommitted changes in gateway/ or compat_matrix/"
    return f"commit `{head}` with uncommitted changes to {', '.join(changed)}"


def code_fingerprint() -> str | None:
    """A hash of the files a run executes (gateway/, the peers, run.py) as they
    are on disk: equal at the start and the end of a run iff nobody changed them
    in between. None without git."""
    try:
        listed = subprocess.run(
            [
                "git",
                "ls-files",
                "-z",
                "--",
                "gateway",
                "compat_matrix/peers",
                "compat_matrix/run.py",
            ],
            cwd=REPO,
            capture_output=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    digest = hashlib.sha256()
    for name in sorted(n for n in listed.decode().split("\0") if n):
        digest.update(name.encode() + b"\0")
        with contextlib.suppress(OSError):
            digest.update((REPO / name).read_bytes())
    return digest.hexdigest()


def _cell_set(cells: Sequence[Cell]) -> str:
    """A short name for a set of cells: eras x routes x features when it is
    exactly that product, else the list of ids."""
    have = {(c.client_era, c.server_era, c.front, c.back) for c in cells}
    eras = [
        f"{ce}-{se}" for ce in ERAS for se in SERVER_ERAS if any(h[:2] == (ce, se) for h in have)
    ]
    routes = [f"{f}-{b}" for f, b in ROUTES if any(h[2:] == (f, b) for h in have)]
    features = [f for f in FEATURES if any(c.feature == f for c in cells)]
    if len(eras) * len(routes) * len(features) == len(cells):
        every = f" (all {len(routes)})" if len(routes) == len(ROUTES) else ""
        return (
            f"client-server eras {', '.join(eras)}; front-back {', '.join(routes)}{every}; "
            f"features {', '.join(features)} ({len(cells)} cells)"
        )
    return ", ".join(f"`{c.id}`" for c in cells)


def render_report(
    matrix: Matrix,
    observations: Sequence[Observation],
    *,
    only: str | None,
    elapsed: float,
    jobs: int,
    ctx: Context,
    code: str | None = None,
    code_changed: bool = False,
    skip: Sequence[str] = (),
) -> str:
    by_key = {(o.run.cell.id, o.run.pair, o.run.via): o for o in observations}
    verdicts = {id(o): judge(o) for o in observations}
    runs_planned = plan(matrix, only, skip)
    lines: list[str] = []
    add = lines.append

    add("# Compatibility matrix: real peers, direct and through the gateway")
    add("")
    add("Generated by `python compat_matrix/run.py`; do not edit by hand.")
    add("Data: `compat_matrix/cells.toml`. Peers: `compat_matrix/peers/README.md`.")
    add("")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    add(
        f"- run: {stamp}, {elapsed:.0f} s wall clock, {jobs} parallel jobs, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    add(f"- code: {code or code_version()} (at the start of the run)")
    if code_changed:
        add(
            "- **the code changed during the run**: files of gateway/ or compat_matrix/peers/ "
            "differed between its start and its end, so runs may have used either version"
        )
    add(f"- gateway, stdio back: `{_md(ctx.gateway_command)}`")
    add(f"- gateway, HTTP back: `{_md(ctx.gateway_upstream_command)}`")
    add(
        "- `{listen}` is `--listen 127.0.0.1:PORT` for an HTTP or SSE front (run.py starts "
        "the gateway and waits for its `/readyz`; Streamable HTTP clients connect to its "
        "`/mcp`, HTTP+SSE clients to its `/sse`), nothing for stdio (the client spawns it); "
        "HTTP servers listen on free ports of 127.0.0.1 and are reached at `/mcp`"
    )
    add(
        f"- client timeout {ctx.client_timeout:g} s, hard timeout {ctx.hard_timeout:g} s per "
        f"run, {ctx.start_timeout:g} s for an HTTP server or gateway to become ready"
    )
    shared = [o for o in observations if o.shared > 1]
    if shared:
        processes = len(observations) - len(shared) + round(sum(1 / o.shared for o in shared))
        add(
            f"- {len(observations)} cell runs in {processes} client runs: the four MRTR "
            "cells of one client x server pair and route share one `--feature all` "
            "client run, and each cell is judged on its own feature's steps"
        )
    if only:
        add(f"- filtered with `--only {_md(only)}`: {len(runs_planned)} runs")
    for pattern in skip:
        add(f"- left out with `--skip {_md(pattern)}` (not run, not recorded here)")
    add("")

    # summary
    direct = [o for o in observations if o.run.via == "direct"]
    through = [o for o in observations if o.run.via == "gateway"]
    mismatches = [o for o in observations if not verdicts[id(o)].matched]
    ready_cells = [c for c in matrix.cells if c.ready]
    not_yet = [c for c in matrix.cells if not c.ready]
    add("## Summary")
    add("")
    add("| | runs | works | fails | as expected | mismatches |")
    add("|---|---|---|---|---|---|")
    for label, group in (("direct", direct), ("through the gateway", through)):
        works = sum(o.ok for o in group)
        good = sum(verdicts[id(o)].matched for o in group)
        add(
            f"| {label} | {len(group)} | {works} | {len(group) - works} | {good} "
            f"| {len(group) - good} |"
        )
    add("")
    add(
        "By front→back (a client run's time includes starting the server and the "
        "gateway, and for HTTP waiting until they are ready):"
    )
    add("")
    add(
        "| front→back | route | cell runs | client runs | works | fails | as expected "
        "| mismatches | median s | total s |"
    )
    add("|---|---|---|---|---|---|---|---|---|---|")
    for front, back in ROUTES:
        for via in VIAS:
            group = [
                o
                for o in observations
                if o.run.via == via and (o.run.cell.front, o.run.cell.back) == (front, back)
            ]
            if not group:
                continue
            works = sum(o.ok for o in group)
            good = sum(verdicts[id(o)].matched for o in group)
            durations = sorted(o.duration for o in group)
            client_runs = round(sum(1 / o.shared for o in group))
            total = sum(o.duration / o.shared for o in group)
            add(
                f"| {front}→{back} | {via} | {len(group)} | {client_runs} | {works} "
                f"| {len(group) - works} | {good} | {len(group) - good} "
                f"| {durations[len(durations) // 2]:.1f} | {total:.0f} |"
            )
    add("")
    pairs = {(o.run.cell.id, o.run.pair) for o in observations}
    add(
        f"- matrix cells: {len(matrix.cells)} ({len(ready_cells)} ready, "
        f"{len(not_yet)} not yet); peer pairs run: {len(pairs)}"
    )
    add(f"- result: **{'all as expected' if not mismatches else f'{len(mismatches)} mismatches'}**")
    stragglers = [o for o in observations if o.leftovers]
    if stragglers:
        add(
            f"- runs that left processes behind after the client exited "
            f"(killed by run.py): {len(stragglers)}; see the end of this report"
        )
    add("")

    # era-level view of the ready cells, one table per front x back
    add("## By era")
    add("")
    add(
        "Each entry: the runs that work, direct / through the gateway, over the peer "
        "pairs run for that cell (✓: every run as expected). The spec's direct outcome "
        "is in the second column; through the gateway every cell must work. Mixed "
        "transports have no direct run (`-`). The sse front (the deprecated HTTP+SSE "
        "transport) has legacy clients only."
    )
    add("")
    for front, back in ROUTES:
        add(f"### {front} front → {back} back")
        add("")
        add("| client → server | spec, direct | " + " | ".join(FEATURES) + " |")
        add("|---|---|" + "---|" * len(FEATURES))
        for ce in ERAS:
            if front not in fronts_for(ce):
                continue
            for se in SERVER_ERAS:
                row = [
                    f"**{ce} → {se}**",
                    matrix.cell(cell_id(ce, se, front, back, "basic")).direct,
                ]
                for feature in FEATURES:
                    cell = matrix.cell(cell_id(ce, se, front, back, feature))
                    got = [o for o in observations if o.run.cell is cell]
                    if not got:
                        row.append("not run" if cell.ready else "not yet")
                        continue
                    tallies = []
                    for via in VIAS:
                        group = [o for o in got if o.run.via == via]
                        tallies.append(f"{sum(o.ok for o in group)}/{len(group)}" if group else "-")
                    good = all(verdicts[id(o)].matched for o in got)
                    row.append(" / ".join(tallies) + (" ✓" if good else " ✗"))
                add("| " + " | ".join(row) + " |")
        add("")
    if any(o.run.client.mrtr for o in observations):
        add(
            "MRTR cells (elicitation-form, elicitation-url, sampling, roots): the client calls "
            "the server's tool for the feature (fixtures: `ask_name`, `open_link`, "
            "`summarize`, `list_my_roots`; server-everything: `trigger-elicitation-request`, "
            "`trigger-url-elicitation`, `trigger-sampling-request`, `get-roots-list`), "
            "answers what the server asks, and the tool result must carry the answer "
            "(`Hello, Ada`, the URL elicitation accepted, `sampled-by-client`, "
            "`file:///srv/compat`). The evidence column shows how the request reached "
            "the client: `input_required` rounds with their `inputRequests` keys (modern "
            "wire; gateway keys are `input-N`/`url-N`), or the callbacks the SDK ran with "
            "the request id (a pushed request's JSON-RPC id, `gw-N` when the gateway "
            "pushed it, or an `inputRequests` key when the modern SDK ran the rounds)."
        )
        add("")
    if any(o.run.cell.feature == "notifications" for o in observations):
        add(
            "Notifications cells: after the basic calls the client subscribes and makes the "
            "server change something with a tool call. A modern client opens "
            "`subscriptions/listen` (toolsListChanged and one resource URI) and requires "
            "`notifications/subscriptions/acknowledged` as the listen's first message, then "
            "`notifications/resources/updated` and `notifications/tools/list_changed` tagged "
            'with the listen\'s id (`_meta["io.modelcontextprotocol/subscriptionId"]`), and '
            "no change notification untagged; it then cancels the listen (stdio: "
            "`notifications/cancelled`, HTTP: closes the stream) and the connection must go on "
            "working. A legacy client sends `resources/subscribe` and requires the same two "
            "notifications on its session (stdio, or the session's GET stream over HTTP), then "
            "`resources/unsubscribe`. Triggers: the fixtures' `add_note` (resource "
            "`notes://compat`) and `register_tool`; server-everything's "
            "`toggle-subscriber-updates` (its first resource), which has no tool that changes "
            "its tool list, so its runs check `resources/updated` only. The evidence column "
            "shows how the notifications arrived."
        )
        add("")
    if any(o.run.cell.feature == "tasks" for o in observations):
        add(
            "Tasks cells (`io.modelcontextprotocol/tasks`, issue #16; the gateway runs with "
            "`MCP_ERA_GATEWAY_TASKS_AFTER=0.5`): the client calls `slow_compute` (2 s) and "
            "`confirm_delete` (asks a yes/no elicitation after 1 s) instead of echo. The raw "
            "modern client declares the extension and requires a task for each call, polls "
            "`tasks/get` at its `pollIntervalMs` to the inlined result and answers "
            "`input_required` with `tasks/update`; the evidence shows the statuses it saw. "
            "The mcp 1.30 client requires the ordinary results (and `test_tool_with_task`, "
            "which the modern tasks server serves only to a client declaring the extension) "
            "and counts the elicitations asked of it."
        )
        add("")
    notes: dict[str, list[Cell]] = {}
    for cell in ready_cells:
        for note in cell.notes:
            notes.setdefault(note, []).append(cell)
    if notes:
        add("Notes on ready cells:")
        add("")
        for note, cells in notes.items():
            add(f"- {_md(note)}: {_cell_set(cells)}")
        add("")

    # the table
    add("## Runs")
    add("")
    add(
        "Observed eras are what the client reports; evidence is the negotiated "
        "version (or the first line of the error), for MRTR cells how the input "
        "reached the client, for notifications cells how the notifications did, and for "
        "tasks cells what became of the calls. "
        "✓ = as expected, ✗ = mismatch. A time with * is that of "
        "a `--feature all` client run shared by the pair's four MRTR cells."
    )
    add("")
    add(
        "| cell | client | server | front→back | expected direct | observed direct "
        "| expected gateway | observed gateway | time d/g (s) | evidence |"
    )
    add("|---|---|---|---|---|---|---|---|---|---|")
    seen_pairs: list[tuple[Cell, Peer, Peer]] = []
    for obs in observations:
        item = (obs.run.cell, obs.run.client, obs.run.server)
        if item not in seen_pairs:
            seen_pairs.append(item)
    for cell, client, server in seen_pairs:
        pair = f"{client.name}>{server.name}"
        cols = [f"`{cell.id}`", client.name, server.name, f"{cell.front}→{cell.back}"]
        evidence = []
        times = []
        for route in VIAS:
            seen = by_key.get((cell.id, pair, route))
            want, want_era = cell.expected(route)
            refused = ", tool error" if cell.tool_error and want == "works" else ""
            cols.append(
                (f"{want} ({want_era})" if want == "works" and want_era else want) + refused
            )
            if seen is None:
                cols.append("-" if want == "n/a" else "not run")
                times.append("-")
                continue
            verdict = verdicts[id(seen)]
            cols.append(f"{verdict.observed} {'✓' if verdict.matched else '✗'}")
            times.append(f"{seen.duration:.1f}" + ("*" if seen.shared > 1 else ""))
            evidence.append(f"{route}: {verdict.reason}")
        cols.append("/".join(times))
        cols.append(_md("; ".join(evidence)))
        add("| " + " | ".join(cols) + " |")
    add("")

    if mismatches:
        add("## Mismatches")
        add("")
        for obs in mismatches:
            add(f"- `{obs.run.key}`: {_md(verdicts[id(obs)].reason)}")
            commands = (
                obs.commands
                or obs.run.launch(
                    ctx, feature="all" if obs.shared > 1 else None, ports=lambda: 0
                ).describe()
            )
            for command in commands:
                add(f"  - {_md(command.split(': ', 1)[0])}: `{_md(command.split(': ', 1)[1])}`")
            for line in obs.stderr_tail[-8:]:
                add(f"  - stderr: `{_md(line[:200])}`")
        add("")

    # not yet
    add("## Not yet runnable")
    add("")
    by_issue: Counter[str] = Counter(" + ".join(c.issues) for c in not_yet)
    if not not_yet:
        add("None: every cell of the matrix is ready.")
        add("")
    else:
        add(
            "Cells the gateway must make work once their issue lands; run.py does not run "
            "them yet. Counts: "
            + ", ".join(f"{issue}: {n}" for issue, n in sorted(by_issue.items()))
            + f" (total {len(not_yet)})."
        )
        add("")
        add(
            "| cell | client era | server era | front→back | feature | expected direct "
            "| expected gateway | clients | servers | issue | note |"
        )
        add("|---|---|---|---|---|---|---|---|---|---|---|")
    for c in not_yet:
        gateway = f"{c.gateway} ({c.gateway_era})" if c.gateway_era else c.gateway
        add(
            f"| `{c.id}` | {c.client_era} | {c.server_era} | {c.front}→{c.back} | {c.feature} "
            f"| {c.direct} | {gateway} | {', '.join(c.clients) or '-'} "
            f"| {', '.join(c.servers) or '-'} | {', '.join(c.issues)} | {_md(c.note or '')} |"
        )
    if not_yet:
        add("")

    # peers
    add("## Peers")
    add("")
    add(
        "A client with the http transport takes `--url URL` in place of `-- {server}`, "
        "one with the sse transport `--sse-url URL` (HTTP+SSE; legacy clients only); "
        "a server's HTTP command serves `http://127.0.0.1:{port}/mcp`."
    )
    add("")
    add("| role | name | era | what | transports | command | HTTP command |")
    add("|---|---|---|---|---|---|---|")
    for peer in [*matrix.clients.values(), *matrix.servers.values()]:
        what = peer.label + (f" — **not run**: {peer.unused}" if peer.unused else "")
        http = f"`{_md(peer.http_command)}`" if peer.http_command else "-"
        add(
            f"| {peer.role} | {peer.name} | {peer.era} | {_md(what)} "
            f"| {', '.join(peer.transports)} | `{_md(peer.command)}` | {http} |"
        )
    add("")

    if stragglers:
        add("## Processes left behind")
        add("")
        add(
            "After the client had exited, these runs still had processes tagged with "
            "their run id; run.py killed them. This is not counted as a mismatch, but "
            "it means a peer or the gateway did not exit when its client closed it."
        )
        add("")
        for obs in stragglers:
            add(f"- `{obs.run.key}`: {_md(', '.join(obs.leftovers))}")
        add("")
    return "\n".join(lines)


# -- CLI ------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        metavar="PATTERN",
        help="run only runs whose `<cell id>:<client>><server>@<via>` matches "
        "(glob if it has * ? [, else substring)",
    )
    parser.add_argument(
        "--skip",
        metavar="PATTERN",
        action="append",
        default=[],
        help="leave out the runs that match (as --only; repeatable), e.g. through-gateway "
        "runs that wait on a change still to land",
    )
    parser.add_argument("--jobs", type=int, default=None, help="parallel runs (default 2)")
    parser.add_argument("--out", type=Path, default=DEFAULT_REPORT, help="report path")
    parser.add_argument("--cells", type=Path, default=CELLS_FILE, help="matrix data")
    parser.add_argument(
        "--gateway",
        metavar="TEMPLATE",
        help="gateway command template for a stdio back, with {listen} and {server} words "
        "(default from cells.toml)",
    )
    parser.add_argument(
        "--gateway-upstream",
        metavar="TEMPLATE",
        help="gateway command template for an HTTP back, with {listen} and {upstream} words "
        "(default from cells.toml)",
    )
    parser.add_argument(
        "--separate-features",
        action="store_true",
        help="one client run per MRTR cell (default: one `--feature all` run serves the "
        "four MRTR cells of a client x server pair and route)",
    )
    parser.add_argument("--list", action="store_true", help="list the runs and exit")
    parser.add_argument(
        "--conformance-only",
        action="store_true",
        help="rewrite only the report's conformance section, from the recorded "
        "compat_matrix/conformance/results (no cell runs)",
    )
    args = parser.parse_args(argv)
    # The sections other runs write, from their saved results (imported here:
    # popular.py imports this module).
    from compat_matrix import popular

    tail = "\n\n" + conformance_report.section() + "\n" + popular.section()
    if args.conformance_only:
        kept = args.out.read_text().split(CONFORMANCE_HEADING)[0] if args.out.exists() else ""
        args.out.write_text(kept.rstrip("\n") + tail)
        print(f"run.py: wrote the conformance section of {args.out}", file=sys.stderr)
        return 0

    try:
        matrix = load_matrix(args.cells)
    except MatrixError as exc:
        print(f"run.py: bad matrix: {exc}", file=sys.stderr)
        return 2
    ctx = Context.for_matrix(matrix)
    if args.gateway:
        ctx = dataclasses.replace(ctx, gateway_command=args.gateway)
    if args.gateway_upstream:
        ctx = dataclasses.replace(ctx, gateway_upstream_command=args.gateway_upstream)
    runs = plan(matrix, args.only, args.skip)
    if args.list:
        with contextlib.suppress(BrokenPipeError):
            print("\n".join(run.key for run in runs), flush=True)
        return 0
    missing = missing_peers(ctx.peers)
    if missing:
        print(f"run.py: peers missing ({', '.join(missing)}): {INSTALL_HINT}", file=sys.stderr)
        return 2
    if not runs:
        print(f"run.py: no run matches {args.only!r}", file=sys.stderr)
        return 2
    jobs = args.jobs or matrix.jobs

    def progress(done: int, total: int, obs: Observation) -> None:
        verdict = judge(obs)
        mark = "ok " if verdict.matched else "BAD"
        print(
            f"[{done:3d}/{total}] {mark} {obs.run.key:<62} {verdict.observed:<15} "
            f"{obs.duration:5.1f}s  {first_line(verdict.reason, 90)}",
            file=sys.stderr,
            flush=True,
        )

    code = code_version()
    fingerprint = code_fingerprint()
    started = time.monotonic()
    observations = run_many(
        runs, ctx, jobs=jobs, progress=progress, group=not args.separate_features
    )
    elapsed = time.monotonic() - started
    report = render_report(
        matrix,
        observations,
        only=args.only,
        elapsed=elapsed,
        jobs=jobs,
        ctx=ctx,
        code=code,
        code_changed=code_fingerprint() != fingerprint,
        skip=args.skip,
    )
    args.out.write_text(report + tail)
    bad = [o for o in observations if not judge(o).matched]
    if code_fingerprint() != fingerprint:
        print("run.py: warning: the code changed during the run", file=sys.stderr)
    print(
        f"run.py: {len(observations)} runs in {elapsed:.0f}s, {len(bad)} mismatches; "
        f"wrote {args.out}",
        file=sys.stderr,
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
