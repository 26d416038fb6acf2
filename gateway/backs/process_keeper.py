"""The keeper between the gateway and one stdio server (issue #29, class 6):
every process the server starts ends when the server or the gateway ends,
however the gateway ends.

    python -I -S process_keeper.py REPORT_FD GRACE PARENT_PID LC_CTYPE -- COMMAND [ARG...]

The gateway (PARENT_PID) starts this in place of the server. It starts the
server as its child, in a session of its own, on its own stdin, stdout and
stderr, which it then lets go of (they are the gateway's pipes: they live as
long as the server and what the server started, never longer because of the
keeper); it writes nothing to them. It tells the gateway on REPORT_FD, a
line each:

- `pid N`: the server runs, as process N (its process group is N too);
  or `error ERRNO` if it could not be started (then the keeper exits 127);
- `exit RC`: the server exited, RC as subprocess says it (the exit code, or
  -N for a death by signal N);
- `left`: the server is gone but something it started is still there: that
  is being stopped.

Then it exits, once nothing it started is left, with the server's status (a
death by signal is re-raised, so the gateway sees what the server got).

What is left when the server exits is stopped at once: SIGTERM, then SIGKILL
after GRACE seconds. When the gateway goes, or the keeper gets SIGTERM, SIGINT
or SIGHUP, the server's process group gets the same signal (SIGTERM for the
gateway's end), SIGKILL after GRACE, and then what is left goes as above. The
gateway's end is seen however it comes, SIGKILL included: on Linux by the
parent-death signal, on macOS and the BSDs by kqueue's NOTE_EXIT on the
gateway's pid, elsewhere by polling getppid().

What "what it started" covers: on Linux the keeper is a child subreaper
(PR_SET_CHILD_SUBREAPER), so every process that descends from the server,
whether it stayed in the server's process group or left it (setsid(), a
double fork), is re-parented to the keeper when its parent dies and is
stopped; the keeper finds them as its children in /proc. Elsewhere there is
no subreaper: the server's process group is stopped, and a process that left
it is not the keeper's to find.

Only builtin modules, and the C half of `signal` (the Python half imports
enum, ~10 ms): the keeper adds ~15 ms to a server's start.
"""

# Every import costs start-up time: typing (~19 ms), contextlib (~3), the
# Python half of signal (~10), even os (~2: posix is what it wraps, and is
# loaded already) are not worth it here, hence posix and try/except/pass.
# ruff: noqa: SIM105
from __future__ import annotations

import posix
import select
import sys
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    import signal as _signal
    from collections.abc import Callable, Sequence
    from types import FrameType
    from typing import Any, NoReturn
else:  # the C module: what `signal` wraps, without the enum import
    import _signal

LINUX = sys.platform.startswith("linux")
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
# What a stop request is: the gateway's own end (the parent-death signal) or
# a supervisor's signal to the keeper. Each is passed on to the server's group.
STOP_SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)
# The server starts with these at their default, as subprocess would start it
# (Python ignores SIGPIPE and SIGXFSZ; the keeper catches the others).
SERVER_DEFAULTS = (
    _signal.SIGPIPE,
    _signal.SIGXFSZ,
    _signal.SIGCHLD,
    *STOP_SIGNALS,
)
# Nothing tells a subreaper that it was handed an orphan: while something is
# left, its children are looked at this often (from the first, doubling).
SWEEP_POLL_FIRST = 0.001
SWEEP_POLL_LAST = 0.05
# Where the gateway's end can only be polled, this often.
PARENT_POLL = 0.25
# A process that outlives its SIGKILL this long (stuck in the kernel) is given
# up on, so that the keeper ends.
KILL_PATIENCE = 2.0
# Signals whose default action dumps core: re-raised, they would dump the
# keeper's.
_CORE_SIGNALS = frozenset(
    getattr(_signal, name, 0)
    for name in ("SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE", "SIGSEGV")
) | frozenset(getattr(_signal, name, 0) for name in ("SIGSYS", "SIGXCPU", "SIGXFSZ"))


