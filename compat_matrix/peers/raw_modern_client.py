"""Modern-only stdio client with no SDK (stdlib only; runs under any python3).

    python3 compat_matrix/peers/raw_modern_client.py [--timeout S] -- SERVER_COMMAND ARGS...

Speaks only revision 2026-07-28, byte for byte as the spec shows it, so it
checks a server (or the gateway) without any SDK's leniency in between:
`server/discover`, `tools/list`, `tools/call echo`, each with the modern
`_meta` envelope, and every result must carry `resultType: "complete"`.
It never falls back to `initialize`: against a legacy server it fails at the
probe, which is the spec's "Modern → Legacy fails" cell.
"""

from __future__ import annotations

import itertools
import json
import queue
import subprocess
import threading
import time
from typing import Any

from _common import ECHO_TEXT, Report, echo_arguments, first_text, parse_args, start_watchdog

VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw-modern-client", "version": "0.1.0"},
}


class RpcError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"JSON-RPC error {error.get('code')}: {error.get('message')}")
        self.error = error


class Peer:
    """One server process; a reader thread turns its stdout into a queue of messages."""

    def __init__(self, command: list[str], deadline: float) -> None:
        self.deadline = deadline
        self.ids = itertools.count(1)
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.notifications: list[dict[str, Any]] = []
        self.unexpected: list[dict[str, Any]] = []
        # stderr is inherited: the server's logs stay visible, our stdout stays one JSON line.
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.strip()
            if not line:
                continue
            try:
                self.inbox.put(json.loads(line))
            except ValueError:
                self.unexpected.append({"non_json_line": line[:200].decode(errors="replace")})
        self.inbox.put(None)  # EOF

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self.ids)
        line = (
            json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            + "\n"
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode())
        self.proc.stdin.flush()
        while True:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no answer to {method} before the deadline")
            try:
                message = self.inbox.get(timeout=remaining)
            except queue.Empty:
                raise TimeoutError(f"no answer to {method} before the deadline") from None
            if message is None:
                raise EOFError(
                    f"server closed stdout while waiting for {method} (exit {self.proc.poll()})"
                )
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise RpcError(message["error"])
                result: dict[str, Any] = message["result"]
                return result
            if "method" in message and "id" not in message:
                self.notifications.append(message)
            else:
                # Server→client requests are forbidden on the modern stdio wire.
                self.unexpected.append(message)

    def close(self) -> None:
        """Reap the server: close stdin (the spec's shutdown), then escalate."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        for signal_step in (None, self.proc.terminate, self.proc.kill):
            if signal_step is not None:
                signal_step()
            try:
                self.proc.wait(timeout=2)
                return
            except subprocess.TimeoutExpired:
                continue


def check_complete(report: Report, name: str, result: dict[str, Any], **detail: Any) -> bool:
    result_type = result.get("resultType")
    return report.step(name, result_type == "complete", resultType=result_type, **detail)


def converse(peer: Peer, report: Report) -> None:
    try:
        discover = peer.request("server/discover", {"_meta": META})
    except RpcError as exc:
        # Deterministic failure against a legacy server (spec: probe first).
        report.step("server/discover", False, error=exc.error)
        report.fail(f"server/discover failed, server is not modern: {exc}")
        return
    versions = discover.get("supportedVersions") or []
    check_complete(report, "server/discover", discover, supportedVersions=versions)
    if not report.step("modern version supported", VERSION in versions, supportedVersions=versions):
        report.fail(f"server does not support {VERSION}")
        return

    tools = peer.request("tools/list", {"_meta": META})
    names = [tool.get("name") for tool in tools.get("tools") or []]
    check_complete(report, "tools/list", tools, tools=names)
    echo = next((tool for tool in tools.get("tools") or [] if tool.get("name") == "echo"), None)
    if not report.step("echo tool listed", echo is not None):
        return

    assert echo is not None
    result = peer.request(
        "tools/call", {"_meta": META, "name": "echo", "arguments": echo_arguments(echo)}
    )
    text = first_text(result.get("content"))
    check_complete(report, "tools/call echo", result)
    report.step(
        "echo text", text is not None and ECHO_TEXT in text and not result.get("isError"), text=text
    )

    if peer.unexpected:
        report.step("no server-to-client requests or junk", False, unexpected=peer.unexpected[:5])


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    report = Report(era="modern")
    start_watchdog(report, args.timeout)
    peer: Peer | None = None
    try:
        peer = Peer(args.server, time.monotonic() + args.timeout)
        converse(peer, report)
    except (RpcError, TimeoutError, EOFError, OSError) as exc:
        report.fail(f"{type(exc).__name__}: {exc}")
    finally:
        if peer is not None:
            peer.close()
    report.finish()


if __name__ == "__main__":
    main()
