"""The processes of a run besides its client: free ports on 127.0.0.1, the
HTTP servers and gateways started before the client (`Background`, `_start`:
in a session of their own, waited for until ready; `_stop`: by process group),
and everything tagged with a run's id found and killed at the end
(`_reap_tagged`)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from compat_matrix.cells import REPO

HOST = "127.0.0.1"  # every HTTP peer is reached here, whatever it binds
# Set in every run's environment; the fixture clients hand their whole
# environment to the servers they spawn, and so does the gateway.
RUN_TAG_VAR = "MCP_COMPAT_RUN"


@dataclass(frozen=True)
class Background:
    """A process run.py starts before the client: an HTTP server or gateway."""

    role: Literal["server", "gateway"]
    argv: list[str]
    port: int
    ready_url: str | None  # GET must answer 200 (the gateway's /readyz); None: TCP accept


_ports_lock = threading.Lock()
_ports_given: set[int] = set()
# Below the usual ephemeral range (32768-60999), so the source port of some
# outgoing connection cannot take a port between our check and the server's bind.
PORT_RANGE = (20000, 32000)


def free_port() -> int:
    """A port on 127.0.0.1 that is free now and that this process has not handed out."""
    with _ports_lock:
        for _ in range(1000):
            port = random.randrange(*PORT_RANGE)
            if port in _ports_given:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind((HOST, port))
                except OSError:
                    continue
            _ports_given.add(port)
            return port
    raise OSError("no free port found")


def _tagged_pids(tag: str) -> dict[int, str]:
    """Processes (other than us) whose environment carries this run's tag."""
    needle = f"{RUN_TAG_VAR}={tag}".encode()
    found: dict[int, str] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    me = os.getpid()
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone, or not ours to read
        found[int(entry.name)] = cmdline.strip()
    return found


def _signal(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _reap_tagged(tag: str, grace: float = 1.0) -> list[str]:
    """Give stragglers `grace` to exit on their own, then TERM, then KILL them.
    Returns a short description of each straggler that had to be killed."""
    deadline = time.monotonic() + grace
    left = _tagged_pids(tag)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _tagged_pids(tag)
    if not left:
        return []
    killed = [_short_cmd(cmd) for cmd in left.values()]
    _signal(left, signal.SIGTERM)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        left = _tagged_pids(tag)
        if not left:
            break
        time.sleep(0.1)
    _signal(_tagged_pids(tag), signal.SIGKILL)
    return killed


def _short_cmd(cmdline: str) -> str:
    words = cmdline.split()
    interesting = [Path(w).name for w in words if "/" in w or w.startswith("-m")] or words
    return " ".join(interesting[:3])[:80]


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=2)
            return
        except subprocess.TimeoutExpired:
            continue


ADDRESS_IN_USE = ("address already in use", "eaddrinuse", "errno 98")


class StartError(Exception):
    """A background process did not become ready; `retry` if it lost a port race."""

    def __init__(self, message: str, retry: bool = False) -> None:
        super().__init__(message)
        self.retry = retry


@dataclass
class Started:
    spec: Background
    proc: subprocess.Popen[bytes]
    output: IO[bytes]

    def tail(self, lines: int = 8) -> list[str]:
        self.output.seek(0)
        text = self.output.read().decode(errors="replace")
        return [f"[{self.spec.role}] {line}" for line in text.strip().splitlines()[-lines:]]


def _is_ready(spec: Background) -> bool:
    if spec.ready_url is None:
        try:
            with socket.create_connection((HOST, spec.port), timeout=0.5):
                return True
        except OSError:
            return False
    try:
        with urllib.request.urlopen(spec.ready_url, timeout=1.0) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _start(spec: Background, env: dict[str, str], timeout: float) -> Started:
    """Start `spec` in its own session (output to a temporary file) and wait until
    it is ready: it accepts TCP connections, or its ready_url answers 200."""
    output = tempfile.TemporaryFile()  # noqa: SIM115 (kept with the process, closed by its owner)
    try:
        proc = subprocess.Popen(
            spec.argv,
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        output.close()
        raise StartError(f"{spec.role} did not start: {exc}") from exc
    started = Started(spec, proc, output)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            tail = started.tail(4)
            _stop(started)
            output.close()
            text = " / ".join(tail).lower()
            retry = any(marker in text for marker in ADDRESS_IN_USE)
            raise StartError(
                f"{spec.role} exited ({proc.returncode}) before it was ready: "
                + (" / ".join(tail) or "no output"),
                retry=retry,
            )
        if _is_ready(spec):
            return started
        if time.monotonic() > deadline:
            tail = started.tail(4)
            _stop(started)
            output.close()
            raise StartError(
                f"{spec.role} not ready after {timeout:g}s on port {spec.port}: "
                + (" / ".join(tail) or "no output")
            )
        time.sleep(0.05)


def _stop(started: Started, grace: float = 3.0) -> None:
    """SIGTERM the process group, wait `grace`, then SIGKILL it; close its output."""
    proc = started.proc
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    # Anything else left in the group (the process itself has been waited for).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
