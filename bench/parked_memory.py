"""Memory per parked MRTR call, measured inside one gateway process.

    python -m bench.parked_memory [--calls 500] [--json]

Through the stdio gateway only one call can be parked per legacy session (on a
legacy stdio session nothing says which call a server request belongs to, so
such a call holds its session alone), and the stdio front serves one
principal. So N parked calls cannot be made from outside, and RSS differences
between gateways with K upstream processes would measure sessions, not calls.
Instead this script builds the gateway's own GatewayService in-process, with
`max_sessions` and `max_processes` N + 1, N client links with N principals (so N legacy sessions),
and an in-memory upstream per session that runs fast_server's LegacyServer
(its `ask` tool elicits a name). Then:

1. every session opens and serves one whole `ask` interaction (input_required,
   retry, result), so per-session state and warm caches are in the baseline;
2. baseline: gc, then tracemalloc's live bytes and VmRSS;
3. each link calls `ask` and gets input_required: N calls parked, one per session;
4. again gc, tracemalloc, VmRSS; (after - baseline) / N is the cost of one
   parked call;
5. every parked call is retried and must complete (`Hello, bench`).

The traced figure counts every Python allocation alive while the call is
parked except those whose innermost frame is the upstream's code
(bench/fast_server.py: its table of pending elicitations, the lines it
writes), this script (the in-memory transport, the measuring itself) and the
stdlib's tracemalloc, linecache and collections modules; and except the
requestState strings this script keeps to retry with (the gateway keeps no
copy; their size is reported apart). So it includes the bridge's HeldEntry
and HeldCall with their events and cancel scope, the pending Ask with the
server's parsed elicitation/create, the upstream call's PendingCall, its
timeout scope and event, the two tasks that wait for the upstream reply and
for the state's expiry (asyncio tasks, coroutine frames), and the client's
parsed request params the parked call refers to: messages from both sides are
parsed with the gateway's own `wire.decode`, as its stdio front and back do.
It leaves out what a stdio transport would add (pipe buffers) and, of course,
the upstream process each session needs.

The RSS figure comes from a separate pass without tracemalloc (which has
overhead of its own): VmRSS growth while N calls park in a process that has
just served N such interactions, so it mostly reuses memory those freed and is
far below the traced figure; it says what a warm gateway grows by, not what a
call holds. The allocation sites come from a third pass of SITE_CALLS calls
with deep tracebacks, each allocation charged to the innermost gateway line
behind it.
"""

from __future__ import annotations

import argparse
import collections
import gc
import itertools
import json
import linecache
import math
import sys
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

if __package__ in (None, ""):  # run as `python bench/parked_memory.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import fast_server
from bench.client import ASK_TEXT, ELICIT_ANSWER, MODERN, MODERN_ELICIT_CAPS
from gateway import log_setup, wire
from gateway.backs.server_output import ServerExited
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.runtime.service import GatewayService

META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": MODERN_ELICIT_CAPS,
    "io.modelcontextprotocol/clientInfo": {"name": "parked-memory", "version": "1"},
}
# Allocations made by the upstream's own code are the server's, not the gateway's.
NOT_GATEWAY = frozenset(
    {fast_server.__file__, tracemalloc.__file__, linecache.__file__, collections.__file__, __file__}
)
Inbox = MemoryObjectReceiveStream[wire.Message]
# Deep enough to find the gateway line behind an allocation made in a library.
# Deep tracebacks make tracing slow, so the sites come from a smaller pass.
FRAMES = 12
SITE_CALLS = 50
REPO = str(Path(__file__).resolve().parent.parent) + "/"
GATEWAY_DIR = REPO + "gateway/"


