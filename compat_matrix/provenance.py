"""Which code a run ran: the commit and its uncommitted changes, as the reports
record them (`code_version`), and a fingerprint of the files a run executes,
to tell whether they changed during the run (`code_fingerprint`)."""

from __future__ import annotations

import contextlib
import hashlib
import subprocess

from compat_matrix.cells import REPO


def code_version() -> str:
    """The commit checked out, and which tracked files of gateway/ and
    compat_matrix/ differ from it (untracked files and REPORT.md aside)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                "gateway",
                "compat_matrix",
                ":!compat_matrix/REPORT.md",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    changed = sorted(line[3:] for line in dirty if line.strip())
    if not changed:
        return f"commit `{head}`, no uncommitted changes in gateway/ or compat_matrix/"
    return f"commit `{head}` with uncommitted changes to {', '.join(changed)}"


def code_fingerprint() -> str | None:
    """A hash of the files a run executes (gateway/, the peers, run.py and the
    modules beside it) as they are on disk: equal at the start and the end of a
    run iff nobody changed them in between. None without git."""
    try:
        listed = subprocess.run(
            [
                "git",
                "ls-files",
                "-z",
                "--",
                "gateway",
                "compat_matrix/peers",
                ":(glob)compat_matrix/*.py",
            ],
            cwd=REPO,
            capture_output=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    digest = hashlib.sha256()
    for name in sorted(n for n in listed.decode().split("\0") if n):
        digest.update(name.encode() + b"\0")
        with contextlib.suppress(OSError):
            digest.update((REPO / name).read_bytes())
    return digest.hexdigest()
