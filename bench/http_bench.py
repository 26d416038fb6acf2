"""Measure one HTTP run: start its processes (a fast HTTP server, a hop, or
both), wait until they answer, drive bench/http_client.py through the phases
(bench/sse_client.py for an HTTP+SSE front; for a hop with a stdio front, or a
stdio server spoken to directly, bench/client.py on its stdin/stdout), read
CPU and memory from /proc, and stop everything by pid."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from bench import procs
from bench.client import MODERN_ELICIT_CAPS, BenchError, Connection, LoadResult, spawn
from bench.http_client import HttpClient
from bench.http_setups import HttpRun
from bench.report import CONCURRENCIES, MRTR_CONCURRENCIES, _sliced_p50_ns
from bench.setups import ROOT
from bench.sse_client import SseClient

READY_TIMEOUT = 60.0
LIVE: set[Service] = set()
LIVE_STDIO: set[Connection] = set()  # stdio-front hops, closed by bench/run.py on exit


class LoadClient(Protocol):
    """What drives an HTTP run's phases: bench/http_client.py or bench/sse_client.py."""

    name: str

    async def load(
        self, concurrency: int, seconds: float, max_replies: int, work: str = "echo"
    ) -> LoadResult: ...


@dataclass(eq=False)
class Service:
    """A process we started (in its own session) and everything below it."""

    name: str
    proc: asyncio.subprocess.Process
    port: int
    # The gateway stops on SIGINT: uvicorn re-raises the signal it caught once it
    # has shut down, and SIGINT's default raises KeyboardInterrupt, which lets
    # `python -m cProfile` write its file (SIGTERM's default ends the process first).
    first_signal: signal.Signals = signal.SIGTERM
    tree: set[int] = field(default_factory=set)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def descendants(self) -> list[int]:
        found = procs.descendants(self.pid)
        self.tree |= set(found)
        return found

    async def stop(self, grace: float = 5.0) -> None:
        """first_signal, SIGTERM, then SIGKILL; then whatever it left behind."""
        self.descendants()
        for sig in dict.fromkeys((self.first_signal, signal.SIGTERM, signal.SIGKILL)):
            if self.proc.returncode is not None:
                break
            procs.kill([self.pid], sig)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.proc.wait(), grace)
        procs.kill(sorted(self.tree))
        LIVE.discard(self)

    def kill_now(self) -> None:
        """Last resort, without an event loop."""
        with contextlib.suppress(OSError):
            self.descendants()
        procs.kill([self.pid, *sorted(self.tree)])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _status(port: int, path: str) -> int | None:
    """The HTTP status of GET path on 127.0.0.1:port, or None (bounded: 2 s)."""
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 1.0)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        line = await asyncio.wait_for(reader.readline(), 1.0)
        return int(line.split()[1])
    except (OSError, TimeoutError, ValueError, IndexError):
        return None
    finally:
        if writer is not None:
            writer.close()


def levels(run: HttpRun) -> tuple[int, ...]:
    """The concurrencies a run is measured at (MRTR interactions: 1 and 8)."""
    return MRTR_CONCURRENCIES if run.work == "ask" else CONCURRENCIES


