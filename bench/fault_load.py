"""Load and faults against the gateway's HTTP sidecar, on loopback, bounded in
connections, calls and time: idle connections, slow heads, slow bodies, one
oversized header, `kill -9` of the upstream under 32 concurrent calls, and
1,000 MRTR calls parked and never retried — each while a well-behaved client
keeps calling. It prints what the gateway held (connections, descriptors,
memory, parked calls, log bytes) and what was lost (calls that failed or got no
answer at all).

    python -m bench.fault_load                      # ~1 min
    python -m bench.fault_load --open-files 1024    # as under a common default limit
    python -m bench.fault_load --upstream py1       # the real mcp 1.30 server upstream

The gateway runs with short timeouts (`--timeout`, default 2 s, for the head,
the body and idle connections; `--state-ttl` for parked calls) so that the run
ends by itself; everything it starts is stopped by pid.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import procs
from bench.setups import ROOT, fast_server, py1_server

PY = sys.executable
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
# The upstream's tool that elicits (MRTR) and whether the upstream can be had.
UPSTREAMS = {"fast": (fast_server("legacy"), "ask"), "py1": (py1_server(), "ask_name")}
LIMITED = (
    "import os, resource, sys; "
    "n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])"
)
ECHO = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "echo",
            "arguments": {"text": "hi"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
).encode()


def call_request(tool: str, arguments: dict[str, object], capabilities: dict[str, object]) -> bytes:
    """A modern tools/call as one HTTP/1.1 request (Connection: close)."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": tool,
                "arguments": arguments,
                "_meta": {
                    **MODERN_META,
                    "io.modelcontextprotocol/clientCapabilities": capabilities,
                },
            },
        }
    ).encode()
    return (
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json, text/event-stream\r\n"
        b"Content-Type: application/json\r\nMcp-Protocol-Version: 2026-07-28\r\n"
        b"Mcp-Method: tools/call\r\nMcp-Name: %s\r\nConnection: close\r\n"
        b"Content-Length: %d\r\n\r\n" % (tool.encode(), len(body)) + body
    )


ECHO_REQUEST = call_request("echo", {"text": "hi"}, {})


async def exchange(port: int, request: bytes, timeout: float) -> tuple[bytes, dict[str, object]]:
    """Send one request on a fresh connection: the status line and the JSON-RPC
    reply (the last `data:` line of an SSE body, or the JSON body)."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(request)
            raw = await reader.read(-1)  # Connection: close ends the body
        finally:
            writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    if b"text/event-stream" in head.lower():
        lines = [ln for ln in body.split(b"\n") if ln.startswith(b"data:")]
        body = lines[-1][5:] if lines else b""
    try:
        reply = json.loads(body) if body else {}
    except ValueError:
        reply = {}
    return head.split(b"\r\n", 1)[0], reply if isinstance(reply, dict) else {}


@dataclass
class Gateway:
    proc: asyncio.subprocess.Process
    port: int
    log: Path

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def log_bytes(self) -> int:
        return self.log.stat().st_size

    def upstream_pids(self) -> list[int]:
        return procs.descendants(self.proc.pid)

    async def metric(self, name: str) -> float | None:
        """One unlabelled sample from /metrics."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            async with asyncio.timeout(5):
                text = (await reader.read(-1)).decode()
        finally:
            writer.close()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None


