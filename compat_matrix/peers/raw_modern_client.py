"""Modern-only stdio client with no SDK (stdlib only; runs under any python3).

    python3 compat_matrix/peers/raw_modern_client.py [--feature F] [--timeout S] -- SERVER ARGS...
    python3 compat_matrix/peers/raw_modern_client.py [--feature F] [--timeout S] --url URL

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

`--feature notifications` adds the change-notification check of the modern
wire: `subscriptions/listen` (toolsListChanged and one resource URI), whose
first message must be `notifications/subscriptions/acknowledged` tagged with
the listen's id; then tool calls that change the resource and the tool list
(fixtures: `add_note`, `register_tool`; server-everything:
`toggle-subscriber-updates`) must bring `notifications/resources/updated` and
`notifications/tools/list_changed` tagged with that id. Cancelling the listen
(stdio: `notifications/cancelled`; HTTP: closing its stream) must leave the
connection usable and, on stdio, the listen silent. No change notification may
arrive untagged.

`--feature tasks` checks the tasks extension (`io.modelcontextprotocol/tasks`,
SEP-2663) instead of echo: discover must declare it; `tools/call
slow_compute {seconds: 2}` declaring it in the request's client capabilities
must be answered with a task (`resultType: "task"`, status `working`), polled
with `tasks/get` at its `pollIntervalMs` until `completed` with the tool's
result inlined; then `confirm_delete`, whose elicitation during the task must
show as `input_required` with `inputRequests`, answered with `tasks/update`
(acked with `resultType: "complete"`), the task then completing with
"deleted". Over HTTP the task methods carry `Mcp-Name: <taskId>`. Both tools
take longer than the gateway's `[tasks] after` in the matrix cells, so a plain
result counts as a failure here.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import queue
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

from _common import (
    ACKNOWLEDGED,
    CHANGE_METHODS,
    ECHO_TEXT,
    NOTIFY_STEP,
    NOTIFY_WAIT,
    TASKS_STEP,
    Report,
    Trigger,
    delivery_step,
    echo_arguments,
    first_text,
    is_tools_changed,
    is_update,
    notify_plan,
    parse_args,
    start_watchdog,
    tag_of,
)

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


Predicate = Callable[[dict[str, Any]], bool]


class Listen(Protocol):
    """An open `subscriptions/listen`: the messages tagged with its id, in order."""

    id: int
    how_cancelled: str

    def tagged(self) -> list[dict[str, Any]]: ...

    def stray(self) -> list[dict[str, Any]]: ...

    def wait(self, pred: Predicate, seconds: float) -> dict[str, Any] | None: ...

    def cancel(self) -> None: ...


class Connection(Protocol):
    """A server the client talks to: a spawned stdio process or an HTTP endpoint."""

    notifications: list[dict[str, Any]]
    unexpected: list[dict[str, Any]]

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]: ...

    def listen(self, notifications: dict[str, Any]) -> Listen: ...

    def close(self) -> None: ...


class Peer:
    """One server process; a reader thread turns its stdout into a queue of messages."""

    def __init__(self, command: list[str], deadline: float) -> None:
        self.deadline = deadline
        self.ids = itertools.count(1)
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.notifications: list[dict[str, Any]] = []
        self.unexpected: list[dict[str, Any]] = []
        self.listens: set[int] = set()
        self.listen_results: list[dict[str, Any]] = []
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

    def _write(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())
        self.proc.stdin.flush()

    def send(self, method: str, params: dict[str, Any]) -> int:
        """Send a request without waiting for its answer; its id."""
        request_id = next(self.ids)
        self._write({"id": request_id, "method": method, "params": params})
        return request_id

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self._write({"method": method, "params": params})

    def _next(self, deadline: float, what: str) -> dict[str, Any] | None:
        """The next message before `deadline` (None: the deadline passed)."""
        remaining = min(deadline, self.deadline) - time.monotonic()
        if remaining <= 0:
            if deadline >= self.deadline:
                raise TimeoutError(f"no {what} before the deadline")
            return None
        try:
            message = self.inbox.get(timeout=remaining)
        except queue.Empty:
            if deadline >= self.deadline:
                raise TimeoutError(f"no {what} before the deadline") from None
            return None
        if message is None:
            self.inbox.put(None)  # stays at EOF for the next reader
            status = self.proc.poll()
            raise EOFError(f"server closed stdout while waiting for {what} (exit {status})")
        return message

    def _route(self, message: dict[str, Any]) -> None:
        """Keep a message that is not the answer being waited for."""
        if "method" in message and "id" not in message:
            self.notifications.append(message)
        elif "method" not in message and message.get("id") in self.listens:
            self.listen_results.append(message)  # a listen's graceful close
        else:
            # Server→client requests are forbidden on the modern stdio wire.
            self.unexpected.append(message)

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = self.send(method, params)
        while True:
            message = self._next(self.deadline, f"answer to {method}")
            assert message is not None
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise RpcError(message["error"])
                result: dict[str, Any] = message["result"]
                return result
            self._route(message)

    def wait_notification(
        self, pred: Predicate, since: int, seconds: float
    ) -> dict[str, Any] | None:
        """The first notification from `notifications[since]` on (seen already or
        read now) that matches; None after `seconds`."""
        for message in self.notifications[since:]:
            if pred(message):
                return message
        deadline = time.monotonic() + seconds
        while True:
            message = self._next(deadline, "notification")
            if message is None:
                return None
            self._route(message)
            if message in self.notifications and pred(message):
                return message

    def listen(self, notifications: dict[str, Any]) -> Listen:
        return StdioListen(self, notifications)

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


class StdioListen:
    """A listen on the shared stdio channel: its messages are those tagged with its id."""

    how_cancelled = "notifications/cancelled"

    def __init__(self, peer: Peer, notifications: dict[str, Any]) -> None:
        self.peer = peer
        self.since = len(peer.notifications)
        self.id = peer.send("subscriptions/listen", {"_meta": META, "notifications": notifications})
        peer.listens.add(self.id)

    def tagged(self) -> list[dict[str, Any]]:
        return [m for m in self.peer.notifications[self.since :] if tag_of(m) == self.id]

    def stray(self) -> list[dict[str, Any]]:
        """Nothing: on stdio the listen's messages are just those with its tag."""
        return []

    def wait(self, pred: Predicate, seconds: float) -> dict[str, Any] | None:
        return self.peer.wait_notification(
            lambda m: tag_of(m) == self.id and pred(m), self.since, seconds
        )

    def cancel(self) -> None:
        self.peer.notify(
            "notifications/cancelled", {"requestId": self.id, "reason": "compat check done"}
        )


