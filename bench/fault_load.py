"""Load and faults against the HTTP sidecar: what it holds, what it loses.

A bounded script, not a test (pytest never runs it): it starts one gateway
(`--listen 127.0.0.1:PORT -- python bench/fast_server.py --era legacy`) on
loopback with short limits, throws each hostile pattern of issue #9 at it
while a well-behaved modern client keeps calling `echo`, and prints, per
scenario, what the gateway held (file descriptors, RSS, parked calls, bytes
of log) and what was lost (well-behaved calls that failed, calls that never
got an answer). Every loop is bounded in count and time; it stops by itself.

    python -m bench.fault_load                 # all scenarios, ~1 min
    python -m bench.fault_load --only idle,kill --out /tmp/faults.md

Scenarios:
- idle: N connections that never send a byte (an idle-connection flood).
- slow: N connections that send a request head one byte at a time (slowloris).
- headers: requests with a huge header (one line, several MiB).
- kill: `kill -9` of the upstream under 32 concurrent calls.
- mrtr: 1,000 MRTR calls parked and abandoned (nobody retries).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench import procs
from bench.http_bench import Service, free_port
from bench.setups import ROOT

MODERN = "2026-07-28"
PV = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"

# The gateway's limits for this run: short, so that each scenario ends soon.
CONFIG = """\
[gateway]
log_format = "json"
max_inflight_per_client = 256

[upstream]
request_timeout = 10
restart_backoff_initial = 0.05
restart_backoff_max = 0.5

[http]
header_timeout = 2
body_timeout = 2
keepalive_timeout = 2
max_header_bytes = 16384
max_connections = {max_connections}

