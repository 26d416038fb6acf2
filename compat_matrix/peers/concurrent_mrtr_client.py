"""Many concurrent modern MRTR calls over ONE server process (stdlib asyncio; any python3).

    python3 compat_matrix/peers/concurrent_mrtr_client.py [--calls N] [--timeout S] \
        -- SERVER_COMMAND ARGS...

Starts the server command once (the gateway in front of a legacy server, in
the tests), sends `server/discover`, then writes N `tools/call ask_name`
requests with distinct ids back to back before it reads any answer. Every call
is then driven on its own, as soon as its answer arrives: an
`input_required` is answered at once with that call's own name
(`caller-NN`), and retried with a new id, `inputResponses` and the exact
`requestState`, until the result is `complete` (at most MAX_ROUNDS rounds).
Every final result must be `Hello, <that call's name>`: an answer that reached
another call, or a call that got none, fails the run. Prints the usual one
JSON line (`_common.Report`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import sys
import time
from typing import Any

from _common import DEFAULT_TIMEOUT, Report, start_watchdog

VERSION = "2026-07-28"
MAX_ROUNDS = 8
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    "io.modelcontextprotocol/clientInfo": {"name": "concurrent-mrtr-client", "version": "0.1.0"},
}


class Connection:
    """One server process; a reader task resolves each response's future by id."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.unexpected: list[Any] = []
        self.notifications = 0
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                self.unexpected.append({"non_json_line": line[:200].decode(errors="replace")})
                continue
            future = self.pending.pop(message.get("id"), None) if "method" not in message else None
            if future is not None:
                if not future.done():
                    future.set_result(message)
            elif "method" in message and "id" not in message:
                self.notifications += 1
            else:  # server->client requests are not part of the modern stdio wire
                self.unexpected.append(message)
        for future in self.pending.values():
            if not future.done():
                future.set_exception(EOFError("the server closed stdout"))

    def send(self, method: str, params: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        """Write one request (no await: callers may write many back to back)."""
        request_id = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        return future

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        future = self.send(method, params)
        assert self.proc.stdin is not None
        await self.proc.stdin.drain()
        return await future

    async def close(self) -> None:
        """Close stdin (the spec's stdio shutdown), then escalate."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        for step in (None, self.proc.terminate, self.proc.kill):
            if step is not None:
                with contextlib.suppress(ProcessLookupError):
                    step()
            try:
                await asyncio.wait_for(self.proc.wait(), 3)
                return
            except TimeoutError:
                continue
        self.reader.cancel()


class Calls:
    """Book-keeping across the concurrent calls."""

    def __init__(self) -> None:
        self.answering = 0  # calls between an input_required and their final result
        self.max_answering = 0
        self.rounds: list[int] = []
        self.failures: list[dict[str, Any]] = []
        self.completion_order: list[int] = []


def answer(request: dict[str, Any], name: str) -> dict[str, Any]:
    if request.get("method") != "elicitation/create":
        raise ValueError(f"ask_name should only elicit, got {request.get('method')!r}")
    return {"action": "accept", "content": {"name": name}}


async def drive(
    conn: Connection, calls: Calls, index: int, first: asyncio.Future[dict[str, Any]]
) -> None:
    """One call from its first answer to its final result."""
    name = f"caller-{index:02d}"
    rounds = 0
    try:
        message = await first
        while True:
            if "error" in message:
                calls.failures.append({"call": name, "rounds": rounds, "error": message["error"]})
                return
            result: dict[str, Any] = message["result"]
            if result.get("resultType") != "input_required":
                break
            if rounds == MAX_ROUNDS:
                calls.failures.append({"call": name, "error": f"over {MAX_ROUNDS} rounds"})
                return
            if rounds == 0:
                calls.answering += 1
                calls.max_answering = max(calls.max_answering, calls.answering)
            rounds += 1
            requests: dict[str, Any] = result.get("inputRequests") or {}
            params: dict[str, Any] = {
                "_meta": META,
                "name": "ask_name",
                "arguments": {},
                "inputResponses": {key: answer(req, name) for key, req in requests.items()},
            }
            if "requestState" in result:
                params["requestState"] = result["requestState"]
            message = await conn.request("tools/call", params)
    except (EOFError, ValueError, KeyError) as exc:
        calls.failures.append({"call": name, "rounds": rounds, "error": repr(exc)})
        return
    finally:
        if rounds:
            calls.answering -= 1
    calls.rounds.append(rounds)
    calls.completion_order.append(index)
    texts = [b.get("text") for b in result.get("content") or [] if b.get("type") == "text"]
    expected = f"Hello, {name}"
    if result.get("resultType") != "complete" or result.get("isError") or texts != [expected]:
        calls.failures.append(
            {
                "call": name,
                "rounds": rounds,
                "expected": expected,
                "resultType": result.get("resultType"),
                "isError": result.get("isError"),
                "texts": texts,
            }
        )


async def converse(conn: Connection, report: Report, n: int) -> None:
    discover = (await conn.request("server/discover", {"_meta": META})).get("result") or {}
    versions = discover.get("supportedVersions") or []
    if not report.step("server/discover", VERSION in versions, supportedVersions=versions):
        report.fail(f"server does not support {VERSION}")
        return

    calls = Calls()
    started = time.monotonic()
    params = {"_meta": META, "name": "ask_name", "arguments": {}}
    firsts = [conn.send("tools/call", params) for _ in range(n)]
    assert conn.proc.stdin is not None
    await conn.proc.stdin.drain()
    report.step(f"{n} tools/call ask_name written before any answer was read", True)
    await asyncio.gather(*(drive(conn, calls, i, f) for i, f in enumerate(firsts, 1)))
    report.step(
        "every call got its own name back",
        not calls.failures and len(calls.completion_order) == n,
        calls=n,
        completed=len(calls.completion_order),
        failures=calls.failures[:5],
        failed=len(calls.failures),
        rounds={str(r): calls.rounds.count(r) for r in sorted(set(calls.rounds))},
        max_calls_answering_at_once=calls.max_answering,
        completion_order=calls.completion_order,
        seconds=round(time.monotonic() - started, 2),
    )
    if conn.unexpected:
        report.step("no server-to-client requests or junk", False, unexpected=conn.unexpected[:5])


async def run(server: list[str], n: int, timeout: float, report: Report) -> None:
    # stderr is inherited: the server's logs stay visible, our stdout stays one JSON line.
    proc = await asyncio.create_subprocess_exec(
        *server, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=2**22
    )
    conn = Connection(proc)
    try:
        await asyncio.wait_for(converse(conn, report, n), timeout)
    except TimeoutError:
        report.fail(f"timeout after {timeout:.0f}s")
    except (EOFError, OSError) as exc:
        report.fail(f"{type(exc).__name__}: {exc}")
    finally:
        await conn.close()


def main() -> None:
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit(f"usage: {sys.argv[0]} [--calls N] [--timeout S] -- SERVER_COMMAND [ARGS...]")
    cut = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    args = parser.parse_args(argv[:cut])
    server = argv[cut + 1 :]
    if not server:
        parser.error("missing server command after --")
    report = Report(era="modern")
    start_watchdog(report, args.timeout)
    asyncio.run(run(server, args.calls, args.timeout, report))
    report.finish()


if __name__ == "__main__":
    main()
