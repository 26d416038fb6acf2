"""The load client: one stdio MCP connection to a spawned command, pipelined.

Built on asyncio's subprocess protocol (callbacks, no per-request task) so the
client costs as little CPU as possible: on a 2-core machine it competes with
the process under test. Replies are matched by id; in a load run each reply
immediately releases the next request, keeping `concurrency` in flight.

A load of `ask` calls (the MRTR benchmark) keeps `concurrency` interactions in
flight instead: a legacy client that declared elicitation answers the
server's `elicitation/create` at once; a modern client meets `input_required`
and retries at once with `inputResponses` and the `requestState`. Each
interaction is timed from its first request to its final result.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import orjson

from bench import procs

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
CLIENT_INFO = {"name": "mcp-era-gateway-bench", "version": "1.0"}
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
}
ECHO_TEXT = "the quick brown fox jumps over the lazy dog"
ELICIT_NAME = "bench"
ELICIT_ANSWER = {"action": "accept", "content": {"name": ELICIT_NAME}}
ASK_TEXT = f"Hello, {ELICIT_NAME}"  # fast_server's answer to `ask`
LEGACY_ELICIT_CAPS: dict[str, Any] = {"elicitation": {}}
MODERN_ELICIT_CAPS: dict[str, Any] = {"elicitation": {"form": {}}}
CAPS = "io.modelcontextprotocol/clientCapabilities"


class BenchError(Exception):
    pass


@dataclass(slots=True)
class LoadResult:
    concurrency: int
    replies: int
    seconds: float
    latencies_ns: list[int]
    errors: int
    first_error: Any = None
    follow_ups: int = 0  # retries sent after input_required (MRTR through the gateway)

    @property
    def rps(self) -> float:
        return self.replies / self.seconds if self.seconds > 0 else 0.0


@dataclass(slots=True)
class _Load:
    make: Callable[[int], bytes]
    ids: itertools.count[int]
    concurrency: int
    max_replies: int
    stop_at_ns: int
    done: asyncio.Future[None]
    sent_at: dict[int, int] = field(default_factory=dict)
    latencies: list[int] = field(default_factory=list)
    errors: int = 0
    first_error: Any = None
    started_ns: int = 0
    last_ns: int = 0
    # MRTR: the retry to send for an interim reply (None: the reply is final),
    # and the text a final reply must carry.
    follow: Callable[[dict[str, Any]], Callable[[int], bytes] | None] | None = None
    expect_text: str | None = None
    follow_ups: int = 0

    def first_batch(self) -> bytes:
        self.started_ns = time.perf_counter_ns()
        return b"".join(self._next(self.started_ns) for _ in range(self.concurrency))

    def _next(self, now: int) -> bytes:
        msg_id = next(self.ids)
        self.sent_at[msg_id] = now
        return self.make(msg_id)

    def on_reply(self, msg_id: int, msg: dict[str, Any]) -> bytes | None:
        now = time.perf_counter_ns()
        started = self.sent_at.pop(msg_id)
        if self.follow is not None:
            retry = self.follow(msg)
            if retry is not None:  # the same interaction goes on under a new id
                new_id = next(self.ids)
                self.sent_at[new_id] = started
                self.follow_ups += 1
                return retry(new_id)
        self.latencies.append(now - started)
        self.last_ns = now
        if (
            "error" in msg
            or msg.get("result", {}).get("isError")
            or (self.expect_text is not None and _text_of(msg) != self.expect_text)
        ):
            self.errors += 1
            if self.first_error is None:
                self.first_error = msg
        if len(self.latencies) + len(self.sent_at) < self.max_replies and now < self.stop_at_ns:
            return self._next(now)
        if not self.sent_at and not self.done.done():
            self.done.set_result(None)
        return None


class Connection(asyncio.SubprocessProtocol):
    """A spawned stdio MCP peer and our side of its pipes."""

    def __init__(
        self, name: str, client_era: str, client_caps: dict[str, Any] | None = None
    ) -> None:
        self.name = name
        self.client_era = client_era
        self.client_caps = client_caps or {}
        self.meta = {**MODERN_META, CAPS: self.client_caps}
        self.elicits = "elicitation" in self.client_caps
        self.elicitations_answered = 0
        self.pid = 0
        self._transport: asyncio.SubprocessTransport | None = None
        self._buf = b""
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._load: _Load | None = None
        self._exited: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tree: list[int] = []
        self.bad_lines = 0

    # -- asyncio protocol callbacks ---------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self._transport = transport
        self.pid = transport.get_pid()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        out: list[bytes] = []
        for line in lines:
            if line.strip():
                self._on_line(line, out)
        if out:
            self._write(b"".join(out))

    def process_exited(self) -> None:
        if not self._exited.done():
            self._exited.set_result(None)
        code = self._transport.get_returncode() if self._transport else None
        exc = BenchError(f"{self.name}: process exited (code {code})")
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(exc)
        if self._load is not None and not self._load.done.done():
            self._load.done.set_exception(exc)

    def _on_line(self, line: bytes, out: list[bytes]) -> None:
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError:
            self.bad_lines += 1  # a proxy that corrupts output fails the run (see run.py)
            return
        if "method" in msg:
            if "id" in msg:
                out.append(self._serve(msg))
            return
        msg_id = msg.get("id")
        load = self._load
        if load is not None and msg_id in load.sent_at:
            nxt = load.on_reply(msg_id, msg)
            if nxt is not None:
                out.append(nxt)
            return
        fut = self._pending.pop(msg_id, None)
        if fut is not None and not fut.done():
            fut.set_result(msg)

    def _serve(self, msg: dict[str, Any]) -> bytes:
        """Answer a server request: elicitations at once (if declared), else -32601."""
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": msg["id"]}
        if self.elicits and msg["method"] == "elicitation/create":
            self.elicitations_answered += 1
            answer["result"] = ELICIT_ANSWER
        else:
            answer["error"] = {"code": -32601, "message": "Method not found"}
        return orjson.dumps(answer) + b"\n"

    def _write(self, data: bytes) -> None:
        assert self._transport is not None
        stdin = self._transport.get_pipe_transport(0)
        assert isinstance(stdin, asyncio.WriteTransport)
        stdin.write(data)

    # -- requests -----------------------------------------------------------
    def _params(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.client_era == "modern":
            return {**params, "_meta": self.meta}
        return params

    async def request(
        self, method: str, params: dict[str, Any], timeout: float = 10.0
    ) -> dict[str, Any]:
        msg_id = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        body = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": self._params(params)}
        self._write(orjson.dumps(body) + b"\n")
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise BenchError(f"{self.name}: no answer to {method} within {timeout:g}s") from None
        finally:
            self._pending.pop(msg_id, None)

    def notify(self, method: str) -> None:
        self._write(orjson.dumps({"jsonrpc": "2.0", "method": method}) + b"\n")

    async def handshake(self, timeout: float) -> None:
        """Legacy: initialize + initialized. Modern: server/discover. Then check echo."""
        if self.client_era == "legacy":
            params = {
                "protocolVersion": LEGACY,
                "capabilities": self.client_caps,
                "clientInfo": CLIENT_INFO,
            }
            reply = await self.request("initialize", params, timeout)
            if "result" not in reply:
                raise BenchError(f"{self.name}: initialize failed: {reply}")
            self.notify("notifications/initialized")
        else:
            reply = await self.request("server/discover", {}, timeout)
            if MODERN not in reply.get("result", {}).get("supportedVersions", []):
                raise BenchError(f"{self.name}: server/discover failed: {reply}")
        tools = await self.request("tools/list", {}, timeout)
        names = [t.get("name") for t in tools.get("result", {}).get("tools", [])]
        if "echo" not in names:
            raise BenchError(f"{self.name}: no echo tool in {tools}")
        self.check_echo(await self.request("tools/call", _ECHO_PARAMS, timeout))
        if self.elicits:
            if "ask" not in names:
                raise BenchError(f"{self.name}: no ask tool in {tools}")
            await self.check_ask(timeout)

    async def check_ask(self, timeout: float) -> None:
        """One `ask` interaction, every step checked: the direct legacy client
        answers a pushed elicitation; the modern one gets input_required and retries."""
        answered = self.elicitations_answered
        reply = await self.request("tools/call", _ASK_PARAMS, timeout)
        if self.client_era == "modern":
            result = reply.get("result") or {}
            asks = result.get("inputRequests")
            if (
                result.get("resultType") != "input_required"
                or not isinstance(result.get("requestState"), str)
                or not isinstance(asks, dict)
                or [a.get("method") for a in asks.values()] != ["elicitation/create"]
            ):
                raise BenchError(f"{self.name}: ask did not ask for input: {reply}")
            reply = await self.request("tools/call", self._retry_params(result), timeout)
        elif self.elicitations_answered != answered + 1:
            raise BenchError(f"{self.name}: ask sent no elicitation/create before {reply}")
        result = reply.get("result") or {}
        if _text_of(reply) != ASK_TEXT or result.get("isError"):
            raise BenchError(f"{self.name}: ask answered {reply}")
        if (result.get("resultType") == "complete") != (self.client_era == "modern"):
            raise BenchError(f"{self.name}: a {self.client_era} client got {result}")

    def _retry_params(self, result: dict[str, Any]) -> dict[str, Any]:
        """The retry of an `ask` after input_required: every elicitation answered."""
        asks = result.get("inputRequests") or {}
        params: dict[str, Any] = {
            **_ASK_PARAMS,
            "inputResponses": {
                key: ELICIT_ANSWER
                for key, ask in asks.items()
                if ask.get("method") == "elicitation/create"
            },
        }
        if "requestState" in result:
            params["requestState"] = result["requestState"]
        return params

    def _follow(self, msg: dict[str, Any]) -> Callable[[int], bytes] | None:
        """In a load: the retry an input_required asks for, or None for a final reply."""
        result = msg.get("result")
        if not isinstance(result, dict) or result.get("resultType") != "input_required":
            return None
        return _maker("tools/call", self._params(self._retry_params(result)))

    def check_echo(self, reply: dict[str, Any]) -> None:
        """The reply to an echo call is right, and in the client's era's shape."""
        result = reply.get("result")
        if not isinstance(result, dict) or result.get("isError"):
            raise BenchError(f"{self.name}: echo failed: {reply}")
        if result["content"][0]["text"] != ECHO_TEXT:
            raise BenchError(f"{self.name}: echo answered {result['content']}")
        modern_shaped = result.get("resultType") == "complete"
        if modern_shaped != (self.client_era == "modern"):
            raise BenchError(f"{self.name}: a {self.client_era} client got {result}")

    def echo_maker(self) -> Callable[[int], bytes]:
        """Serialise an echo call once; each request only splices its id in."""
        return _maker("tools/call", self._params(_ECHO_PARAMS))

    async def load(
        self, concurrency: int, seconds: float, max_replies: int, work: str = "echo"
    ) -> LoadResult:
        """Keep `concurrency` echo calls (work="ask": MRTR interactions) in flight
        for `seconds` (or `max_replies`)."""
        loop = asyncio.get_running_loop()
        ask = work == "ask"
        run = _Load(
            make=_maker("tools/call", self._params(_ASK_PARAMS)) if ask else self.echo_maker(),
            ids=self._ids,
            concurrency=concurrency,
            max_replies=max(max_replies, concurrency),
            stop_at_ns=time.perf_counter_ns() + int(seconds * 1e9),
            done=loop.create_future(),
            follow=self._follow if ask and self.client_era == "modern" else None,
            expect_text=ASK_TEXT if ask else None,
        )
        self._load = run
        try:
            self._write(run.first_batch())
            await asyncio.wait_for(run.done, seconds + 30.0)
        except TimeoutError:
            raise BenchError(
                f"{self.name}: {len(run.sent_at)} requests unanswered after {seconds + 30:g}s"
            ) from None
        finally:
            self._load = None
        return LoadResult(
            concurrency,
            len(run.latencies),
            (run.last_ns - run.started_ns) / 1e9,
            run.latencies,
            run.errors,
            run.first_error,
            run.follow_ups,
        )

    @contextlib.contextmanager
    def pinned(self, cpus: set[int]) -> Iterator[None]:
        """Run this client, the process and its tree on `cpus` only, then restore."""
        before = os.sched_getaffinity(0)
        pids = [0, self.pid, *self.tree()]
        try:
            for pid in pids:
                procs.set_affinity(pid, cpus)
            yield
        finally:
            for pid in pids:
                procs.set_affinity(pid, before)

    # -- lifecycle ----------------------------------------------------------
    def tree(self) -> list[int]:
        """Our process's descendants (remembered, so they can be reaped later)."""
        found = procs.descendants(self.pid)
        self._tree = sorted(set(self._tree) | set(found))
        return found

    async def close(self, grace: float = 10.0) -> None:
        """Close stdin and wait; then SIGTERM, then SIGKILL, the process and its tree."""
        if self._transport is None:
            return
        self.tree()
        stdin = self._transport.get_pipe_transport(0)
        if stdin is not None:
            stdin.close()
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                procs.kill([self.pid], sig)
            try:
                await asyncio.wait_for(asyncio.shield(self._exited), grace)
                break
            except TimeoutError:
                continue
        procs.kill(self._tree)  # anything the process left behind
        self._transport.close()

    def kill_now(self) -> None:
        """Last resort (no event loop needed): SIGKILL everything we know of."""
        if self.pid:
            self._tree = sorted(set(self._tree) | set(procs.descendants(self.pid)))
            procs.kill([self.pid, *self._tree])