async def start(
    name: str,
    template: tuple[str, ...],
    port: int,
    upstream: int,
    ready: str | None,
    log: IO[bytes],
    first_signal: signal.Signals = signal.SIGTERM,
    ready_timeout: float = READY_TIMEOUT,
) -> Service:
    command = [
        a.replace("{port}", str(port)).replace("{upstream}", str(upstream)) for a in template
    ]
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        cwd=ROOT,
        start_new_session=True,  # our Ctrl-C is ours; we stop it ourselves
    )
    service = Service(name, proc, port, first_signal)
    LIVE.add(service)
    deadline = time.monotonic() + ready_timeout
    # ready None: the server has no health route; any answer to GET /mcp will do.
    while not _is_ready(await _status(port, ready or "/mcp"), ready):  # bounded
        if proc.returncode is not None:
            raise BenchError(f"{name}: exited with code {proc.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise BenchError(f"{name}: {ready or '/mcp'} not ready within {ready_timeout:g}s")
        await asyncio.sleep(0.05)
    return service


def _is_ready(status: int | None, ready: str | None) -> bool:
    return status is not None and (ready is None or status == 200)


@dataclass(slots=True)
class HttpMeasured:
    run: HttpRun
    latency: LoadResult  # c=1, every process pinned to one CPU
    loads: dict[int, LoadResult]  # by concurrency, both CPUs
    hop_rss_kib: int | None
    server_rss_kib: int | None
    hop_cpu_us: float | None  # per request at c=32
    server_cpu_us: float
    client_cpu_us: float

    def p50_us(self) -> float:
        return _sliced_p50_ns(self.latency) / 1000

    def pct_us(self, q: float, pinned: bool = True) -> float:
        lat = sorted((self.latency if pinned else self.loads[1]).latencies_ns)
        return lat[min(len(lat) - 1, int(q * len(lat)))] / 1000

    def rps(self, c: int) -> float:
        return self.loads[c].rps

    def rps_or_none(self, c: int) -> float | None:
        return self.loads[c].rps if c in self.loads else None


def best_of(rounds: list[HttpMeasured]) -> HttpMeasured:
    """Other load only makes a figure worse: keep each figure's best round."""
    first = rounds[0]
    hop_cpu = [m.hop_cpu_us for m in rounds if m.hop_cpu_us is not None]
    return HttpMeasured(
        first.run,
        min((m.latency for m in rounds), key=_sliced_p50_ns),
        {c: max((m.loads[c] for m in rounds), key=lambda r: r.rps) for c in first.loads},
        max((m.hop_rss_kib for m in rounds if m.hop_rss_kib is not None), default=None),
        max((m.server_rss_kib for m in rounds if m.server_rss_kib is not None), default=None),
        min(hop_cpu) if hop_cpu else None,
        min(m.server_cpu_us for m in rounds),
        min(m.client_cpu_us for m in rounds),
    )


def _reaped_seconds(pid: int) -> float:
    """CPU time of the children `pid` has waited for (cutime + cstime)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


async def _phase(
    client: LoadClient, c: int, seconds: float, cap: int, work: str = "echo"
) -> LoadResult:
    result = await client.load(c, seconds, cap or 10**9, work)
    if result.errors:
        raise BenchError(
            f"{client.name}: {result.errors} failed at c={c}; first: {result.first_error}"
        )
    # Through the gateway every MRTR interaction is input_required + one retry.
    if result.follow_ups != (result.replies if work == "ask" else 0):
        raise BenchError(f"{client.name}: {result.follow_ups} retries for {result.replies} calls")
    return result


async def measure(
    run: HttpRun, seconds: float, warmup: float, cap: int, logdir: Path
) -> HttpMeasured:
    if run.front == "stdio":
        return await measure_stdio(run, seconds, warmup, cap, logdir)
    services: list[Service] = []
    client: HttpClient | SseClient | None = None
    with (logdir / f"{run.key}.stderr").open("ab") as log:
        try:
            server_port = hop_port = free_port()
            server = hop = None
            if run.server is not None:
                server = await start(
                    f"{run.key} server", run.server, server_port, server_port, run.server_ready, log
                )
                services.append(server)
            if run.hop is not None:
                hop_port = free_port()
                stop = signal.SIGINT if run.kind == "gateway" else signal.SIGTERM
                hop = await start(run.key, run.hop, hop_port, server_port, run.ready, log, stop)
                services.append(hop)
            caps = MODERN_ELICIT_CAPS if run.work == "ask" else None
            if run.front == "sse":
                client = SseClient(run.key, "127.0.0.1", hop_port)
            else:
                client = HttpClient(run.key, "127.0.0.1", hop_port, run.client_era, caps=caps)
            await client.handshake(timeout=60.0)
            return await _measure(client, run, hop, server, seconds, warmup, cap)
        finally:
            if client is not None:
                await client.end_session()
                client.close()
            for service in reversed(services):
                await service.stop()


async def _measure(
    client: LoadClient,
    run: HttpRun,
    hop: Service | None,
    server: Service | None,
    seconds: float,
    warmup: float,
    cap: int,
) -> HttpMeasured:
    work, concurrencies = run.work, levels(run)
    top = concurrencies[-1]
    await _phase(client, top, warmup, 0, work)  # warm caches, code paths and connections

    def server_pids() -> list[int]:
        # The MCP server: the hop's children (stdio back), or the HTTP server.
        pids = hop.descendants() if hop is not None else []
        return pids + ([server.pid, *server.descendants()] if server is not None else [])

    everything = [0, *([hop.pid] if hop else []), *server_pids()]
    latency = await _pinned_latency(
        everything, lambda c, s, n: _phase(client, c, s, n, work), seconds, warmup, cap
    )
    loads = {c: await _phase(client, c, seconds, cap, work) for c in concurrencies[:-1]}
    pids = server_pids()
    cpu0 = {pid: procs.cpu_seconds(pid) or 0.0 for pid in pids}
    hop0 = (procs.cpu_seconds(hop.pid) or 0.0) if hop else 0.0
    reaped0 = _reaped_seconds(hop.pid) if hop else 0.0
    own0 = time.process_time()
    loads[top] = await _phase(client, top, seconds, cap, work)
    own = time.process_time() - own0
    n = loads[top].replies
    served = sum(
        (procs.cpu_seconds(p) or cpu0.get(p, 0.0)) - cpu0.get(p, 0.0) for p in server_pids()
    )
    hop_cpu = None
    if hop is not None:
        served += _reaped_seconds(hop.pid) - reaped0  # children that ended meanwhile
        hop_cpu = ((procs.cpu_seconds(hop.pid) or hop0) - hop0) / n * 1e6
    rss = [procs.vm_hwm_kib(pid) for pid in server_pids()]
    return HttpMeasured(
        run,
        latency,
        loads,
        procs.vm_hwm_kib(hop.pid) if hop else None,
        sum(r for r in rss if r is not None) or None,
        hop_cpu,
        served / n * 1e6,
        own / n * 1e6,
    )


async def _stdio_phase(conn: Connection, c: int, seconds: float, cap: int) -> LoadResult:
    result = await conn.load(c, seconds, cap or 10**9)
    if result.errors or conn.bad_lines:
        raise BenchError(
            f"{conn.name}: {result.errors} error replies, {conn.bad_lines} bad lines at c={c};"
            f" first: {result.first_error}"
        )
    return result


async def measure_stdio(
    run: HttpRun, seconds: float, warmup: float, cap: int, logdir: Path
) -> HttpMeasured:
    """A stdio client (bench/client.py) → the hop it spawns → a fast HTTP
    server; or, with no hop, → the stdio server it spawns (a direct run)."""
    assert run.server is not None  # the HTTP server behind the hop, or the stdio server
    conn: Connection | None = None
    server: Service | None = None
    with (logdir / f"{run.key}.stderr").open("ab") as log:
        try:
            port = free_port()
            if run.hop is None:  # direct: the client spawns the stdio server itself
                command = list(run.server)
            else:
                server = await start(
                    f"{run.key} server", run.server, port, port, run.server_ready, log
                )
                command = [a.replace("{upstream}", str(port)) for a in run.hop]
            conn = await spawn(run.key, command, run.client_era, log, str(ROOT))
            LIVE_STDIO.add(conn)
            await conn.handshake(timeout=60.0)
            return await _measure_stdio(conn, server, seconds, warmup, cap, run)
        finally:
            if conn is not None:
                await conn.close(grace=5.0)
                LIVE_STDIO.discard(conn)
            if server is not None:
                await server.stop()


async def _measure_stdio(
    conn: Connection,
    server: Service | None,
    seconds: float,
    warmup: float,
    cap: int,
    run: HttpRun,
) -> HttpMeasured:
    """`server` None: the process `conn` spawned is the server, and there is no hop."""
    top = CONCURRENCIES[-1]
    await _stdio_phase(conn, top, warmup, 0)  # warm caches, code paths and connections

    def server_pids() -> list[int]:
        if server is None:
            return [conn.pid, *conn.tree()]
        return [server.pid, *server.descendants()]

    everything = [0, conn.pid, *conn.tree(), *([] if server is None else server_pids())]
    latency = await _pinned_latency(
        everything, lambda c, s, n: _stdio_phase(conn, c, s, n), seconds, warmup, cap
    )
    loads = {c: await _stdio_phase(conn, c, seconds, cap) for c in CONCURRENCIES[:-1]}
    pids = server_pids()
    cpu0 = {pid: procs.cpu_seconds(pid) or 0.0 for pid in pids}
    hop0 = procs.cpu_seconds(conn.pid) or 0.0
    own0 = time.process_time()
    loads[top] = await _stdio_phase(conn, top, seconds, cap)
    own = time.process_time() - own0
    n = loads[top].replies
    served = sum((procs.cpu_seconds(p) or cpu0.get(p, 0.0)) - cpu0.get(p, 0.0) for p in pids)
    hop_cpu = ((procs.cpu_seconds(conn.pid) or hop0) - hop0) / n * 1e6
    rss = [procs.vm_hwm_kib(pid) for pid in pids]
    if server is None:  # direct: the spawned process is the server, already counted
        return HttpMeasured(
            run,
            latency,
            loads,
            None,
            sum(r for r in rss if r is not None) or None,
            None,
            served / n * 1e6,
            own / n * 1e6,
        )
    return HttpMeasured(
        run,
        latency,
        loads,
        procs.vm_hwm_kib(conn.pid),
        sum(r for r in rss if r is not None) or None,
        hop_cpu,
        served / n * 1e6,
        own / n * 1e6,
    )


async def _pinned_latency(
    pids: list[int],
    phase: Callable[[int, float, int], Awaitable[LoadResult]],
    seconds: float,
    warmup: float,
    cap: int,
) -> LoadResult:
    """The c=1 latency phase with every process of the path (0: this one) on
    the idlest CPU, so the figure is one hop's, not the scheduler's."""
    before = procs.per_cpu_busy()
    await asyncio.sleep(0.1)
    cpu = procs.idlest_cpu(os.sched_getaffinity(0), before, procs.per_cpu_busy())
    mask = os.sched_getaffinity(0)
    try:
        for pid in pids:
            procs.set_affinity(pid, {cpu})
        await phase(1, warmup / 3, 0)
        return await phase(1, seconds, cap)
    finally:
        for pid in pids:
            procs.set_affinity(pid, mask)