# "Request Metadata": the methods whose name, uri or task id goes in Mcp-Name.
NAMED = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}


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

    def post(
        self, request_id: int, method: str, params: dict[str, Any]
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """POST one request; the connection and its (unread) response."""
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
            conn.request("POST", self.path, body=body.encode(), headers=headers)
            return conn, conn.getresponse()
        except TimeoutError:
            conn.close()
            raise TimeoutError(f"no answer to {method} before the deadline") from None
        except BaseException:
            conn.close()
            raise

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self.ids)
        conn, response = self.post(request_id, method, params)
        try:
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

    def listen(self, notifications: dict[str, Any]) -> Listen:
        return HttpListen(self, notifications)

    def close(self) -> None:
        """Nothing to reap: every request had its own connection."""


class HttpListen:
    """A listen POST whose SSE response stays open; a thread reads its events."""

    how_cancelled = "HTTP stream closed"

    def __init__(self, peer: HttpPeer, notifications: dict[str, Any]) -> None:
        self.id = next(peer.ids)
        self.messages: list[dict[str, Any]] = []
        self.junk: list[str] = []
        self.ended = False
        self.changed = threading.Condition()
        params = {"_meta": META, "notifications": notifications}
        self.conn, self.response = peer.post(self.id, "subscriptions/listen", params)
        ctype = (self.response.getheader("Content-Type") or "").split(";")[0].strip().lower()
        if ctype != "text/event-stream":
            raw = self.response.read()
            self.conn.close()
            peer._from_json(raw, self.response.status, self.id, "subscriptions/listen")
            raise OSError(f"subscriptions/listen answered {self.response.status} {ctype!r}")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        data: list[str] = []
        try:
            while True:
                raw = self.response.readline()
                if not raw:
                    break
                line = raw.decode(errors="replace").rstrip("\r\n")
                if line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                    continue
                if line or not data:
                    continue
                payload, data = "\n".join(data), []
                if not payload.strip():
                    continue  # a priming event
                try:
                    message = json.loads(payload)
                except ValueError:
                    self.junk.append(payload[:200])
                    continue
                with self.changed:
                    self.messages.append(message)
                    self.changed.notify_all()
        except Exception:  # http.client fails oddly on a socket shut down under it
            pass  # closed by cancel(), or the server dropped it
        finally:
            with self.changed:
                self.ended = True
                self.changed.notify_all()

    def tagged(self) -> list[dict[str, Any]]:
        with self.changed:
            return [m for m in self.messages if tag_of(m) == self.id]

    def stray(self) -> list[dict[str, Any]]:
        """Messages on the listen's stream without its tag (the graceful close aside)."""
        with self.changed:
            return [m for m in self.messages if tag_of(m) != self.id and m.get("id") != self.id] + [
                {"non_json_event": j} for j in self.junk
            ]

    def wait(self, pred: Predicate, seconds: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + seconds
        with self.changed:
            while True:
                for message in self.messages:
                    if tag_of(message) == self.id and pred(message):
                        return message
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.ended:
                    return None
                self.changed.wait(remaining)

    def cancel(self) -> None:
        sock = self.conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.conn.close()


def open_peer(command: list[str], url: str | None, deadline: float) -> Connection:
    """Connect over Streamable HTTP when given a URL, else spawn `command` (stdio)."""
    if url is not None:
        return HttpPeer(url, deadline)
    return Peer(command, deadline)


def check_complete(report: Report, name: str, result: dict[str, Any], **detail: Any) -> bool:
    result_type = result.get("resultType")
    return report.step(name, result_type == "complete", resultType=result_type, **detail)


def call(peer: Connection, report: Report, trigger: Trigger) -> bool:
    """Call a trigger tool; a step that it completed without a tool error."""
    result = peer.request(
        "tools/call", {"_meta": META, "name": trigger.tool, "arguments": trigger.arguments}
    )
    text = first_text(result.get("content"))
    return report.step(
        f"{NOTIFY_STEP}tools/call {trigger.tool}",
        result.get("resultType") == "complete" and not result.get("isError"),
        text=text,
    )


def check_notifications(peer: Connection, report: Report, tools: list[dict[str, Any]]) -> None:
    """The modern change-notification check (see the module docstring)."""
    names = [str(tool.get("name")) for tool in tools]
    uris: list[str] = []
    if "add_note" not in names and "toggle-subscriber-updates" in names:
        listed = peer.request("resources/list", {"_meta": META})
        uris = [str(r.get("uri")) for r in listed.get("resources") or []]
    plan = notify_plan(names, uris)
    if not report.step(
        f"{NOTIFY_STEP}trigger tools listed", plan is not None, tools=None if plan else names
    ):
        return
    assert plan is not None
    wanted = {"toolsListChanged": True, "resourceSubscriptions": [plan.uri]}
    listen = peer.listen(wanted)
    path = [f"listen id {listen.id}"]
    try:
        first = listen.wait(lambda m: True, NOTIFY_WAIT)
        acked = first is not None and first.get("method") == ACKNOWLEDGED
        honored = (first or {}).get("params", {}).get("notifications") if acked else None
        report.step(
            f"{NOTIFY_STEP}listen acknowledged first",
            acked,
            subscriptionId=listen.id,
            honored=honored,
            first=None if acked else first,
        )
        if not acked or not isinstance(honored, dict):
            return
        path.append("acknowledged")
        enough = plan.uri in (honored.get("resourceSubscriptions") or []) and (
            plan.list_change is None or honored.get("toolsListChanged") is True
        )
        report.step(f"{NOTIFY_STEP}filter honored", enough, requested=wanted, honored=honored)
        if not call(peer, report, plan.update):
            return
        updated = listen.wait(lambda m: is_update(m, plan.uri), NOTIFY_WAIT)
        report.step(
            f"{NOTIFY_STEP}resources/updated tagged",
            updated is not None,
            uri=plan.uri,
            subscriptionId=listen.id,
        )
        path.append(f"resources/updated {plan.uri}")
        if plan.list_change is not None:
            if not call(peer, report, plan.list_change):
                return
            changed = listen.wait(is_tools_changed, NOTIFY_WAIT)
            report.step(
                f"{NOTIFY_STEP}tools/list_changed tagged",
                changed is not None,
                subscriptionId=listen.id,
            )
            path.append("tools/list_changed")
        else:
            path.append("tools/list_changed: no trigger on this server")
        if plan.stop is not None:
            call(peer, report, plan.stop)
    finally:
        listen.cancel()
    # After the cancel the connection still serves requests, and nothing more
    # reaches the listen (stdio: the channel stays shared, so this is checkable).
    mark = len(listen.tagged())
    if plan.stop is None:
        call(peer, report, plan.update)
    echo_tool = next((t for t in tools if t.get("name") == "echo"), {})
    barrier = {"_meta": META, "name": "echo", "arguments": echo_arguments(echo_tool)}
    echo = peer.request("tools/call", barrier)
    time.sleep(0.3)
    peer.request("tools/call", barrier)
    late = listen.tagged()[mark:]
    report.step(
        f"{NOTIFY_STEP}listen cancelled",
        not late and not echo.get("isError"),
        how=listen.how_cancelled,
        late=late[:3],
    )
    path.append(f"cancelled ({listen.how_cancelled})")
    stray = listen.stray()
    if stray:
        name = f"{NOTIFY_STEP}every message on the listen stream tagged"
        report.step(name, False, stray=stray[:3])
    untagged = [
        m for m in peer.notifications if m.get("method") in CHANGE_METHODS and tag_of(m) is None
    ]
    report.step(f"{NOTIFY_STEP}no untagged change notification", not untagged, seen=untagged[:3])
    delivery_step(report, "; ".join(path))


TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
# META, declaring the tasks extension in the client's capabilities.
TASKS_META = {
    **META,
    "io.modelcontextprotocol/clientCapabilities": {
        "elicitation": {"form": {}},
        "extensions": {TASKS_EXTENSION: {}},
    },
}
TASK_ENDED = ("completed", "failed", "cancelled")
SLOW_SECONDS = 2  # longer than the matrix's [tasks] after (0.5 s)


def poll_task(
    peer: Connection, report: Report, tool: str, task: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """tasks/get at the task's pollIntervalMs until it ends; an input_required
    elicitation is accepted (confirm: true) with tasks/update. The last
    tasks/get result, and the statuses seen in order (repeats folded)."""
    task_id = task["taskId"]
    interval = min(max(float(task.get("pollIntervalMs") or 100) / 1000, 0.05), 2.0)
    seen: list[str] = [str(task.get("status"))]
    while True:
        time.sleep(interval)
        polled = peer.request("tasks/get", {"_meta": TASKS_META, "taskId": task_id})
        status = str(polled.get("status"))
        if status != seen[-1]:
            seen.append(status)
        if polled.get("resultType") != "complete" or polled.get("taskId") != task_id:
            report.step(f"{TASKS_STEP}{tool}: tasks/get answers the task", False, result=polled)
            return polled, seen
        if status in TASK_ENDED:
            return polled, seen
        if status != "input_required":
            continue
        requests = polled.get("inputRequests") or {}
        responses = {
            key: {"action": "accept", "content": {"confirm": True}}
            for key, request in requests.items()
            if isinstance(request, dict) and request.get("method") == "elicitation/create"
        }
        if not report.step(
            f"{TASKS_STEP}{tool}: input_required asks an elicitation",
            bool(responses) and len(responses) == len(requests),
            inputRequests=requests,
        ):
            return polled, seen
        ack = peer.request(
            "tasks/update",
            {"_meta": TASKS_META, "taskId": task_id, "inputResponses": responses},
        )
        report.step(
            f"{TASKS_STEP}{tool}: tasks/update acked", ack.get("resultType") == "complete", ack=ack
        )


def task_call(
    peer: Connection, report: Report, tool: str, arguments: dict[str, Any], expect: str
) -> str:
    """Call `tool` declaring the extension; it must become a task that completes
    with `expect` in its inlined result. A short account of what happened."""
    answer = peer.request("tools/call", {"_meta": TASKS_META, "name": tool, "arguments": arguments})
    is_task = answer.get("resultType") == "task" and isinstance(answer.get("taskId"), str)
    shape = {k: answer.get(k) for k in ("status", "ttlMs", "pollIntervalMs", "createdAt")}
    if not report.step(
        f"{TASKS_STEP}{tool}: answered with a task",
        is_task and answer.get("status") == "working",
        resultType=answer.get("resultType"),
        text=None if is_task else first_text(answer.get("content")),
        **shape,
    ):
        return f"{tool}: {answer.get('resultType')}"
    polled, seen = poll_task(peer, report, tool, answer)
    result = polled.get("result") or {}
    text = first_text(result.get("content")) if isinstance(result, dict) else None
    report.step(
        f"{TASKS_STEP}{tool}: completed with its result",
        polled.get("status") == "completed"
        and text is not None
        and expect in text
        and not result.get("isError"),
        status=polled.get("status"),
        text=text,
        error=polled.get("error"),
    )
    return f"{tool}: task {'→'.join(seen)}"


def check_tasks(
    peer: Connection, report: Report, discover: dict[str, Any], names: list[Any]
) -> None:
    """The tasks check (see the module docstring)."""
    extensions = (discover.get("capabilities") or {}).get("extensions") or {}
    if not report.step(
        f"{TASKS_STEP}extension declared",
        TASKS_EXTENSION in extensions,
        extensions=sorted(extensions),
    ):
        return
    wanted = ("slow_compute", "confirm_delete")
    if not report.step(
        f"{TASKS_STEP}task tools listed", all(t in names for t in wanted), tools=names
    ):
        return
    path = [
        task_call(
            peer,
            report,
            "slow_compute",
            {"seconds": SLOW_SECONDS, "label": "matrix"},
            "computed matrix",
        ),
        task_call(peer, report, "confirm_delete", {"filename": "matrix.txt"}, "deleted"),
    ]
    report.step(f"{TASKS_STEP}path", True, path="; ".join(path))


def converse(peer: Connection, report: Report, feature: str = "basic") -> None:
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
    if feature == "tasks":
        check_tasks(peer, report, discover, names)
        if peer.unexpected:
            report.step(
                "no server-to-client requests or junk", False, unexpected=peer.unexpected[:5]
            )
        return
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

    if feature == "notifications":
        check_notifications(peer, report, tools.get("tools") or [])

    if peer.unexpected:
        report.step("no server-to-client requests or junk", False, unexpected=peer.unexpected[:5])


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    report = Report(era="modern")
    start_watchdog(report, args.timeout)
    peer: Connection | None = None
    try:
        peer = open_peer(args.server, args.url, time.monotonic() + args.timeout)
        converse(peer, report, args.feature)
    except (RpcError, TimeoutError, EOFError, OSError) as exc:
        report.fail(f"{type(exc).__name__}: {exc}")
    finally:
        if peer is not None:
            peer.close()
    report.finish()


if __name__ == "__main__":
    main()
