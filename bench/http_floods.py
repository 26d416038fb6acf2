"""Connection floods against the gateway's HTTP front, on loopback, bounded in
connections and time: idle connections, slow heads, slow bodies and one
oversized header, each while a well-behaved client keeps calling. It prints
what the gateway held (connections, descriptors, memory, log bytes) and what
the well-behaved client lost.

    python -m bench.http_floods                      # ~40 s
    python -m bench.http_floods --open-files 1024    # as under a common default limit

The gateway runs with short timeouts (`--timeout`, default 2 s, for the head,
the body and idle connections) so that the run ends by itself; everything it
starts is stopped by pid.
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

from bench.setups import ROOT, fast_server

PY = sys.executable
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
ECHO_REQUEST = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json, text/event-stream\r\n"
    b"Content-Type: application/json\r\nMcp-Protocol-Version: 2026-07-28\r\n"
    b"Mcp-Method: tools/call\r\nMcp-Name: echo\r\nContent-Length: %d\r\n\r\n" % len(ECHO) + ECHO
)


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


async def start_gateway(workdir: Path, timeout: float, open_files: int | None) -> Gateway:
    port = free_port()
    config = workdir / "gw.toml"
    config.write_text(
        f"[http]\nheader_timeout = {timeout}\nbody_timeout = {timeout}\nidle_timeout = {timeout}\n"
    )
    log = workdir / "gw.log"
    cmd = [PY, "-m", "gateway", "--config", str(config), "--listen", f"127.0.0.1:{port}"]
    cmd += ["--log-level", "warning", "--log-format", "json", "--", *fast_server("legacy")]
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


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        gw = await start_gateway(Path(tmp), args.timeout, args.open_files)
        try:
            fds0, rss0, log0 = gw.fds(), gw.rss_mib(), gw.log_bytes()
            print(
                f"gateway pid {gw.proc.pid}, port {gw.port}: {fds0} fds, RSS {rss0:.0f} MiB; "
                f"timeouts {args.timeout:g} s; {args.connections} connections per flood"
            )
            head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            wait = args.timeout + 1.5
            await phase("idle", gw, args.connections, b"", b"", wait, None)
            await phase("slow heads", gw, args.connections, head, b"X-A: b\r\n", wait, b"408")
            body_head = (
                head + b"Accept: application/json, text/event-stream\r\n"
                b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
            )
            await phase("slow bodies", gw, args.connections, body_head, b" ", wait, b"408")
            await big_header(gw, args.header_mb)
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


def cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.http_floods", description=__doc__)
    p.add_argument("--connections", type=int, default=2000, help="per flood (default 2000)")
    p.add_argument("--timeout", type=float, default=2.0, help="head/body/idle timeout (s)")
    p.add_argument("--header-mb", type=int, default=200, help="oversized header size (MB)")
    p.add_argument("--open-files", type=int, help="run the gateway under this RLIMIT_NOFILE")
    return asyncio.run(main(p.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(cli())