[mrtr]
state_ttl = {state_ttl}
max_parked_calls = 2000
"""


@dataclass
class Figures:
    scenario: str
    what: str
    held: dict[str, Any] = field(default_factory=dict)
    lost: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _status_field(pid: int, name: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def rss_mib(pid: int) -> float:
    kib = _status_field(pid, "VmRSS")
    return round((kib or 0) / 1024, 1)


def _echo(msg_id: int, text: str = "hello") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": msg_id,
        "method": "tools/call",
        "params": {
            "name": "echo",
            "arguments": {"text": text},
            "_meta": {PV: MODERN, CAPS: {}},
        },
    }


def _ask(msg_id: int, tool: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": msg_id,
        "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": {},
            "_meta": {PV: MODERN, CAPS: {"elicitation": {"form": {}}}},
        },
    }


def _headers(name: str) -> dict[str, str]:
    return {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": name,
    }


def _reply(resp: httpx.Response) -> dict[str, Any] | None:
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        for line in reversed(resp.content.split(b"\n")):
            if line.startswith(b"data:"):
                msg = orjson.loads(line[5:])
                if isinstance(msg, dict) and "method" not in msg:
                    return msg
        return None
    try:
        msg = orjson.loads(resp.content)
    except orjson.JSONDecodeError:
        return None
    return msg if isinstance(msg, dict) else None


class Gateway:
    def __init__(self, service: Service, url: str, log: Path) -> None:
        self.service = service
        self.url = url
        self.log = log

    @property
    def pid(self) -> int:
        return self.service.pid

    def upstream_pid(self) -> int | None:
        kids = procs.descendants(self.pid)
        return kids[-1] if kids else None

    def log_bytes(self) -> int:
        return self.log.stat().st_size

    async def metric(self, client: httpx.AsyncClient, name: str) -> float | None:
        resp = await client.get(self.url.replace("/mcp", "/metrics"), timeout=5)
        for line in resp.text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None


async def well_behaved(
    gw: Gateway, stop: asyncio.Event, tally: Counter[str], latencies: list[float]
) -> None:
    """One modern client calling echo in a loop until `stop` (bounded by it)."""
    async with httpx.AsyncClient(timeout=5) as client:
        i = 0
        while not stop.is_set():  # ends with the scenario
            i += 1
            started = time.perf_counter()
            try:
                resp = await client.post(gw.url, json=_echo(i), headers=_headers("echo"))
                msg = _reply(resp)
                ok = resp.status_code == 200 and msg is not None and "result" in msg
                tally["ok" if ok else f"http {resp.status_code}"] += 1
                if ok:
                    latencies.append(time.perf_counter() - started)
            except httpx.TimeoutException:
                tally["timeout"] += 1
            except httpx.HTTPError as exc:
                tally[type(exc).__name__] += 1
            await asyncio.sleep(0.01)


def _p50_ms(values: list[float]) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[len(values) // 2] * 1000, 2)


async def _with_probe(gw: Gateway, body: Any) -> tuple[Counter[str], list[float]]:
    stop = asyncio.Event()
    tally: Counter[str] = Counter()
    latencies: list[float] = []
    probe = asyncio.create_task(well_behaved(gw, stop, tally, latencies))
    try:
        await body
    finally:
        stop.set()
        await probe
    return tally, latencies


async def _open_idle(port: int, n: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    conns = []
    for _ in range(n):
        try:
            conns.append(await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2))
        except (OSError, TimeoutError):
            break
    return conns


async def _closed_by_peer(reader: asyncio.StreamReader, within: float) -> bool:
    try:
        data = await asyncio.wait_for(reader.read(65536), within)
    except TimeoutError:
        return False
    except OSError:
        return True
    # A refusal (408/503) then EOF, or EOF at once: the gateway let go.
    with contextlib.suppress(TimeoutError, OSError):
        while data:  # bounded by the per-read timeout and the peer closing
            data = await asyncio.wait_for(reader.read(65536), within)
    return True


async def scenario_idle(gw: Gateway, port: int, n: int) -> Figures:
    fig = Figures("idle", f"{n} connections that never send a byte")
    log0, fd0 = gw.log_bytes(), fds(gw.pid)
    conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def body() -> None:
        conns.extend(await _open_idle(port, n))
        fig.held["fds while flooded"] = fds(gw.pid)
        await asyncio.sleep(1.0)

    tally, lat = await _with_probe(gw, body())
    closed = await asyncio.gather(*(_closed_by_peer(r, 5.0) for r, _ in conns))
    for _, writer in conns:
        writer.close()
    await asyncio.sleep(0.5)
    fig.held.update(
        {
            "opened": len(conns),
            "closed by the gateway": sum(closed),
            "fds before/after": f"{fd0}/{fds(gw.pid)}",
            "log bytes": gw.log_bytes() - log0,
        }
    )
    fig.lost = {"well-behaved calls": dict(tally), "p50 ms": _p50_ms(lat)}
    return fig


async def scenario_slow(gw: Gateway, port: int, n: int) -> Figures:
    fig = Figures("slow", f"{n} connections sending their request head a byte every 0.25 s")
    log0, fd0 = gw.log_bytes(), fds(gw.pid)
    head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode()

    async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            writer.write(head)
            for _ in range(40):  # 10 s at most
                await asyncio.sleep(0.25)
                if reader.at_eof():
                    return True
                writer.write(b"a")
                await writer.drain()
        except OSError:
            return True
        return await _closed_by_peer(reader, 0.1)

    results: list[bool] = []

    async def body() -> None:
        conns = await _open_idle(port, n)
        results.extend(await asyncio.gather(*(drip(r, w) for r, w in conns)))
        for _, writer in conns:
            writer.close()

    tally, lat = await _with_probe(gw, body())
    await asyncio.sleep(0.5)
    fig.held = {
        "opened": len(results),
        "cut off by the gateway": sum(results),
        "fds before/after": f"{fd0}/{fds(gw.pid)}",
        "log bytes": gw.log_bytes() - log0,
    }
    fig.lost = {"well-behaved calls": dict(tally), "p50 ms": _p50_ms(lat)}
    return fig


async def scenario_headers(gw: Gateway, port: int, n: int, mib: int) -> Figures:
    fig = Figures("headers", f"{n} requests with a {mib} MiB header")
    rss0, log0 = rss_mib(gw.pid), gw.log_bytes()
    statuses: Counter[str] = Counter()
    junk = b"a" * (mib * 1024 * 1024)

    async def one() -> None:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError as exc:
            statuses[type(exc).__name__] += 1
            return
        try:
            writer.write(
                f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Accept: application/json, text/event-stream\r\n"
                "Content-Type: application/json\r\nX-Big: ".encode()
            )
            body = orjson.dumps(_echo(1))
            with contextlib.suppress(OSError):
                writer.write(junk + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                await asyncio.wait_for(writer.drain(), 10)
            line = await asyncio.wait_for(reader.readline(), 10)
            statuses[line.split(b" ")[1].decode() if line else "closed"] += 1
        except (OSError, TimeoutError, IndexError) as exc:
            statuses[type(exc).__name__] += 1
        finally:
            writer.close()

    async def body() -> None:
        for _ in range(n):
            await one()

    tally, lat = await _with_probe(gw, body())
    fig.held = {
        "answers": dict(statuses),
        "RSS MiB before/after": f"{rss0}/{rss_mib(gw.pid)}",
        "log bytes": gw.log_bytes() - log0,
    }
    fig.lost = {"well-behaved calls": dict(tally), "p50 ms": _p50_ms(lat)}
    return fig


async def scenario_kill(gw: Gateway, concurrency: int, seconds: float) -> Figures:
    fig = Figures("kill", f"kill -9 of the upstream under {concurrency} concurrent calls")
    outcomes: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    victim = gw.upstream_pid()
    killed_at: list[float] = []
    first_ok_after: list[float] = []
    stop = asyncio.Event()
    log0 = gw.log_bytes()

    async def worker(client: httpx.AsyncClient, base: int) -> None:
        i = 0
        while not stop.is_set():  # ends with the scenario
            i += 1
            try:
                resp = await client.post(
                    gw.url, json=_echo(base + i), headers=_headers("echo"), timeout=15
                )
            except httpx.TimeoutException:
                outcomes["no answer within 15 s"] += 1
                continue
            except httpx.HTTPError as exc:
                outcomes[type(exc).__name__] += 1
                continue
            msg = _reply(resp)
            if msg is not None and "result" in msg:
                outcomes["ok"] += 1
                if killed_at and not first_ok_after:
                    first_ok_after.append(time.monotonic() - killed_at[0])
            elif msg is not None and "error" in msg:
                outcomes["error"] += 1
                data = msg["error"].get("data")
                reasons[str(data.get("reason")) if isinstance(data, dict) else "-"] += 1
            else:
                outcomes[f"http {resp.status_code}"] += 1

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits) as client:
        restarts0 = await gw.metric(client, "mcp_gateway_upstream_restarts_total")
        tasks = [asyncio.create_task(worker(client, k * 1_000_000)) for k in range(concurrency)]
        await asyncio.sleep(seconds / 3)
        if victim is not None:
            os.kill(victim, signal.SIGKILL)
            killed_at.append(time.monotonic())
        await asyncio.sleep(seconds * 2 / 3)
        stop.set()
        await asyncio.gather(*tasks)
        restarts = await gw.metric(client, "mcp_gateway_upstream_restarts_total")
    fig.held = {
        "upstream restarts": (restarts or 0) - (restarts0 or 0),
        "first success after the kill (s)": round(first_ok_after[0], 3) if first_ok_after else None,
        "log bytes": gw.log_bytes() - log0,
    }
    fig.lost = {"calls": dict(outcomes), "error reasons": dict(reasons)}
    return fig


async def scenario_mrtr(gw: Gateway, calls: int, state_ttl: float, tool: str) -> Figures:
    fig = Figures("mrtr", f"{calls} MRTR calls parked and abandoned (state_ttl {state_ttl:g} s)")
    answers: Counter[str] = Counter()
    victim = gw.upstream_pid()
    rss0, log0 = rss_mib(gw.pid), gw.log_bytes()
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    async with httpx.AsyncClient(limits=limits, timeout=15) as client:
        restarts0 = await gw.metric(client, "mcp_gateway_upstream_restarts_total")
        sem = asyncio.Semaphore(32)

        async def park(i: int) -> None:
            async with sem:
                try:
                    resp = await client.post(gw.url, json=_ask(i, tool), headers=_headers(tool))
                except httpx.HTTPError as exc:
                    answers[type(exc).__name__] += 1
                    return
                msg = _reply(resp)
                result = (msg or {}).get("result") or {}
                answers[
                    str(result.get("resultType") or (msg or {}).get("error", {}).get("code"))
                ] += 1

        await asyncio.gather(*(park(i) for i in range(calls)))
        parked = await gw.metric(client, "mcp_gateway_parked_calls")
        rss_parked = rss_mib(gw.pid)
        deadline = time.monotonic() + state_ttl + 15
        left = parked
        while time.monotonic() < deadline:  # bounded by state_ttl + 15 s
            await asyncio.sleep(0.5)
            left = await gw.metric(client, "mcp_gateway_parked_calls")
            if left == 0:
                break
        restarts = await gw.metric(client, "mcp_gateway_upstream_restarts_total")
    tally, lat = await _with_probe(gw, asyncio.sleep(1.0))
    fig.held = {
        "answers": dict(answers),
        "parked at peak": parked,
        "parked after expiry": left,
        "RSS MiB before/parked/after": f"{rss0}/{rss_parked}/{rss_mib(gw.pid)}",
        "log bytes": gw.log_bytes() - log0,
    }
    fig.lost = {
        "upstream alive (same pid)": victim is not None and procs.alive(victim),
        "upstream restarts": (restarts or 0) - (restarts0 or 0),
        "well-behaved calls after": dict(tally),
        "p50 ms": _p50_ms(lat),
    }
    return fig


# The upstreams: the bench's fast server (its `ask` tool elicits), or the real
# mcp 1.30 FastMCP fixture server (`ask_name` elicits; echo answers as `echo`).
UPSTREAMS = {
    "fast": ((sys.executable, str(ROOT / "bench" / "fast_server.py"), "--era", "legacy"), "ask"),
    "py1": (
        (str(ROOT / ".peers" / "py1" / "bin" / "python"),
         str(ROOT / "compat_matrix" / "peers" / "py1_server.py")),
        "ask_name",
    ),
}  # fmt: skip


async def start_gateway(
    workdir: Path, max_connections: int, state_ttl: float, upstream: tuple[str, ...]
) -> Gateway:
    config = workdir / "gateway.toml"
    config.write_text(CONFIG.format(max_connections=max_connections, state_ttl=state_ttl))
    log_path = workdir / "gateway.log"
    port = free_port()
    command = (
        sys.executable, "-m", "gateway", "--config", str(config),
        "--listen", f"127.0.0.1:{port}",
        "--", *upstream,
    )  # fmt: skip
    log = log_path.open("wb")
    proc = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, cwd=ROOT,
        start_new_session=True,
    )  # fmt: skip
    service = Service("gateway", proc, port)
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    async with httpx.AsyncClient(timeout=2) as client:
        while True:  # bounded: 30 s
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url.replace("/mcp", "/readyz"))).status_code == 200:
                    break
            if proc.returncode is not None or time.monotonic() > deadline:
                raise SystemExit(f"the gateway did not become ready; see {log_path}")
            await asyncio.sleep(0.1)
    return Gateway(service, url, log_path)


def render(figures: list[Figures], gw_note: str) -> str:
    lines = [
        "# Load and faults (`python -m bench.fault_load`)",
        "",
        gw_note,
        "",
        "| scenario | what | held | lost |",
        "|---|---|---|---|",
    ]
    for fig in figures:
        held = "; ".join(f"{k}: {v}" for k, v in fig.held.items())
        lost = "; ".join(f"{k}: {v}" for k, v in fig.lost.items())
        lines.append(f"| {fig.scenario} | {fig.what} | {held} | {lost} |")
    return "\n".join(lines) + "\n"


async def main_async(args: argparse.Namespace) -> tuple[str, bool]:
    only = set(args.only.split(",")) if args.only else {"idle", "slow", "headers", "kill", "mrtr"}
    with tempfile.TemporaryDirectory(prefix="fault-load-") as tmp:
        server, ask_tool = UPSTREAMS[args.upstream]
        gw = await start_gateway(Path(tmp), args.max_connections, args.state_ttl, server)
        figures: list[Figures] = []
        try:
            port = int(gw.url.split(":")[2].split("/")[0])
            if "idle" in only:
                figures.append(await scenario_idle(gw, port, args.connections))
            if "slow" in only:
                figures.append(await scenario_slow(gw, port, args.slow))
            if "headers" in only:
                figures.append(await scenario_headers(gw, port, args.big_headers, args.header_mib))
            if "kill" in only:
                figures.append(await scenario_kill(gw, 32, args.kill_seconds))
            if "mrtr" in only:
                figures.append(await scenario_mrtr(gw, args.parked, args.state_ttl, ask_tool))
            alive = gw.service.proc.returncode is None
        finally:
            await gw.service.stop()
        note = (
            f"One gateway, HTTP front, upstream `{args.upstream}` over stdio; connection cap "
            f"{args.max_connections}, idle/header/body timeouts 2 s, 16 KiB of headers. "
            f"Gateway alive at the end: {alive}. Log: {gw.log.stat().st_size} bytes in all."
        )
    text = render(figures, note)
    sys.stdout.write(text)
    return text, alive


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help="comma-separated scenarios: idle,slow,headers,kill,mrtr")
    p.add_argument("--connections", type=int, default=2000, help="idle flood size")
    p.add_argument("--max-connections", type=int, default=1000, help="the gateway's cap")
    p.add_argument("--slow", type=int, default=300, help="slowloris connections")
    p.add_argument("--big-headers", type=int, default=10, help="oversized-header requests")
    p.add_argument("--header-mib", type=int, default=8, help="size of each oversized header")
    p.add_argument("--kill-seconds", type=float, default=6.0, help="length of the kill scenario")
    p.add_argument("--parked", type=int, default=1000, help="MRTR calls to abandon")
    p.add_argument("--state-ttl", type=float, default=5.0, help="parked calls' lifetime")
    p.add_argument(
        "--upstream", choices=sorted(UPSTREAMS), default="fast",
        help="fast: bench/fast_server.py (legacy); py1: the real mcp 1.30 fixture server",
    )  # fmt: skip
    p.add_argument("--out", help="also write the table (markdown) here")
    args = p.parse_args()
    text, alive = asyncio.run(main_async(args))
    if args.out:
        Path(args.out).write_text(text)
    return 0 if alive else 1


if __name__ == "__main__":
    sys.exit(main())