def _libc_function(name: str) -> Callable[..., int] | None:
    """A libc function taking and returning C ints, through _ctypes alone
    (`ctypes` costs ~7 ms to import; this ~1), else through ctypes."""
    try:
        import _ctypes

        class _Int(_ctypes._SimpleCData):  # type: ignore[type-arg]
            _type_ = "i"

        class _Libc:
            _handle = _ctypes.dlopen(None)  # type: ignore[arg-type]

        class _Function(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
            _restype_ = _Int

        function: Callable[..., int] = _Function((name, _Libc()))  # type: ignore[arg-type]
        return function
    except (ImportError, AttributeError, OSError, TypeError):
        pass
    try:
        import ctypes

        found: Callable[..., int] = getattr(ctypes.CDLL(None, use_errno=True), name)
        return found
    except (ImportError, AttributeError, OSError):
        return None


def _prctl(option: int, value: int) -> bool:
    prctl = _libc_function("prctl")
    return prctl is not None and prctl(option, value, 0, 0, 0) == 0


def _watch_exit_of(pid: int) -> Any:
    """A kqueue that turns readable when `pid` exits (macOS, the BSDs), or
    None where there is none."""
    if sys.platform == "linux" or not hasattr(select, "kqueue"):
        return None
    queue = select.kqueue()
    watch = select.kevent(
        pid, filter=select.KQ_FILTER_PROC, flags=select.KQ_EV_ADD, fflags=select.KQ_NOTE_EXIT
    )
    try:
        queue.control([watch], 0)
    except OSError:  # already gone: getppid() says so
        pass
    return queue


def exit_code(status: int) -> int:
    """A wait status as subprocess gives it: the code, or -N for signal N."""
    return posix.waitstatus_to_exitcode(status)


class Keeper:
    def __init__(self, report_fd: int, grace: float, parent: int, command: Sequence[str]) -> None:
        self.report_fd = report_fd
        self.grace = grace
        self.parent = parent
        self.command = list(command)
        self.me = posix.getpid()
        self.server = 0
        self.server_rc: int | None = None
        # Stop signals received, not yet passed on; whether the gateway's end
        # was seen (it asks for a stop once).
        self.asked: list[int] = []
        self.parent_gone = False
        # When the server's group gets SIGKILL, after a stop request.
        self.kill_server_at: float | None = None
        self.server_killed = False
        # After the server's exit: when what is left gets SIGKILL, when it is
        # given up on, and who already got SIGTERM.
        self.sweep_kill_at: float | None = None
        self.sweep_give_up_at = 0.0
        self.sweep_delay = SWEEP_POLL_FIRST
        self.group_termed = False
        self.termed: set[int] = set()
        self.wake_r = -1
        self.kqueue: Any = None
        self.subreaper = False
        self.childless = False

    # -- start ----------------------------------------------------------------
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum != _signal.SIGCHLD:
            self.asked.append(signum)

    def install(self) -> None:
        """Signals wake the loop; the gateway's end is watched. Done before the
        server starts, so that a signal from then on is handled."""
        self.wake_r, wake_w = posix.pipe()
        posix.set_blocking(self.wake_r, False)
        posix.set_blocking(wake_w, False)
        _signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        for signum in (_signal.SIGCHLD, *STOP_SIGNALS):
            _signal.signal(signum, self._on_signal)
        if LINUX:
            self.subreaper = _prctl(_PR_SET_CHILD_SUBREAPER, 1)
            _prctl(_PR_SET_PDEATHSIG, _signal.SIGTERM)
        else:
            self.kqueue = _watch_exit_of(self.parent)

    def gateway_gone(self) -> bool:
        """The parent died (we were re-parented), whenever that happened:
        before the parent-death signal was set up too."""
        return posix.getppid() != self.parent

    def start(self, env: dict[bytes, bytes]) -> None:
        posix.set_inheritable(self.report_fd, False)
        try:
            try:
                self.server = posix.posix_spawnp(
                    self.command[0],
                    self.command,
                    env,
                    setsid=True,
                    setsigdef=SERVER_DEFAULTS,
                )
            except NotImplementedError:  # no POSIX_SPAWN_SETSID: a group of its own
                self.server = posix.posix_spawnp(
                    self.command[0],
                    self.command,
                    env,
                    setpgroup=0,
                    setsigdef=SERVER_DEFAULTS,
                )
        except OSError as exc:
            self.report(f"error {exc.errno or 0}")
            posix._exit(127)
        self.report(f"pid {self.server}")
        # The pipes are the server's: let go of them, so that they close when
        # the server (and what it started) is done with them.
        null = posix.open("/dev/null", posix.O_RDWR)
        for fd in (0, 1, 2):
            posix.dup2(null, fd)
        posix.close(null)

    def report(self, line: str) -> None:
        if self.report_fd < 0:
            return
        try:
            posix.write(self.report_fd, line.encode() + b"\n")
        except OSError:  # the gateway is gone: nobody to tell
            self.report_fd = -1

    # -- the loop -------------------------------------------------------------
    def run(self) -> int:
        """Until nothing the keeper started is left; the server's status."""
        while True:
            self.reap()
            now = time.monotonic()
            if self.server_rc is None:
                timeout = self.while_running(now)
            else:
                done, timeout = self.sweep(now)
                if done:
                    return self.server_rc
            self.wait(timeout)

    def reap(self) -> None:
        while True:
            try:
                pid, status = posix.waitpid(-1, posix.WNOHANG)
            except ChildProcessError:
                self.childless = True
                return
            if pid == 0:
                self.childless = False
                return
            if pid == self.server:
                self.server_rc = exit_code(status)
                self.report(f"exit {self.server_rc}")

    def while_running(self, now: float) -> float | None:
        if not self.parent_gone and self.gateway_gone():
            self.parent_gone = True
            self.asked.append(_signal.SIGTERM)
        asked, self.asked = self.asked, []
        for signum in asked:
            self.signal_group(signum)
            if self.kill_server_at is None:
                self.kill_server_at = now + self.grace
        timeout: float | None = None if LINUX or self.kqueue is not None else PARENT_POLL
        if self.kill_server_at is not None and not self.server_killed:
            if now >= self.kill_server_at:
                self.signal_group(_signal.SIGKILL)
                self.server_killed = True
            else:
                left = self.kill_server_at - now
                timeout = left if timeout is None else min(timeout, left)
        return timeout

    def sweep(self, now: float) -> tuple[bool, float | None]:
        """What the server left: SIGTERM at once, SIGKILL after the grace.
        Done when the keeper has no child left and the group is empty."""
        self.asked = []  # the server is gone: what is left goes anyway
        children = self.children()
        group = self.group_alive()
        if not group and not children and self.childless:
            return True, None
        if self.sweep_kill_at is None:
            self.report("left")
            self.sweep_kill_at = now + self.grace
            self.sweep_give_up_at = self.sweep_kill_at + KILL_PATIENCE
        elif now >= self.sweep_give_up_at:
            return True, None
        kill = now >= self.sweep_kill_at
        if group and (kill or not self.group_termed):
            self.signal_group(_signal.SIGKILL if kill else _signal.SIGTERM)
            self.group_termed = True
        for pid in children:
            if kill or pid not in self.termed:
                self.termed.add(pid)
                try:
                    posix.kill(pid, _signal.SIGKILL if kill else _signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass
        timeout = self.sweep_delay
        self.sweep_delay = min(self.sweep_delay * 2, SWEEP_POLL_LAST)
        if not kill:
            timeout = min(timeout, max(0.0, self.sweep_kill_at - now))
        return False, timeout

    def wait(self, timeout: float | None) -> None:
        fds = [self.wake_r]
        if self.kqueue is not None:
            fds.append(self.kqueue.fileno())
        ready, _, _ = select.select(fds, [], [], timeout)
        if self.wake_r in ready:
            try:
                while posix.read(self.wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        if self.kqueue is not None and self.kqueue.fileno() in ready:
            self.kqueue.control(None, 4, 0)  # the gateway's exit: getppid() tells

    # -- what is there ----------------------------------------------------------
    def signal_group(self, signum: int) -> None:
        try:
            posix.killpg(self.server, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def group_alive(self) -> bool:
        """The group keeps the server's pid as its id while a member lives,
        and no new process is given an id still in use as a group's."""
        try:
            posix.killpg(self.server, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def children(self) -> list[int]:
        """The keeper's children, on Linux (where orphans are handed to it):
        from /proc/self/task/*/children, else from every process's stat."""
        if not LINUX:
            return []
        pids: list[int] = []
        try:
            for task in posix.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{task}/children", "rb") as listed:
                    pids.extend(int(word) for word in listed.read().split())
        except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN
            return self._children_by_stat()
        except OSError:
            return []
        return pids

    def _children_by_stat(self) -> list[int]:
        pids: list[int] = []
        try:
            entries = posix.listdir("/proc")
        except OSError:
            return pids
        for entry in entries:
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    fields = stat.read().rpartition(b")")[2].split()
            except OSError:
                continue
            if len(fields) > 1 and int(fields[1]) == self.me:
                pids.append(int(entry))
        return pids


def exit_as(rc: int) -> NoReturn:
    """End with the status `rc` says: the code, or the same signal."""
    if rc >= 0:
        posix._exit(rc)
    signum = -rc
    if signum in _CORE_SIGNALS:  # the server's core, if any, is dumped: not ours
        if LINUX:
            _prctl(_PR_SET_DUMPABLE, 0)
        else:
            try:
                import resource

                hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
                resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
            except (ImportError, OSError, ValueError):
                pass
    try:
        _signal.signal(signum, _signal.SIG_DFL)
    except (OSError, ValueError):  # SIGKILL has no other action
        pass
    try:
        posix.kill(posix.getpid(), signum)
    except OSError:
        pass
    posix._exit(128 + signum)


def parse(argv: Sequence[str]) -> tuple[int, float, int, str | None, list[str]]:
    """REPORT_FD GRACE PARENT_PID LC_CTYPE -- COMMAND...; LC_CTYPE is "-"
    for unset, else "=" and its value."""
    report_fd, grace, parent, ctype, dashes, *command = argv
    if dashes != "--" or not command:
        raise ValueError("usage: REPORT_FD GRACE PARENT_PID LC_CTYPE -- COMMAND [ARG...]")
    return int(report_fd), float(grace), int(parent), ctype[1:] if ctype != "-" else None, command


def main(argv: Sequence[str]) -> NoReturn:
    try:
        report_fd, grace, parent, ctype, command = parse(argv)
    except ValueError as exc:
        posix.write(2, f"process_keeper: {exc}\n".encode())
        posix._exit(2)
    # Python sets LC_CTYPE when it finds the C locale (PEP 538): the server
    # gets the value the gateway meant it to have.
    env = dict(posix.environ)
    if ctype is None:
        env.pop(b"LC_CTYPE", None)
    else:
        env[b"LC_CTYPE"] = ctype.encode(sys.getfilesystemencoding(), "surrogateescape")
    keeper = Keeper(report_fd, grace, parent, command)
    keeper.install()
    if keeper.gateway_gone():  # it died before the parent-death signal was set
        posix._exit(1)
    keeper.start(env)
    exit_as(keeper.run())


if __name__ == "__main__":
    main(sys.argv[1:])
