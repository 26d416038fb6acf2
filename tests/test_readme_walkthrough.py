"""A new user's first hour, followed literally from the README (issue 14,
"Evidence": "A fresh-clone walk-through script in `tests/` ... that follows the
README's set-up steps literally in a temporary venv — install, demo, probe, the
desktop snippet with a real SDK client, the sidecar with a real SDK client —
and fails if any README command fails or its printed output drifts from what
the README shows").

The README marks the blocks to run with `<!-- walkthrough: NAME -->` just
before them (docs/development.md, "The README walk-through", says how each is
run and how printed output is compared). They run in a copy of the tracked
files with a venv of its own, made once for the module.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from compat_matrix.environment import INSTALL_HINT, peers_dir

pytestmark = pytest.mark.peers

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
CLIENT = REPO / "tests" / "servers" / "py1_readme_client.py"
MARKED = re.compile(r"<!-- walkthrough: ([\w-]+) -->\n```[\w-]*\n(.*?)\n```", re.DOTALL)
INSTALL_BOUND = 600  # seconds: a venv and `pip install .` take 20-40 s here
STEP_BOUND = 120


def marked_blocks(text: str) -> dict[str, str]:
    blocks: dict[str, str] = {}
    for name, body in MARKED.findall(text):
        assert name not in blocks, f"two README blocks are marked {name!r}"
        blocks[name] = body
    return blocks


BLOCKS = marked_blocks(README.read_text(encoding="utf-8"))


def shown_pattern(shown: str) -> re.Pattern[str]:
    """What a README output block allows: `…` any text, a run of white space
    any white space (or none), everything else exactly."""
    parts: list[str] = []
    for token in re.split(r"(…|\s+)", shown.strip()):
        if token == "…":
            parts.append(".*?")
        elif token.isspace():
            parts.append(r"\s*")
        elif token:
            parts.append(re.escape(token))
    return re.compile("".join(parts), re.DOTALL)


def console_steps(block: str) -> list[tuple[str, str]]:
    """(command, what it prints) for each `$ ` line of a console block."""
    steps: list[tuple[str, str]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], ""))
        else:
            assert steps, f"output before any command: {line!r}"
            command, shown = steps[-1]
            steps[-1] = (command, f"{shown}{line}\n")
    return steps


def test_the_comparison_rules() -> None:
    """The rules docs/development.md states for comparing printed output."""
    pattern = shown_pattern('{\n  "era": "legacy",\n  …\n  "elapsedMs": …\n}')
    assert pattern.fullmatch('{\n "era": "legacy", "x": [1,\n 2],\n  "elapsedMs": 36.0\n}')
    assert not pattern.fullmatch('{\n  "era": "modern",\n  "elapsedMs": 3\n}')
    assert not pattern.fullmatch('{\n  "era": "legacy",\n  "elapsedMs": 3\n}\nmore')


@dataclass
class Checkout:
    """A copy of the tracked files, set up as the README's install block says."""

    root: Path
    venv_bin: Path
    installed: subprocess.CompletedProcess[str]

    def env(self, *, path_first: bool = True) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        if path_first:
            env["PATH"] = f"{self.venv_bin}{os.pathsep}{env.get('PATH', '')}"
        return env

    def shell(self, command: str, timeout: float = STEP_BOUND) -> subprocess.CompletedProcess[str]:
        """`command` in bash, in the checkout, with the venv activated."""
        script = f". .venv/bin/activate\n{command}"
        return run_bash(script, self.root, self.env(path_first=False), timeout)


