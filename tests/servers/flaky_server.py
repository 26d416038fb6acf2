"""A legacy stdio server for end-to-end tests: it can crash, write to stderr,
and take its time, on request."""

import json
import os
import signal
import sys
import time
from typing import Any

# --stubborn: outlive the end of stdin; --very-stubborn: ignore SIGTERM too.
STUBBORN = "--stubborn" in sys.argv or "--very-stubborn" in sys.argv
if "--very-stubborn" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def send(msg: dict[str, Any]) -> None:
    os.write(1, (json.dumps(msg) + "\n").encode())


for line in sys.stdin:
    msg = json.loads(line)
    # FLAKY_CALLS: every request is logged as it arrives, for a test to wait on.
    if "id" in msg and os.environ.get("FLAKY_CALLS"):
        with open(os.environ["FLAKY_CALLS"], "a") as calls:
            calls.write(json.dumps(msg) + "\n")
    if "id" not in msg:
        if msg.get("method") == "notifications/cancelled" and os.environ.get("FLAKY_LOG"):
            with open(os.environ["FLAKY_LOG"], "a") as log:
                log.write(json.dumps(msg) + "\n")
        continue
    method, params = msg["method"], msg.get("params") or {}
    if method == "initialize":
        send(
            {
                "jsonrpc": "2.0",
                "id": msg["id"],
                "result": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "flaky", "version": "1"},
                },
            }
        )
    elif method == "tools/call":
        name = params.get("name")
        if name == "progress":
            token = (params.get("_meta") or {}).get("progressToken")
            if token is not None:
                send(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/progress",
                        "params": {"progressToken": token, "progress": 1, "total": 1},
                    }
                )
        if name == "crash":
            os._exit(3)
        if name == "stderr":
            sys.stderr.write("flaky-server says hello on stderr\n")
            sys.stderr.flush()
        if name == "sleep" or (name == "progress" and "seconds" in params.get("arguments", {})):
            time.sleep(float(params.get("arguments", {}).get("seconds", 1)))
        send(
            {
                "jsonrpc": "2.0",
                "id": msg["id"],
                "result": {"content": [{"type": "text", "text": f"pid {os.getpid()}"}]},
            }
        )
    else:
        send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": method}})

if STUBBORN:
    time.sleep(3600)