@dataclass
class Probe:
    """A well-behaved client calling echo on fresh connections meanwhile."""

    ok: int = 0
    failed: int = 0
    latencies: list[float] = field(default_factory=list)

    async def once(self, port: int) -> None:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(5):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(ECHO_REQUEST)
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                body = await reader.readexactly(length)
                writer.close()
            if head.startswith(b"HTTP/1.1 200") and b'"result"' in body:
                self.ok += 1
                self.latencies.append(time.perf_counter() - started)
            else:
                self.failed += 1
        except (OSError, TimeoutError, asyncio.IncompleteReadError, IndexError, ValueError):
            self.failed += 1

    async def run(self, port: int, stop: asyncio.Event) -> None:
        while not stop.is_set():  # ends when the flood phase is over
            await self.once(port)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)

    def summary(self) -> str:
        if not self.latencies:
            return f"{self.ok} ok, {self.failed} failed"
        lat = sorted(self.latencies)
        p50, worst = lat[len(lat) // 2] * 1000, lat[-1] * 1000
        return f"{self.ok} ok, {self.failed} failed, p50 {p50:.1f} ms, max {worst:.0f} ms"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def start_gateway(workdir: Path, args: argparse.Namespace) -> Gateway:
    port = free_port()
    config = workdir / "gw.toml"
    timeout = args.timeout
    config.write_text(
        f"[http]\nheader_timeout = {timeout}\nbody_timeout = {timeout}\nidle_timeout = {timeout}\n"
        "[upstream]\nrestart_backoff_initial = 0.05\nrestart_backoff_max = 0.5\n"
        f"[mrtr]\nstate_ttl = {args.state_ttl}\nmax_parked_calls = {args.parked + 100}\n"
    )
    log = workdir / "gw.log"
    open_files = args.open_files
    cmd = [PY, "-m", "gateway", "--config", str(config), "--listen", f"127.0.0.1:{port}"]
    cmd += ["--log-level", "warning", "--log-format", "json"]
    cmd += ["--", *UPSTREAMS[args.upstream][0]]
    if open_files is not None:
        cmd = [PY, "-c", LIMITED, str(open_files), *cmd[1:]]
    with log.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdin=asyncio.subprocess.DEVNULL, stderr=err, cwd=ROOT, start_new_session=True
        )
    gw = Gateway(proc, port, log)
    probe = Probe()
    deadline = time.monotonic() + 30
    while probe.ok == 0:  # ends when the gateway answers (or after 30 s)
        if time.monotonic() > deadline or proc.returncode is not None:
            raise SystemExit(f"the gateway did not start; see {log}")
        await probe.once(port)
        await asyncio.sleep(0.1)
    return gw


