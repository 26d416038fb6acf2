"""The bundled notes server, recording each start: it appends its pid to
the file named by PID_FILE, so a test can count the upstream processes a
gateway started."""

from __future__ import annotations

import os
import runpy
import sys

with open(os.environ["PID_FILE"], "a", encoding="utf-8") as pids:
    pids.write(f"{os.getpid()}\n")
sys.argv = [sys.argv[0]]
runpy.run_module("gateway.examples.notes_server", run_name="__main__")
