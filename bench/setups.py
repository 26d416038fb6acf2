"""What is measured: each run is (client era, command, work); each group
compares a gateway path with its direct and relay baselines, and the MRTR group
an elicitation round trip through the gateway with the same one direct."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


@dataclass(frozen=True, slots=True)
class Run:
    key: str  # unique; runs shared by several groups are measured once
    label: str
    client_era: str  # modern | legacy
    command: tuple[str, ...]
    kind: str  # direct | relay | gateway
    work: str = "echo"  # echo | ask (MRTR interactions; the client declares elicitation)


@dataclass(frozen=True, slots=True)
class Group:
    code: str  # short name for --groups
    title: str
    direct: Run
    relay: Run
    gateway: Run
    real_server: bool = False  # the throughput goal is gateway/direct, not gateway/relay


def fast_server(server_era: str) -> tuple[str, ...]:
    return (PY, str(ROOT / "bench" / "fast_server.py"), "--era", server_era)


def py1_server() -> tuple[str, ...]:
    peers = Path(os.environ.get("MCP_PEERS_DIR", ROOT / ".peers"))
    return (str(peers / "py1" / "bin" / "python"), str(ROOT / "compat_matrix/peers/py1_server.py"))


def py1_missing() -> str | None:
    """Why the real legacy SDK server cannot run, or None when it can."""
    python, script = py1_server()
    for path in (python, script):
        if not Path(path).exists():
            return f"{path} is missing (run: bash peers/install.sh)"
    return None


def gateway(
    server: tuple[str, ...], profile_to: Path | None, tag: str, *options: str
) -> tuple[str, ...]:
    head: tuple[str, ...] = (PY,)
    if profile_to is not None:
        head = (PY, "-m", "cProfile", "-o", str(profile_to / f"gateway-{tag}.prof"))
    return (*head, "-m", "gateway", *options, "--log-level", "warning", "--", *server)


def relay(server: tuple[str, ...]) -> tuple[str, ...]:
    return (PY, str(ROOT / "bench" / "relay.py"), "--", *server)


def groups(with_py1: bool, profile_to: Path | None = None) -> list[Group]:
    legacy, modern = fast_server("legacy"), fast_server("modern")
    direct_l = Run("direct-L", "legacy client → fast legacy", "legacy", legacy, "direct")
    direct_m = Run("direct-M", "modern client → fast modern", "modern", modern, "direct")
    relay_l = Run(
        "relay-L", "legacy client → relay → fast legacy", "legacy", relay(legacy), "relay"
    )
    relay_m = Run(
        "relay-M", "modern client → relay → fast modern", "modern", relay(modern), "relay"
    )

    def gw(key: str, client: str, server: tuple[str, ...], label: str) -> Run:
        return Run(key, label, client, gateway(server, profile_to, key), "gateway")

    out = [
        Group(
            "ml",
            "modern→legacy",
            direct_l,
            relay_l,
            gw("gw-ML", "modern", legacy, "modern client → gateway → fast legacy"),
        ),
        Group(
            "ll",
            "legacy→legacy",
            direct_l,
            relay_l,
            gw("gw-LL", "legacy", legacy, "legacy client → gateway → fast legacy"),
        ),
        Group(
            "lm",
            "legacy→modern",
            direct_m,
            relay_m,
            gw("gw-LM", "legacy", modern, "legacy client → gateway → fast modern"),
        ),
        Group(
            "mm",
            "modern→modern",
            direct_m,
            relay_m,
            gw("gw-MM", "modern", modern, "modern client → gateway → fast modern"),
        ),
    ]
    if with_py1:
        py1 = py1_server()
        out.append(
            Group(
                "py1",
                "modern→legacy, real SDK server (FastMCP, mcp 1.30.0)",
                Run("py1-direct", "legacy client → py1_server", "legacy", py1, "direct"),
                Run(
                    "py1-relay", "legacy client → relay → py1_server", "legacy", relay(py1), "relay"
                ),
                gw("gw-py1", "modern", py1, "modern client → gateway → py1_server"),
                real_server=True,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class MrtrGroup:
    """An elicitation round trip: pushed to a legacy client directly, bridged
    to input_required + retry for a modern client through the gateway."""

    code: str
    title: str
    direct: Run
    gateway: Run
    no_window: Run  # informational: the gateway with [mrtr] input_batch_window = 0.001

    def runs(self) -> tuple[Run, Run, Run]:
        return (self.direct, self.gateway, self.no_window)


WINDOW_CONFIG = ROOT / "bench" / "mrtr_window_1ms.toml"


def mrtr_group(profile_to: Path | None = None) -> MrtrGroup:
    legacy = fast_server("legacy")
    return MrtrGroup(
        "mrtr",
        "MRTR elicitation round trip, modern→legacy",
        Run(
            "mrtr-direct",
            "legacy client → fast legacy, elicitation pushed",
            "legacy",
            legacy,
            "direct",
            "ask",
        ),
        Run(
            "mrtr-gw",
            "modern client → gateway → fast legacy, input_required + retry",
            "modern",
            gateway(legacy, profile_to, "mrtr-gw"),
            "gateway",
            "ask",
        ),
        Run(
            "mrtr-gw-w1ms",
            "as mrtr-gw, with input_batch_window = 0.001 (1 ms)",
            "modern",
            gateway(legacy, profile_to, "mrtr-gw-w1ms", "--config", str(WINDOW_CONFIG)),
            "gateway",
            "ask",
        ),
    )


def parked_memory(calls: int) -> tuple[str, ...]:
    """The in-process measurement of memory per parked call (bench/parked_memory.py)."""
    return (PY, "-m", "bench.parked_memory", "--calls", str(calls), "--json")


def runs_in_order(all_groups: list[Group]) -> list[Run]:
    """Each run once, baselines next to the gateway runs they are compared with."""
    seen: dict[str, Run] = {}
    for group in all_groups:
        for run in (group.direct, group.relay, group.gateway):
            seen.setdefault(run.key, run)
    return list(seen.values())