async def connect_many(port: int, n: int) -> list[socket.socket]:
    """n connections, opened concurrently (non-blocking connects)."""
    loop = asyncio.get_running_loop()
    socks: list[socket.socket] = []

    async def one() -> None:
        sock = socket.socket()
        sock.setblocking(False)
        try:
            async with asyncio.timeout(10):
                await loop.sock_connect(sock, ("127.0.0.1", port))
            socks.append(sock)
        except (OSError, TimeoutError):
            sock.close()

    await asyncio.gather(*(one() for _ in range(n)))
    return socks


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(65536, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def answered(sock: socket.socket, status: bytes) -> bool:
    try:
        return sock.recv(65536, socket.MSG_PEEK).startswith(b"HTTP/1.1 " + status)
    except OSError:
        return False


async def phase(
    name: str,
    gw: Gateway,
    n: int,
    first: bytes,
    trickle: bytes,
    wait: float,
    status: bytes | None,
) -> None:
    probe, stop = Probe(), asyncio.Event()
    log0, fds0 = gw.log_bytes(), gw.fds()
    task = asyncio.create_task(probe.run(gw.port, stop))
    started = time.monotonic()
    socks = await connect_many(gw.port, n)
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.send(first)
    held = gw.fds() - fds0
    end = time.monotonic() + wait
    while time.monotonic() < end:  # ends after `wait` seconds
        if trickle:
            for sock in socks:
                with contextlib.suppress(OSError):
                    sock.send(trickle)
        await asyncio.sleep(0.25)
    refused = sum(answered(s, status) for s in socks) if status else 0
    closed = sum(closed_by_peer(s) or answered(s, b"") for s in socks)
    stop.set()
    await task
    for sock in socks:
        sock.close()
    await asyncio.sleep(0.3)
    print(
        f"{name:<14} {len(socks):>5} opened  held at peak +{held:<5} fds  "
        f"after {time.monotonic() - started:4.1f} s: {closed:>5} closed by the gateway"
        + (f" ({refused} answered {status.decode()})" if status else "")
        + f"  | client: {probe.summary()}  | fds now +{gw.fds() - fds0}, "
        f"RSS {gw.rss_mib():.0f} MiB, log +{gw.log_bytes() - log0} B"
    )


async def big_header(gw: Gateway, megabytes: int) -> None:
    rss0 = gw.rss_mib()
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
    chunk, sent, peak = b"a" * 65536, 0, rss0
    try:
        async with asyncio.timeout(60):
            while sent < megabytes << 20:  # ends when refused or all is sent
                writer.write(chunk)
                await writer.drain()
                sent += len(chunk)
                if sent % (4 << 20) == 0:
                    peak = max(peak, gw.rss_mib())
    except (OSError, TimeoutError):
        pass
    answer = b""
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(2):
            answer = await reader.read(100)
    writer.close()
    print(
        f"header {megabytes} MB: the gateway stopped reading after {sent / 2**20:.1f} MiB sent, "
        f"answer {answer[:12].decode(errors='replace')!r}; RSS {rss0:.0f} → peak {peak:.0f} → "
        f"{gw.rss_mib():.0f} MiB"
    )


async def kill_upstream(gw: Gateway, concurrency: int, seconds: float) -> None:
    """`kill -9` of the upstream while `concurrency` clients call echo: every
    call must end with an answer or a clear gateway error, none unanswered."""
    outcomes: dict[str, int] = {}
    victims = gw.upstream_pids()
    restarts0 = await gw.metric("mcp_gateway_upstream_restarts_total") or 0
    log0 = gw.log_bytes()
    stop = asyncio.Event()
    killed_at: list[float] = []
    recovered: list[float] = []

    def count(key: str) -> None:
        outcomes[key] = outcomes.get(key, 0) + 1

    async def worker() -> None:
        while not stop.is_set():  # ends with the phase
            started = time.monotonic()
            try:
                status, reply = await exchange(gw.port, ECHO_REQUEST, 15)
            except TimeoutError:
                count("no answer in 15 s")
                continue
            except OSError as exc:
                count(type(exc).__name__)
                continue
            error = reply.get("error")
            if "result" in reply:
                count("ok")
                if killed_at and started > killed_at[0] and not recovered:
                    # The first call sent after the kill that succeeds.
                    recovered.append(time.monotonic() - killed_at[0])
            elif isinstance(error, dict):
                data = error.get("data")
                reason = data.get("reason") if isinstance(data, dict) else None
                count(f"error ({reason})")
            else:
                count(status.decode(errors="replace"))

    workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
    await asyncio.sleep(seconds / 3)
    procs.kill(victims)
    killed_at.append(time.monotonic())
    await asyncio.sleep(seconds * 2 / 3)
    stop.set()
    await asyncio.gather(*workers)
    restarts = (await gw.metric("mcp_gateway_upstream_restarts_total") or 0) - restarts0
    after = f"{recovered[0] * 1000:.0f} ms" if recovered else "never"
    print(
        f"kill -9        upstream pids {victims} killed under {concurrency} concurrent calls: "
        f"{dict(sorted(outcomes.items()))} | {restarts:.0f} restart(s), first success {after} "
        f"after the kill, log +{gw.log_bytes() - log0} B"
    )


async def abandoned_mrtr(gw: Gateway, tool: str, calls: int, state_ttl: float) -> None:
    """`calls` modern calls that get input_required and are never retried:
    every parked call must be let go at its expiry, the upstream unharmed."""
    request = call_request(tool, {}, {"elicitation": {"form": {}}})
    answers: dict[str, int] = {}
    victims = gw.upstream_pids()
    restarts0 = await gw.metric("mcp_gateway_upstream_restarts_total") or 0
    rss0, log0 = gw.rss_mib(), gw.log_bytes()
    gate = asyncio.Semaphore(32)

    async def park() -> None:
        async with gate:
            try:
                _, reply = await exchange(gw.port, request, 15)
            except (OSError, TimeoutError) as exc:
                key = type(exc).__name__
            else:
                result = reply.get("result")
                error = reply.get("error")
                if isinstance(result, dict):
                    key = str(result.get("resultType"))
                else:
                    key = f"error {error.get('code')}" if isinstance(error, dict) else "junk"
            answers[key] = answers.get(key, 0) + 1

    started = time.monotonic()
    await asyncio.gather(*(park() for _ in range(calls)))
    parked = await gw.metric("mcp_gateway_parked_calls")
    rss_parked = gw.rss_mib()
    left = parked
    deadline = started + state_ttl + 15
    while left and time.monotonic() < deadline:  # ends when all are let go, or after 15 s more
        await asyncio.sleep(0.25)
        left = await gw.metric("mcp_gateway_parked_calls")
    probe = Probe()
    for _ in range(20):
        await probe.once(gw.port)
    alive = all(procs.alive(pid) for pid in victims)
    restarts = (await gw.metric("mcp_gateway_upstream_restarts_total") or 0) - restarts0
    print(
        f"mrtr abandoned {calls} calls answered {answers}; {parked:.0f} parked at peak, "
        f"{left:.0f} left {time.monotonic() - started:.1f} s later (state_ttl {state_ttl:g} s); "
        f"upstream {'alive' if alive else 'DEAD'}, {restarts:.0f} restart(s); "
        f"RSS {rss0:.0f} → {rss_parked:.0f} → {gw.rss_mib():.0f} MiB, "
        f"log +{gw.log_bytes() - log0} B"
        f" | client after: {probe.summary()}"
    )


async def main(args: argparse.Namespace) -> int:
    phases = set(args.only.split(",")) if args.only else set(PHASES)
    with tempfile.TemporaryDirectory() as tmp:
        gw = await start_gateway(Path(tmp), args)
        try:
            fds0, rss0, log0 = gw.fds(), gw.rss_mib(), gw.log_bytes()
            print(
                f"gateway pid {gw.proc.pid}, port {gw.port}: {fds0} fds, RSS {rss0:.0f} MiB; "
                f"timeouts {args.timeout:g} s; {args.connections} connections per flood"
            )
            head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            wait = args.timeout + 1.5
            if "idle" in phases:
                await phase("idle", gw, args.connections, b"", b"", wait, None)
            if "slow" in phases:
                await phase("slow heads", gw, args.connections, head, b"X-A: b\r\n", wait, b"408")
                body_head = (
                    head + b"Accept: application/json, text/event-stream\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
                )
                await phase("slow bodies", gw, args.connections, body_head, b" ", wait, b"408")
            if "header" in phases:
                await big_header(gw, args.header_mb)
            if "kill" in phases:
                await kill_upstream(gw, 32, args.kill_seconds)
            if "mrtr" in phases:
                await abandoned_mrtr(gw, UPSTREAMS[args.upstream][1], args.parked, args.state_ttl)
            await asyncio.sleep(0.5)
            print(
                f"after: {gw.fds()} fds (started with {fds0}), RSS {gw.rss_mib():.0f} MiB "
                f"(started with {rss0:.0f})"
            )
        finally:
            if gw.proc.returncode is None:
                gw.proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(gw.proc.wait(), 10)
                except TimeoutError:
                    gw.proc.kill()
                    await gw.proc.wait()
        # Read after exit: the last counts are flushed at shutdown.
        print(f"log: {gw.log_bytes() - log0} bytes over the whole run")
        for line in gw.log.read_text().splitlines():
            event = json.loads(line)["event"] if line.startswith("{") else line
            if "in the last" in event or "open-files" in event:
                print("  ", event)
    return 0


PHASES = ("idle", "slow", "header", "kill", "mrtr")


def cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.fault_load",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--only", help=f"comma-separated phases of {','.join(PHASES)} (default all)")
    p.add_argument(
        "--upstream",
        choices=sorted(UPSTREAMS),
        default="fast",
        help="fast: bench/fast_server.py (legacy); py1: the real mcp 1.30 server",
    )
    p.add_argument("--kill-seconds", type=float, default=6.0, help="length of the kill phase")
    p.add_argument("--parked", type=int, default=1000, help="MRTR calls to abandon")
    p.add_argument("--state-ttl", type=float, default=5.0, help="parked calls' lifetime (s)")
    p.add_argument("--connections", type=int, default=2000, help="per flood (default 2000)")
    p.add_argument("--timeout", type=float, default=2.0, help="head/body/idle timeout (s)")
    p.add_argument("--header-mb", type=int, default=200, help="oversized header size (MB)")
    p.add_argument("--open-files", type=int, help="run the gateway under this RLIMIT_NOFILE")
    return asyncio.run(main(p.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(cli())
