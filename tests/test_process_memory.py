"""The gateway process settles its memory before it serves (cli._settle_memory;
issue #12, "per-request allocations": a full collection walked every
import-time object in the middle of the traffic). Checked in a process of
its own: freezing would freeze the test run's objects too."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import gc
from gateway import cli
from gateway.runtime import http_app, stdio_app  # what a serving process has imported
cli._settle_memory()
assert gc.get_freeze_count() > 10_000, gc.get_freeze_count()
assert gc.get_threshold()[0] == cli.GC_YOUNG
cycle = []
cycle.append(cycle)
del cycle
assert gc.collect() >= 1  # cycles made later are still collected
print("ok")
"""


def test_import_time_objects_are_frozen_and_later_cycles_still_collected() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
