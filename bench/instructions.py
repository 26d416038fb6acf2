"""Instructions per call: the gateway's HTTP front against the floor, counted
with valgrind's callgrind instead of timed (issue #12).

    python -m bench.instructions [--calls N] [--out bench/RESULTS-instructions.md]

Time on a shared virtual machine swings by tens of percent between runs
(bench/RESULTS-http.md says how quiet each run was); the instructions a
process executes for the same calls do not (0.2 % apart between runs here).
Each hop (the gateway's HTTP front or the HTTP→stdio floor, each in front of
bench/fast_server.py over stdio) runs under callgrind; the client
(bench/http_client.py) handshakes and warms it up, the counters are zeroed
(`callgrind_control -z`), N echo calls are made at one concurrency, and the
counters are dumped (`-d`): their total over N is the hop's instructions a
call, in user space. The kernel's share (system calls, wake-ups) is not in
it: the floor makes the same system calls, so the ratio here is of the work
each hop does itself, which is what separates the gateway from the floor.
Under callgrind a hop runs some 50 times slower, so no timing is read here.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/instructions.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import http_bench, http_setups, report
from bench.client import BenchError
from bench.http_client import HttpClient
from bench.setups import fast_server

CONCURRENCIES = (1, 8)
WARM_CALLS = 200
READY_TIMEOUT = 300.0  # start-up under callgrind, era probe included
CALL_TIMEOUT = 600.0


@dataclass(frozen=True, slots=True)
class Hop:
    key: str
    label: str
    client_era: str
    server_era: str
    kind: str  # gateway | floor


HOPS = (
    Hop("gw-ML", "modern client → gateway → stdio fast legacy", "modern", "legacy", "gateway"),
    Hop("gw-LM", "legacy client → gateway → stdio fast modern", "legacy", "modern", "gateway"),
    Hop("gw-LL", "legacy client → gateway → stdio fast legacy", "legacy", "legacy", "gateway"),
    Hop("gw-MM", "modern client → gateway → stdio fast modern", "modern", "modern", "gateway"),
    Hop(
        "floor-L",
        "legacy client → HTTP→stdio floor → stdio fast legacy",
        "legacy",
        "legacy",
        "floor",
    ),
    Hop(
        "floor-M",
        "modern client → HTTP→stdio floor → stdio fast modern",
        "modern",
        "modern",
        "floor",
    ),
)


def command(hop: Hop, out: Path) -> tuple[str, ...]:
    server = fast_server(hop.server_era)
    if hop.kind == "gateway":
        inner = http_setups.gateway(None, hop.key, "--startup-timeout", "300", "--", *server)
    else:
        inner = http_setups.http_stdio_floor(server)
    # The hop itself is counted, not the server it starts (no --trace-children).
    valgrind = ("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/{hop.key}.%p")
    return (*valgrind, *inner)


def instructions(dump: Path) -> int:
    """The total a callgrind dump file counted."""
    for line in dump.read_text().splitlines():
        match = re.match(r"(?:summary|totals):\s+(\d+)", line)
        if match:
            return int(match.group(1))
    raise BenchError(f"{dump}: no totals line")


def control(flag: str, pid: int) -> None:
    subprocess.run(
        ["callgrind_control", flag, str(pid)], check=True, capture_output=True, timeout=60
    )


def dumped(out: Path, key: str, pid: int) -> int:
    """Dump the hop's counters and read their total."""
    before = set(out.glob(f"{key}.{pid}.*"))
    control("-d", pid)
    (dump,) = set(out.glob(f"{key}.{pid}.*")) - before
    return instructions(dump)


async def measure(hop: Hop, calls: int, out: Path, log: Path) -> dict[int, float]:
    """The hop's instructions a call at each concurrency."""
    port = http_bench.free_port()
    with log.open("ab") as sink:
        service = await http_bench.start(
            hop.key, command(hop, out), port, 0, "/readyz", sink, ready_timeout=READY_TIMEOUT
        )
    client = HttpClient(hop.key, "127.0.0.1", port, hop.client_era)
    per_call: dict[int, float] = {}
    try:
        await client.handshake(CALL_TIMEOUT)
        for c in CONCURRENCIES:
            await client.load(c, CALL_TIMEOUT, WARM_CALLS)
            await asyncio.to_thread(control, "-z", service.pid)
            result = await client.load(c, CALL_TIMEOUT, calls)
            if result.errors or result.replies < calls:
                raise BenchError(f"{hop.key}: {result.errors} errors, {result.replies} replies")
            total = await asyncio.to_thread(dumped, out, hop.key, service.pid)
            per_call[c] = total / result.replies
        await client.end_session()
    finally:
        client.close()
        await service.stop()
    return per_call


def table(measured: dict[str, dict[int, float]]) -> str:
    head = ["hop", "path", *(f"instructions/call c={c}" for c in CONCURRENCIES)]
    head += [f"gateway/floor c={c}" for c in CONCURRENCIES]
    rows = []
    for hop in HOPS:
        mine = measured[hop.key]
        floor = measured.get(f"floor-{hop.server_era[0].upper()}")
        ratios = [
            f"{mine[c] / floor[c]:.2f}" if hop.kind == "gateway" and floor else "-"
            for c in CONCURRENCIES
        ]
        rows.append([hop.key, hop.label, *(f"{mine[c]:,.0f}" for c in CONCURRENCIES), *ratios])
    return report._table(head, rows)


async def measure_all(calls: int) -> dict[str, dict[int, float]]:
    measured: dict[str, dict[int, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        out = Path(tmp)
        for hop in HOPS:
            measured[hop.key] = await measure(hop, calls, out, out / "hops.log")
            figures = ", ".join(f"c={c} {n:,.0f}" for c, n in measured[hop.key].items())
            print(f"{hop.key}: {figures} instructions/call", file=sys.stderr)
    return measured


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.instructions", description=__doc__.splitlines()[0]
    )
    p.add_argument("--calls", type=int, default=1000, help="calls counted at each concurrency")
    p.add_argument("--out", default="", help="markdown report path (default: print only)")
    args = p.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    measured = asyncio.run(measure_all(args.calls))
    info = report.machine_info(0.0)
    del info["other load"]  # instructions do not depend on it
    version = subprocess.run(["valgrind", "--version"], check=False, capture_output=True, text=True)
    head = "\n".join(f"- **{k}**: {v}" for k, v in info.items())
    text = (
        "# mcp-era-gateway: instructions per call\n\n"
        f"{head}\n- **settings**: {args.calls} calls at each concurrency after"
        f" {WARM_CALLS} warm-up ones; {version.stdout.strip()}\n\n"
        "Generated by `python -m bench.instructions`; see bench/README.md.\n\n"
        f"{table(measured)}\n"
    )
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
