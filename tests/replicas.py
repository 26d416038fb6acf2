"""Three gateway replicas behind HAProxy (deploy/haproxy/haproxy.cfg), on
loopback, for tests/test_haproxy_replicas.py: the replicas and the balancer
are real processes, started and stopped by the test, each wait bounded."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx
from anyio.abc import Process

ROOT = Path(__file__).parent.parent
HAPROXY_CFG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
NAMES = ("gw1", "gw2", "gw3")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def haproxy() -> str | None:
    return shutil.which("haproxy") or (
        "/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None
    )


@dataclass
class Replica:
    name: str
    port: int
    config: Path
    upstream: list[str]
    process: Process | None = None
    log: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        cmd = [sys.executable, "-m", "gateway", "--config", str(self.config)]
        cmd += ["--listen", f"127.0.0.1:{self.port}", "--log-level", "info", *self.upstream]
        self.log = self.config.parent / f"{self.name}.log"
        with self.log.open("ab") as log:
            self.process = await anyio.open_process(cmd, stdout=subprocess.DEVNULL, stderr=log)

    async def stop(self, sig: signal.Signals | None = signal.SIGTERM, within: float = 20) -> int:
        """Signal it (None: it was already) and wait until it exited; its exit code."""
        process = self.process
        assert process is not None
        if process.returncode is None and sig is not None:
            process.send_signal(sig)
        with anyio.fail_after(within):
            return await process.wait()

    async def until_ready(self, within: float = 30) -> None:
        """Until its own /readyz is 200 (polled every 50 ms)."""
        async with httpx.AsyncClient(timeout=5) as client:
            with anyio.fail_after(within):
                while True:  # ends when it is ready (or the bound)
                    try:
                        if (await client.get(f"{self.url}/readyz")).status_code == 200:
                            return
                    except httpx.TransportError:
                        pass
                    await anyio.sleep(0.05)

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            with anyio.fail_after(10):
                await self.process.wait()


@dataclass
class Cluster:
    replicas: list[Replica]
    lb_port: int
    admin: Path  # HAProxy's stats socket
    haproxy: Process | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.lb_port}"

    async def states(self) -> dict[str, str]:
        """Each replica's state as HAProxy sees it: UP (its last check
        passed), DOWN, or what else `show stat` says. A server HAProxy has not
        checked yet counts as not UP, though HAProxy starts it as UP."""
        text = await _ask_haproxy(self.admin, "show stat\n")
        lines = text.splitlines()
        header = lines[0].lstrip("# ").split(",") if lines else []
        status, check = header.index("status"), header.index("check_status")
        states: dict[str, str] = {}
        for line in lines[1:]:
            cols = line.split(",")
            if len(cols) > check and cols[0] == "gateways" and cols[1] in NAMES:
                up = cols[status].startswith("UP") and cols[check] == "L7OK"
                states[cols[1]] = "UP" if up else cols[status] or "?"
        return states

    async def until_states(self, want: dict[str, str], within: float = 30) -> None:
        """Until HAProxy sees the replicas so (polled every 50 ms)."""
        with anyio.fail_after(within):
            while True:  # ends when HAProxy agrees (or the bound)
                try:
                    states = await self.states()
                except (FileNotFoundError, ConnectionRefusedError):
                    states = {}  # its stats socket not (yet) taking connections: not UP
                if all(states.get(name, "").startswith(s) for name, s in want.items()):
                    return
                await anyio.sleep(0.05)

    async def all_up(self, within: float = 30) -> None:
        await self.until_states({name: "UP" for name in NAMES}, within)

    async def requests_served(self) -> dict[str, int]:
        """Each replica's count of answered MCP requests (its /metrics)."""
        served: dict[str, int] = {}
        async with httpx.AsyncClient(timeout=5) as client:
            for replica in self.replicas:
                text = (await client.get(f"{replica.url}/metrics")).text
                served[replica.name] = sum(
                    int(float(line.rsplit(" ", 1)[1]))
                    for line in text.splitlines()
                    if line.startswith("mcp_gateway_requests_total{")
                )
        return served

    async def restart(self, replica: Replica) -> int:
        """The rolling-restart step for one replica: SIGTERM; HAProxy takes it
        out while it drains (its /readyz is 503); it exits; it starts again,
        and HAProxy sends to it once its checks pass. Its exit code."""
        process = replica.process
        assert process is not None
        process.terminate()
        await self.until_states({replica.name: "DOWN"})
        code = await replica.stop(None)
        await replica.start()
        await replica.until_ready()
        await self.until_states({replica.name: "UP"})
        return code


async def _ask_haproxy(admin: Path, command: str) -> str:
    with anyio.fail_after(5):
        stream = await anyio.connect_unix(str(admin))
        async with stream:
            await stream.send(command.encode())
            chunks = []
            try:
                while True:  # ends when HAProxy closes the socket after answering
                    chunks.append(await stream.receive())
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
    return b"".join(chunks).decode()


@asynccontextmanager
async def cluster(tmp_path: Path, upstream: list[str], config: str) -> AsyncIterator[Cluster]:
    """Three replicas, each with `config` plus its own instance_id, each
    serving `upstream` (gateway arguments after `--listen`), behind HAProxy."""
    binary = haproxy()
    assert binary is not None, "haproxy is not installed (.ci/run installs Debian's)"
    replicas = []
    for name in NAMES:
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(config.replace("@INSTANCE@", name))
        replicas.append(Replica(name, free_port(), cfg, upstream))
    admin = tmp_path / "haproxy.sock"
    stats = tmp_path / "stats.cfg"
    # The test's own addition: a stats socket to read each server's state.
    stats.write_text(f"global\n    stats socket {admin} mode 600 level admin\n")
    result = Cluster(replicas, free_port(), admin)
    env = {
        **os.environ,
        "MCP_LB_BIND": f"127.0.0.1:{result.lb_port}",
        **{f"MCP_GW{i + 1}": f"127.0.0.1:{r.port}" for i, r in enumerate(replicas)},
    }
    try:
        for replica in replicas:
            await replica.start()
        for replica in replicas:
            await replica.until_ready()
        with (tmp_path / "haproxy.log").open("wb") as log:
            result.haproxy = await anyio.open_process(
                [binary, "-db", "-f", str(HAPROXY_CFG), "-f", str(stats)],
                stdout=log,
                stderr=log,
                env=env,
            )
        with anyio.fail_after(20):
            while not admin.exists():  # noqa: ASYNC110 - another process makes it
                await anyio.sleep(0.05)
        await result.all_up()
        yield result
    finally:
        if result.haproxy is not None and result.haproxy.returncode is None:
            result.haproxy.terminate()
            with anyio.fail_after(10):
                await result.haproxy.wait()
        for replica in replicas:
            await replica.kill()
