"""A legacy (2025-11-25) stdio server for the flow-control tests: raw
JSON-RPC on blocking pipes, so that when it stops reading its stdin it really
stops (a sync tool blocking its loop), and when it writes it writes as fast
as the pipe takes.

Tools:
- `flood {count, size, reply_pad?}`: `count` progress notifications of
  about `size` bytes on the call's progress token (log messages when it has
  none), then "flood done" on stderr (the gateway's log carries it), then
  the result (with `reply_pad` bytes more).
- `hold {release_file}`: stops reading stdin until `release_file` exists.
- `echo {..., reply_pad?}`: the arguments back (and `reply_pad` bytes more).
- `fork_and_exit {pid_file}`: starts a child that inherits stdout and stderr
  and sleeps, writes its pid to `pid_file`, then exits without answering.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

out = sys.stdout.buffer


def send(msg: dict[str, Any]) -> None:
    out.write(json.dumps(msg).encode() + b"\n")
    out.flush()


def result(msg_id: Any, res: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "id": msg_id, "result": res})


# The versions it speaks: a client's, if one of them, else the newest.
VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")

TOOLS = [
    {"name": name, "inputSchema": {"type": "object"}}
    for name in ("flood", "hold", "echo", "fork_and_exit")
]


def call(msg_id: Any, params: dict[str, Any]) -> None:
    args = params.get("arguments") or {}
    name = params.get("name")
    if name == "flood":
        token = (params.get("_meta") or {}).get("progressToken")
        pad = "x" * int(args.get("size", 1000))
        for i in range(int(args.get("count", 0))):
            if token is not None:
                note = {"progressToken": token, "progress": i + 1, "message": pad}
                send({"jsonrpc": "2.0", "method": "notifications/progress", "params": note})
            else:
                log = {"level": "info", "data": pad}
                send({"jsonrpc": "2.0", "method": "notifications/message", "params": log})
        sys.stderr.write("flood done\n")
        sys.stderr.flush()
        text = f"flooded {args.get('count', 0)}" + "r" * int(args.get("reply_pad", 0))
        result(msg_id, {"content": [{"type": "text", "text": text}]})
    elif name == "hold":
        release = Path(args["release_file"])
        while not release.exists():  # a sync tool: nothing reads stdin meanwhile
            time.sleep(0.01)
        result(msg_id, {"content": [{"type": "text", "text": "released"}]})
    elif name == "fork_and_exit":
        child = subprocess.Popen(  # inherits stdout: holds the pipe open after we exit
            [sys.executable, "-c", "import time; time.sleep(60)"]
        )
        Path(args["pid_file"]).write_text(str(child.pid))
        os._exit(3)
    else:  # echo; `reply_pad` bytes are added to the reply
        text = json.dumps(args) + "r" * int(args.get("reply_pad", 0))
        result(msg_id, {"content": [{"type": "text", "text": text}]})


def main() -> None:
    for line in sys.stdin.buffer:
        msg = json.loads(line)
        method, msg_id = msg.get("method"), msg.get("id")
        if msg_id is None or method is None:
            continue
        if method == "initialize":
            asked = (msg.get("params") or {}).get("protocolVersion")
            result(
                msg_id,
                {
                    "protocolVersion": asked if asked in VERSIONS else VERSIONS[0],
                    "capabilities": {"tools": {}, "logging": {}},
                    "serverInfo": {"name": "flood", "version": "1"},
                },
            )
        elif method == "tools/list":
            result(msg_id, {"tools": TOOLS})
        elif method == "tools/call":
            call(msg_id, msg.get("params") or {})
        elif method in ("ping", "logging/setLevel"):
            result(msg_id, {})
        else:
            error = {"code": -32601, "message": f"Method not found: {method}"}
            send({"jsonrpc": "2.0", "id": msg_id, "error": error})


if __name__ == "__main__":
    main()
