"""Modern-only stdio client with no SDK (stdlib only; runs under any python3).

    python3 compat_matrix/peers/raw_modern_client.py [--timeout S] -- SERVER_COMMAND ARGS...
    python3 compat_matrix/peers/raw_modern_client.py [--timeout S] --url URL

Speaks only revision 2026-07-28, byte for byte as the spec shows it, so it
checks a server (or the gateway) without any SDK's leniency in between:
`server/discover`, `tools/list`, `tools/call echo`, each with the modern
`_meta` envelope, and every result must carry `resultType: "complete"`.
It never falls back to `initialize`: against a legacy server it fails at the
probe, which is the spec's "Modern → Legacy fails" cell.

With `--url` it speaks the 2026-07-28 Streamable HTTP binding with
`http.client`: one POST per request, no session, `Content-Type:
application/json`, `Accept: application/json, text/event-stream`, and the
request-metadata headers `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name`
(tools/call, prompts/get, resources/read). The answer is a JSON body or an SSE
stream (priming events with empty data are skipped; notifications on it are
kept; a server-to-client request is junk on the modern wire). An HTTP error
with a JSON-RPC error body raises it as the answer; the status is kept.
"""

from __future__ import annotations

import http.client
import itertools
import json
import queue
import subprocess
import threading
import time
from typing import Any, Protocol
from urllib.parse import urlsplit

from _common import ECHO_TEXT, Report, echo_arguments, first_text, parse_args, start_watchdog

VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw-modern-client", "version": "0.1.0"},
}


class RpcError(Exception):
    def __init__(self, error: dict[str, Any], http_status: int | None = None) -> None:
        status = f" (HTTP {http_status})" if http_status is not None else ""
        super().__init__(f"JSON-RPC error {error.get('code')}: {error.get('message')}{status}")
        self.error = error
        self.http_status = http_status


class Connection(Protocol):
    """A server the client talks to: a spawned stdio process or an HTTP endpoint."""

    notifications: list[dict[str, Any]]
    unexpected: list[dict[str, Any]]

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]: ...

    def close(self) -> None: ...


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


# "Request Metadata": the methods whose name or uri goes in Mcp-Name.
NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


class HttpPeer:
    """A Streamable HTTP endpoint (2026-07-28: stateless, one POST per request)."""

    def __init__(self, url: str, deadline: float) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise OSError(f"not an http:// URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.path = parts.path or "/"
        if parts.query:
            self.path += "?" + parts.query
        self.deadline = deadline
        self.ids = itertools.count(1)
        self.notifications: list[dict[str, Any]] = []
        self.unexpected: list[dict[str, Any]] = []

    def _remaining(self, method: str) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no answer to {method} before the deadline")
        return remaining

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self.ids)
        body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": VERSION,
            "Mcp-Method": method,
        }
        named = NAMED.get(method)
        if named is not None and isinstance(params.get(named), str):
            headers["Mcp-Name"] = params[named]
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self._remaining(method))
        try:
            try:
                conn.request("POST", self.path, body=body.encode(), headers=headers)
                response = conn.getresponse()
            except TimeoutError:
                raise TimeoutError(f"no answer to {method} before the deadline") from None
            ctype = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
            if ctype == "text/event-stream":
                return self._from_stream(response, request_id, method)
            raw = response.read()
            return self._from_json(raw, response.status, request_id, method)
        finally:
            conn.close()

    def _answer(
        self, message: dict[str, Any], request_id: int, status: int | None
    ) -> dict[str, Any] | None:
        """The result if `message` answers our request (raises its error); else None."""
        if message.get("id") == request_id and "method" not in message:
            if "error" in message:
                raise RpcError(message["error"], status if status != 200 else None)
            result: dict[str, Any] = message["result"]
            return result
        if "method" in message and "id" not in message:
            self.notifications.append(message)
        else:
            # Server-to-client requests do not exist on the modern wire.
            self.unexpected.append(message)
        return None

    def _from_json(self, raw: bytes, status: int, request_id: int, method: str) -> dict[str, Any]:
        try:
            message = json.loads(raw)
        except ValueError:
            text = raw[:200].decode(errors="replace")
            raise OSError(f"HTTP {status} to {method}, not JSON: {text!r}") from None
        if isinstance(message, dict) and isinstance(message.get("error"), dict):
            # A JSON-RPC error, whatever its id: the server's answer to this POST.
            raise RpcError(message["error"], status)
        if not isinstance(message, dict):
            raise OSError(f"HTTP {status} to {method}: unexpected body {message!r:.200}")
        result = self._answer(message, request_id, status)
        if result is None or status != 200:
            raise OSError(f"HTTP {status} to {method}: no answer in {message!r:.200}")
        return result

    def _from_stream(
        self, response: http.client.HTTPResponse, request_id: int, method: str
    ) -> dict[str, Any]:
        data: list[str] = []
        while True:
            try:
                raw = response.readline()
            except TimeoutError:
                raise TimeoutError(f"no answer to {method} before the deadline") from None
            if not raw:
                raise EOFError(f"the SSE stream ended without an answer to {method}")
            line = raw.decode(errors="replace").rstrip("\r\n")
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
                continue
            if line or not data:
                continue  # event:, id:, retry:, comments, or a blank line after nothing
            payload = "\n".join(data)
            data = []
            if not payload.strip():
                continue  # a priming event (TS servers)
            try:
                message = json.loads(payload)
            except ValueError:
                self.unexpected.append({"non_json_event": payload[:200]})
                continue
            result = self._answer(message, request_id, response.status)
            if result is not None:
                return result

    def close(self) -> None:
        """Nothing to reap: every request had its own connection."""


def open_peer(command: list[str], url: str | None, deadline: float) -> Connection:
    """Connect over Streamable HTTP when given a URL, else spawn `command` (stdio)."""
    if url is not None:
        return HttpPeer(url, deadline)
    return Peer(command, deadline)


def check_complete(report: Report, name: str, result: dict[str, Any], **detail: Any) -> bool:
    result_type = result.get("resultType")
    return report.step(name, result_type == "complete", resultType=result_type, **detail)


def converse(peer: Connection, report: Report) -> None:
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
    peer: Connection | None = None
    try:
        peer = open_peer(args.server, args.url, time.monotonic() + args.timeout)
        converse(peer, report)
    except (RpcError, TimeoutError, EOFError, OSError) as exc:
        report.fail(f"{type(exc).__name__}: {exc}")
    finally:
        if peer is not None:
            peer.close()
    report.finish()


if __name__ == "__main__":
    main()
