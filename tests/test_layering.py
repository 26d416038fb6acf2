"""DESIGN §3: the protocol layers do no I/O — they import neither anyio nor
structlog, nor any socket, subprocess or clock module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PURE = ["wire.py", "era.py", "translate.py", "core"]
FORBIDDEN = {
    "anyio",
    "structlog",
    "asyncio",
    "socket",
    "subprocess",
    "time",
    "os",
    "select",
    "gateway.runtime",
    "gateway.fronts",
    "gateway.backs",
}
ROOT = Path(__file__).resolve().parent.parent / "gateway"


def _files() -> list[Path]:
    out: list[Path] = []
    for name in PURE:
        path = ROOT / name
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_layer_imports(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            hit = [f for f in FORBIDDEN if name == f or name.startswith(f + ".")]
            assert not hit, f"{path.name} imports {name}"