def run_bash(
    script: str, cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def copy_tracked_files(into: Path) -> None:
    """What a clone has: the tracked files (as they are in this working tree,
    so an uncommitted README is what gets checked), nothing else."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_symlink() or not source.is_file():
            continue
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def failed(step: str, done: subprocess.CompletedProcess[str]) -> str:
    output = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return f"README {step} failed ({done.returncode}):\n{output}"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Checkout:
    """Issue 14: "install" — the README's install block, line by line in one
    bash, in a fresh copy (its `git clone` line is the copy)."""
    root = tmp_path_factory.mktemp("clone") / "mcp-era-gateway"
    copy_tracked_files(root)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    done = run_bash(BLOCKS["install"], root, env, INSTALL_BOUND)
    assert done.returncode == 0, failed("install", done)
    venv_bin = root / ".venv" / "bin"
    assert (venv_bin / "mcp-era-gateway").exists(), "the install block made no .venv"
    return Checkout(root, venv_bin, done)


def check_console_block(checkout: Checkout, name: str) -> None:
    for command, shown in console_steps(BLOCKS[name]):
        done = checkout.shell(command)
        assert done.returncode == 0, failed(f"{name} `{command}`", done)
        assert shown_pattern(shown).fullmatch(done.stdout.strip()), (
            f"README {name}: `{command}` printed\n{done.stdout}\nwhich drifted from what the "
            f"README shows:\n{shown}"
        )


def test_install_runs_the_demo(checkout: Checkout) -> None:
    """The install block's own `mcp-era-gateway demo` printed the demo."""
    assert "Done: the modern client used a legacy server" in checkout.installed.stdout


def test_demo_prints_what_the_readme_shows(checkout: Checkout) -> None:
    """Issue 14: "demo" — its printed output as the README shows it."""
    check_console_block(checkout, "demo")


def test_probe_prints_what_the_readme_shows(checkout: Checkout) -> None:
    """Issue 14: "probe" — against the bundled server, as the README shows."""
    check_console_block(checkout, "probe")


def py1_client(checkout: Checkout, *target: str) -> dict[str, Any]:
    """The real mcp 1.30 client (tests/servers/py1_readme_client.py) on
    `target`, with the venv's bin on its PATH, as a client started from a
    shell where the venv is active."""
    python = peers_dir() / "py1" / "bin" / "python"
    if not python.exists():
        # Real peers are never skipped (peers/README): a missing one fails the run.
        pytest.fail(f"the mcp 1.30 client is not installed at {python}: {INSTALL_HINT}")
    done = subprocess.run(
        [str(python), str(CLIENT), "--", *target],
        cwd=checkout.root,
        env=checkout.env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=STEP_BOUND,
        check=False,
    )
    assert done.returncode == 0, failed(f"client on {target}", done)
    outcome: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return outcome


def assert_notes_served(outcome: dict[str, Any]) -> None:
    assert outcome["serverInfo"] == "notes-example"
    assert outcome["tools"] == ["add_note", "search_notes"]
    assert outcome["errors"] == [False, False]
    assert outcome["found"] == ["hour: first hour"]


def test_desktop_snippet_with_a_real_client(checkout: Checkout) -> None:
    """Issue 14: "the desktop snippet with a real SDK client" — the snippet's
    `notes` command and args exactly, launched by the mcp 1.30 stdio client."""
    notes = json.loads(BLOCKS["desktop"])["mcpServers"]["notes"]
    command = shutil.which(notes["command"], path=checkout.env()["PATH"])
    assert command == str(checkout.venv_bin / "mcp-era-gateway")
    assert_notes_served(py1_client(checkout, command, *notes["args"]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_ready(url: str, sidecar: subprocess.Popen[str]) -> None:
    """Until /readyz says 200: polled, since readiness is only visible there;
    bounded by STEP_BOUND."""
    for _ in range(STEP_BOUND * 10):
        assert sidecar.poll() is None, f"the sidecar exited: {sidecar.communicate()}"
        try:
            with urllib.request.urlopen(url, timeout=1) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        try:
            sidecar.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            continue
    pytest.fail(f"{url} never said ready")


@pytest.fixture
def sidecar(checkout: Checkout) -> Iterator[str]:
    """The README's sidecar command, on a free port instead of 8080."""
    (command,) = BLOCKS["sidecar"].splitlines()
    port = free_port()
    assert "127.0.0.1:8080" in command
    command = command.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    process = subprocess.Popen(
        ["bash", "-c", f". .venv/bin/activate\nexec {command}"],
        cwd=checkout.root,
        env=checkout.env(path_first=False),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}/readyz", process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.communicate(timeout=STEP_BOUND)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def test_sidecar_with_a_real_client(checkout: Checkout, sidecar: str) -> None:
    """Issue 14: "the sidecar with a real SDK client" — mcp 1.30's
    streamablehttp_client against the README's `--listen` command."""
    assert_notes_served(py1_client(checkout, sidecar))
