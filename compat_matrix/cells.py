"""The matrix data: the dimensions of a cell, the peers and cells of
`cells.toml`, and `load_matrix`, which parses that file and checks it (every
dimension combination exactly once, consistent ids, known peers of the right
era, spec-consistent expectations)."""

from __future__ import annotations

import shlex
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CELLS_FILE = HERE / "cells.toml"

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
OUTCOMES = ("works", "fails", "n/a")
STATUSES = ("ready", "not yet")

Via = Literal["direct", "gateway"]
VIAS: tuple[Via, ...] = ("direct", "gateway")
ROUTES = tuple((f, b) for f in FRONTS for b in TRANSPORTS)  # (front, back)


def fronts_for(client_era: str) -> tuple[str, ...]:
    """The fronts a client of this era can use: HTTP+SSE is legacy-only."""
    return FRONTS if client_era == "legacy" else TRANSPORTS


def routes_for(client_era: str) -> tuple[tuple[str, str], ...]:
    """(front, back) routes of the matrix for a client of this era."""
    return tuple((f, b) for f, b in ROUTES if f in fronts_for(client_era))


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


def load_matrix(path: Path = CELLS_FILE) -> Matrix:  # noqa: PLR0912, PLR0915 - over the budget: one long procedure still to split
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