_ECHO_PARAMS = {"name": "echo", "arguments": {"text": ECHO_TEXT}}
_ASK_PARAMS: dict[str, Any] = {"name": "ask", "arguments": {}}


def _maker(method: str, params: dict[str, Any]) -> Callable[[int], bytes]:
    """Serialise a request once; each use only splices its id in."""
    body = orjson.dumps({"method": method, "params": params})
    head, tail = b'{"jsonrpc":"2.0","id":', b"," + body[1:] + b"\n"
    return lambda msg_id: head + str(msg_id).encode() + tail


def _text_of(msg: dict[str, Any]) -> str | None:
    """The first text content of a tool result, if any."""
    content = (msg.get("result") or {}).get("content")
    if isinstance(content, list) and content and isinstance(content[0], dict):
        text = content[0].get("text")
        return text if isinstance(text, str) else None
    return None


async def spawn(
    name: str,
    command: list[str],
    client_era: str,
    stderr: IO[bytes],
    cwd: str,
    client_caps: dict[str, Any] | None = None,
) -> Connection:
    loop = asyncio.get_running_loop()
    _, conn = await loop.subprocess_exec(
        lambda: Connection(name, client_era, client_caps),
        *command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        cwd=cwd,
        # Our terminal's Ctrl-C is ours; we stop the process ourselves.
        start_new_session=True,
    )
    return conn
