"""How an upstream stdio server's process is started, and reaped.

The server is started through a keeper (gateway/backs/process_keeper.py, a
small Python process of its own between the gateway and the server): it ends
everything the server started when the server ends or the gateway does, even
by SIGKILL (issue #29, class 6), and tells the gateway the server's pid and,
the moment it happens, its exit. Where the keeper cannot be run (the gateway
is not run by a Python interpreter with its sources on disk: a frozen
binary), the server is the gateway's own child, with a parent-death signal,
and its exit is watched through a pidfd; where there is no pidfd (macOS,
Linux before 5.3, a seccomp profile or sandbox that refuses pidfd_open), it
is polled instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
import structlog

from gateway.upstream_errors import ServerNotStarted, map_exceptions

log = structlog.get_logger("gateway.backs.stdio")


_PR_SET_PDEATHSIG = 1


# The keeper, run as `python -I -S process_keeper.py ...`: isolated from the
# server's PYTHON* variables and site-packages, importing builtins only. None
# where it cannot be run (no interpreter to run it: a frozen gateway; its
# source not on disk: a zipapp).
def _keeper_script() -> Path | None:
    script = Path(__file__).with_name("process_keeper.py")
    if not sys.executable or getattr(sys, "frozen", False) or not script.is_file():
        return None
    return script


KEEPER = _keeper_script()
# How long the keeper may take to say the server runs (it takes ~15 ms).
KEEPER_START_TIMEOUT = 10.0
# Past the keeper's own bounds (its grace, then KILL_PATIENCE), how long the
# gateway waits for it to end before it kills it and the server's group.
KEEPER_END_MARGIN = 5.0


def _die_with_parent() -> None:
    """In the child, before exec (only where there is no keeper): if the
    gateway is killed outright (SIGKILL leaves it no time to stop its
    upstream), the kernel sends the server SIGTERM. Linux only; elsewhere a
    no-op."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


# Without a pidfd, how often an exit being waited for is polled: from the
# first interval, doubling up to the last (an exit is seen within that).
EXIT_POLL_FIRST = 0.001
EXIT_POLL_LAST = 0.05


class KeeperReport:
    """What the keeper says on its report pipe (see process_keeper): the
    server's pid, or the errno it could not be started with; the server's
    exit status; that it left something running. The end of the pipe is the
    keeper's end. Read without blocking, by one task at a time."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self._buf = b""
        self.pid: int | None = None
        self.error: int | None = None
        self.exit: int | None = None
        self.left = False
        self.eof = False

    def read(self) -> None:
        while not self.eof and self.fd >= 0:
            try:
                chunk = os.read(self.fd, 4096)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self.eof = True
                return
            *lines, self._buf = (self._buf + chunk).split(b"\n")
            for line in lines:
                self._take(line)

    def _take(self, line: bytes) -> None:
        word, _, value = line.partition(b" ")
        with contextlib.suppress(ValueError):
            if word == b"pid":
                self.pid = int(value)
            elif word == b"error":
                self.error = int(value)
            elif word == b"exit":
                self.exit = int(value)
            elif word == b"left":
                self.left = True

    def close(self) -> None:
        if self.fd >= 0:
            anyio.notify_closing(self.fd)
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
        self.eof = True


def keeper_command(
    report_fd: int, grace: float, command: Sequence[str], env: Mapping[str, str]
) -> list[str]:
    assert KEEPER is not None
    ctype = env.get("LC_CTYPE")
    return [
        sys.executable,
        "-I",
        "-S",
        str(KEEPER),
        str(report_fd),
        repr(grace),
        str(os.getpid()),
        "-" if ctype is None else f"={ctype}",
        "--",
        *command,
    ]


# Why pidfd_open failed, each reason said once in the log (not once a spawn).
_no_pidfd_said: set[str] = set()


def open_pidfd(pid: int) -> int:
    """A pidfd for the exit to wait on, or -1 where the system gives none
    (exits are then polled)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not on this system"
        if why not in _no_pidfd_said:
            _no_pidfd_said.add(why)
            log.info("no pidfd_open; upstream exits are polled", reason=why)
        return -1


async def reaped(popen: subprocess.Popen[bytes], pidfd: int, timeout: float) -> None:
    """Wait for `popen` to exit, at most `timeout`, and reap it."""
    with anyio.move_on_after(timeout):
        delay = EXIT_POLL_FIRST
        while popen.poll() is None:  # each pass waits on the pidfd
            if pidfd >= 0:
                await anyio.wait_readable(pidfd)
            else:
                await anyio.sleep(delay)
                delay = min(delay * 2, EXIT_POLL_LAST)


def _not_started(exc: Exception) -> ServerNotStarted:
    return ServerNotStarted(str(exc))


def popen_for(
    args: list[str],
    *,
    env: Mapping[str, str] | None,
    cwd: str | None,
    pass_fds: tuple[int, ...] = (),
) -> subprocess.Popen[bytes]:
    # No such command, no permission, no such cwd: the OS's own words.
    with map_exceptions({OSError: _not_started}):
        return subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            # Its own session: a Ctrl-C at our terminal is ours to handle,
            # and we decide when the server stops (and its children too).
            start_new_session=True,
            pass_fds=pass_fds,
            # Without a keeper: the gateway runs no threads of its own when
            # it spawns; the hook only calls prctl. (With one, no hook: the
            # keeper sees to it, and the spawn can use vfork.)
            preexec_fn=None if pass_fds else _die_with_parent,  # noqa: PLW1509
        )


async def keeper_started(
    popen: subprocess.Popen[bytes], report: KeeperReport, pidfd: int, command: Sequence[str]
) -> None:
    """Until the keeper says the server runs; ServerNotStarted, in the
    OS's words, if it could not be started. Not cancelled midway: a
    keeper left without a reader would not know to stop the server."""
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(KEEPER_START_TIMEOUT):
            report.read()
            while report.pid is None and report.error is None and not report.eof:
                await anyio.wait_readable(report.fd)
                report.read()
        if report.pid is not None:
            return
        # It is ending (or stuck): SIGTERM has it stop what it started.
        with contextlib.suppress(ProcessLookupError):
            popen.terminate()
        await reaped(popen, pidfd, KEEPER_START_TIMEOUT)
    report.close()
    for pipe in (popen.stdin, popen.stdout, popen.stderr):
        if pipe is not None:
            pipe.close()
    if pidfd >= 0:
        os.close(pidfd)
    if report.error is not None:
        cause = OSError(report.error, os.strerror(report.error), command[0])
        raise ServerNotStarted(str(cause)) from cause
    raise ServerNotStarted(
        f"the process keeper ended before the server started (code {popen.returncode})"
    )
