"""/proc helpers: peak RSS, process trees, and killing what we started (by pid)."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def vm_hwm_kib(pid: int) -> int | None:
    """Peak resident set size (VmHWM) of a live process, in KiB."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return int(stat[stat.rindex(b")") + 2 :].split()[1])


def descendants(root: int) -> list[int]:
    """Every live descendant of `root` (children, grandchildren, ...), parents first."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = _ppid(int(entry))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    out: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def kill(pids: list[int], sig: signal.Signals = signal.SIGKILL) -> None:
    """Signal each pid that is still alive; never a group or a name."""
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def set_affinity(pid: int, cpus: set[int]) -> None:
    """Move every thread of a live process onto `cpus` (0 = our calling thread only)."""
    if pid == 0:
        os.sched_setaffinity(0, cpus)
        return
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return
    for tid in tids:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, cpus)


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time a live process has used so far."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def machine_busy_seconds() -> float:
    """CPU time the whole machine has spent busy (all CPUs, not idle or iowait)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / _TICK


def own_cpu_seconds() -> float:
    """CPU time of this process and every descendant it has reaped."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def per_cpu_busy() -> dict[int, int]:
    """Busy clock ticks so far, per CPU."""
    out: dict[int, int] = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3].isdigit():
            name, *fields = line.split()
            values = [int(f) for f in fields[:8]]
            out[int(name[3:])] = sum(values) - values[3] - values[4]  # minus idle, iowait
    return out


def idlest_cpu(among: set[int], before: dict[int, int], after: dict[int, int]) -> int:
    """The CPU of `among` that was least busy between two per_cpu_busy() samples."""
    return min(sorted(among), key=lambda cpu: after.get(cpu, 0) - before.get(cpu, 0))