class MemoryUpstream:
    """fast_server's LegacyServer behind the interface the pool expects of a
    server process (gateway.runtime.upstream_pool.ServerConnection): messages
    are encoded, answered and parsed back as over the pipes, minus the pipes."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.tap: Any = None
        self._server = fast_server.LegacyServer()
        self._out: list[bytes] = []
        self._ready = anyio.Event()
        self._closed = False

    def send_nowait(self, msg: wire.Message) -> None:
        if self._closed:
            raise ServerExited(None)
        line = fast_server.answer(self._server, wire.encode(msg))
        if line is not None:
            self._out.append(line)
            self._ready.set()

    async def send(self, msg: wire.Message) -> None:
        self.send_nowait(msg)

    def cork(self) -> None:
        return None

    def uncork(self) -> None:
        return None

    async def receive_batch(self) -> list[wire.Message]:
        while not self._out:  # each pass waits for the server to write
            if self._closed:
                raise ServerExited(0)
            await self._ready.wait()
            self._ready = anyio.Event()
        lines, self._out = self._out, []
        return [wire.decode(line) for line in lines]

    async def run_background(self) -> None:
        return None

    def terminate(self) -> None:
        self._closed = True
        self._ready.set()

    async def aclose(self, grace: float = 5.0) -> int | None:
        self.terminate()
        return 0


def _ask_line(msg_id: int, extra: dict[str, Any] | None = None) -> bytes:
    params = {"name": "ask", "arguments": {}, **(extra or {}), "_meta": META}
    return wire.encode(wire.request(msg_id, "tools/call", params))


def _vm_rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Sample:
    """Live memory now: VmRSS, and (when tracing) the traced bytes by gateway line."""

    def __init__(self, trace: bool) -> None:
        gc.collect()
        self.sizes: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        if trace:
            for stat in tracemalloc.take_snapshot().statistics("traceback"):
                if stat.traceback[-1].filename in NOT_GATEWAY:  # innermost frame
                    continue
                site = _site(stat.traceback)
                self.sizes[site] += stat.size
                self.counts[site] += stat.count
        self.traced = self.sizes.total()
        self.rss_kib = _vm_rss_kib()


def _site(traceback: tracemalloc.Traceback) -> str:
    """The gateway line behind an allocation, directly or through a library (the
    innermost gateway frame), with its code; else the innermost frame."""
    frames = list(traceback)  # oldest first
    frame = next((f for f in reversed(frames) if f.filename.startswith(GATEWAY_DIR)), frames[-1])
    code = linecache.getline(frame.filename, frame.lineno).strip()
    return f"{frame.filename.removeprefix(REPO)}:{frame.lineno} {code}"


async def _reply(inbox: Inbox, msg_id: int) -> dict[str, Any]:
    with anyio.fail_after(30):
        msg = await inbox.receive()
    if msg.get("id") != msg_id or not isinstance(msg.get("result"), dict):
        raise RuntimeError(f"expected a result for id {msg_id}, got {msg}")
    result: dict[str, Any] = msg["result"]
    return result


async def _round(
    service: GatewayService,
    clients: list[tuple[ClientLink, Inbox]],
    tg: anyio.abc.TaskGroup,
    msg_id: int,
    states: list[str | None],
) -> None:
    """Every link sends `ask` (a retry where states[i] is set); check the answers.
    A first call must come back input_required: its requestState goes to states[i]."""
    for (link, _), state in zip(clients, states, strict=True):
        extra = None
        if state is not None:
            extra = {"inputResponses": {"input-1": ELICIT_ANSWER}, "requestState": state}
        await service.handle_client_message(link, wire.decode(_ask_line(msg_id, extra)), tg)
    for i, (_, inbox) in enumerate(clients):
        result = await _reply(inbox, msg_id)
        if states[i] is None:
            if result.get("resultType") != "input_required":
                raise RuntimeError(f"ask was not parked: {result}")
            states[i] = result["requestState"]
        else:
            if result.get("content", [{}])[0].get("text") != ASK_TEXT:
                raise RuntimeError(f"a retried ask answered {result}")
            states[i] = None


async def measure(calls: int, trace: bool) -> dict[str, Any]:
    cfg = Config(
        command=("in-memory",),
        max_sessions=calls + 1,
        # One legacy session (an upstream "process" here) per principal, all open at once.
        max_processes=calls + 1,
        max_parked_calls=calls + 1,
        state_ttl=3600.0,
        request_timeout=60.0,
        log_level="warning",
    )
    pids = itertools.count(1)

    async def connect() -> MemoryUpstream:
        return MemoryUpstream(next(pids))

    service = GatewayService(cfg, connect=connect)
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        await service.start(tg)
        clients: list[tuple[ClientLink, Inbox]] = []
        for i in range(calls):
            send, inbox = anyio.create_memory_object_stream[wire.Message](math.inf)
            link = ClientLink.over_stream(send, principal=f"bench-{i}", transport="bench")
            service.links.add(link)
            clients.append((link, inbox))
        states: list[str | None] = [None] * calls
        async with anyio.create_task_group() as requests:
            empty = Sample(trace)
            await _round(service, clients, requests, 1, states)  # sessions open; ask parks
            await _round(service, clients, requests, 2, states)  # and completes
            baseline = Sample(trace)
            await _round(service, clients, requests, 3, states)  # N calls parked
            if len(service.bridge.held) != calls:
                raise RuntimeError(f"{len(service.bridge.held)} calls parked, not {calls}")
            parked = Sample(trace)
            kept = sum(sys.getsizeof(s) for s in states)
            await _round(service, clients, requests, 4, states)  # every one completes
            if service.bridge.held:
                raise RuntimeError(f"{len(service.bridge.held)} calls still parked")
            requests.cancel_scope.cancel()
        out["sessions"] = len(service.pool.sessions)
        await service.aclose()
        tg.cancel_scope.cancel()
    out["rss_bytes_per_call"] = (parked.rss_kib - baseline.rss_kib) * 1024 / calls
    if trace:
        out["traced_bytes_per_call"] = (parked.traced - baseline.traced - kept) / calls
        out["state_bytes_per_call"] = kept / calls
        out["traced_bytes_per_session"] = (baseline.traced - empty.traced) / calls
        grown = parked.sizes.copy()
        grown.subtract(baseline.sizes)
        out["top_sites"] = [
            (site, size / calls, (parked.counts[site] - baseline.counts[site]) / calls)
            for site, size in grown.most_common(10)
        ]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="calls to park (default 500)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error("--calls must be positive")
    log_setup.configure("warning")
    rss = anyio.run(measure, args.calls, False)  # first, before tracemalloc's own memory
    tracemalloc.start(1)
    traced = anyio.run(measure, args.calls, True)
    tracemalloc.stop()
    tracemalloc.start(FRAMES)
    sites = anyio.run(measure, min(args.calls, SITE_CALLS), True)
    tracemalloc.stop()
    result = {
        **traced,
        "calls": args.calls,
        "rss_bytes_per_call": rss["rss_bytes_per_call"],
        "site_calls": min(args.calls, SITE_CALLS),
        "top_sites": sites["top_sites"],
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{args.calls} calls parked, one per legacy session ({traced['sessions']} sessions)")
    print(f"traced per parked call: {result['traced_bytes_per_call'] / 1024:.2f} KiB")
    print(f"  + its requestState (sent, not kept): {result['state_bytes_per_call']:.0f} B")
    print(f"RSS growth per parked call: {result['rss_bytes_per_call'] / 1024:.2f} KiB")
    print(f"traced per legacy session: {result['traced_bytes_per_session'] / 1024:.1f} KiB")
    print(f"what grew per parked call, by gateway line ({result['site_calls']} calls parked):")
    for site, size, count in result["top_sites"]:
        print(f"  {size:8.0f} {count:6.1f}  {site[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
