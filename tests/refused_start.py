"""What a refused start looks like, as the operator sees it: exit 2, nothing
on stdout, exactly one stderr line naming the problem, never a traceback.
From tests/test_misconfiguration.py."""

from __future__ import annotations

import subprocess


def assert_refused(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit 2, nothing on stdout, exactly one stderr line naming the problem."""
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]
