"""Transparent stdio tap: run a server and log every line each way (stdlib only).

    python3 compat_matrix/peers/wiretap.py LOGFILE -- SERVER_COMMAND ARGS...

Put it in front of any server command given to a fixture client to see the
exact bytes a real SDK sends and receives ("> " client→server, "< "
server→client, one JSON-RPC message per line). It exits with the server.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import IO, TextIO


def pump(
    src: IO[bytes], dst: IO[bytes], tag: str, *, log: TextIO, lock: threading.Lock, close_dst: bool
) -> None:
    for line in src:
        with lock:
            log.write(f"{time.monotonic():.3f} {tag} {line.decode(errors='replace').rstrip()}\n")
            log.flush()
        dst.write(line)
        dst.flush()
    if close_dst:
        dst.close()  # client closed our stdin: pass the EOF on so the server shuts down


def main() -> int:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(f"usage: {sys.argv[0]} LOGFILE -- SERVER_COMMAND [ARGS...]")
    lock = threading.Lock()
    with open(sys.argv[1], "a", encoding="utf-8") as log:
        proc = subprocess.Popen(
            sys.argv[3:], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        assert proc.stdin is not None and proc.stdout is not None
        inbound = threading.Thread(
            target=pump,
            args=(sys.stdin.buffer, proc.stdin, ">"),
            kwargs={"log": log, "lock": lock, "close_dst": True},
            daemon=True,
        )
        inbound.start()
        pump(proc.stdout, sys.stdout.buffer, "<", log=log, lock=lock, close_dst=False)
        return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
