"""A legacy (2025-11-25) stdio server for the orphan tests (issue #29, class 6):
raw JSON-RPC on blocking pipes, with tools that start processes the gateway
must not leave behind. Each answers with the pids it started, once they run.

Tools:
- `whoami {}`: `{"pid": ..., "pgid": ...}`, the server's own.
- `spawn {setsid?, ignore_term?}`: starts `sleep 60`, in a session of its
  own if `setsid` (it leaves the server's process group), with SIGTERM
  ignored if `ignore_term` (set before exec: no window where it is not);
  `{"pid": ...}`.
- `daemon {}`: a double fork: a child starts `sleep 60` in a session of its
  own and exits, so that the sleeper has left the group and lost its parent
  while the server still runs; `{"pid": ...}` (the sleeper's).
- `busy {}`: says "busy" on stderr, then sleeps without reading stdin (a
  sync tool at work: the end of stdin does not reach it), never answering.
- `exit {code}`: exits at once, without answering.

`--ignore-term`: the server itself ignores SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

out = sys.stdout.buffer
SLEEPER = ["sleep", "60"]


def send(msg: dict[str, Any]) -> None:
    out.write(json.dumps(msg).encode() + b"\n")
    out.flush()


def text(msg_id: Any, value: dict[str, Any]) -> None:
    content = [{"type": "text", "text": json.dumps(value)}]
    send({"jsonrpc": "2.0", "id": msg_id, "result": {"content": content}})


TOOLS = [
    {"name": name, "inputSchema": {"type": "object"}}
    for name in ("whoami", "spawn", "daemon", "busy", "exit")
]


def _ignore_term() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def call(msg_id: Any, params: dict[str, Any]) -> None:
    args = params.get("arguments") or {}
    name = params.get("name")
    if name == "whoami":
        text(msg_id, {"pid": os.getpid(), "pgid": os.getpgid(0)})
    elif name == "spawn":
        child = subprocess.Popen(
            SLEEPER,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=bool(args.get("setsid")),
            preexec_fn=_ignore_term if args.get("ignore_term") else None,  # noqa: PLW1509
        )
        text(msg_id, {"pid": child.pid})
    elif name == "daemon":
        middle = subprocess.run(
            [
                sys.executable,
                "-c",
                "import subprocess, sys\n"
                f"p = subprocess.Popen({SLEEPER!r}, start_new_session=True,"
                " stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)\n"
                "print(p.pid)",
            ],
            stdout=subprocess.PIPE,
            check=True,
        )
        text(msg_id, {"pid": int(middle.stdout)})
    elif name == "busy":
        sys.stderr.write("busy\n")
        sys.stderr.flush()
        time.sleep(60)
    elif name == "exit":
        os._exit(int(args.get("code", 0)))


def main() -> None:
    if "--ignore-term" in sys.argv[1:]:
        _ignore_term()
    for line in sys.stdin.buffer:
        msg = json.loads(line)
        method, msg_id = msg.get("method"), msg.get("id")
        if msg_id is None or method is None:
            continue
        if method == "initialize":
            info = {"name": "orphans", "version": "1"}
            result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}}
            send({"jsonrpc": "2.0", "id": msg_id, "result": {**result, "serverInfo": info}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": msg_id, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            call(msg_id, msg.get("params") or {})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": msg_id, "result": {}})
        else:
            error = {"code": -32601, "message": f"Method not found: {method}"}
            send({"jsonrpc": "2.0", "id": msg_id, "error": error})


if __name__ == "__main__":
    main()
