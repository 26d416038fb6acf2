"""No module imports a test module: what test modules share lives in a support
module under tests/ named for what it holds (tests/scripted.py,
tests/http_gateway_process.py, tests/fuzz_requests.py, ...), so that a test
module can be run, changed, moved or deleted without touching another.
Imports are read with `ast`: `import tests.test_x`, `from tests.test_x import
y`, `from tests import test_x` and relative imports all count."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TREES = ("tests", "compat_matrix", "bench")


def _is_test_module(name: str) -> bool:
    """`tests.test_x`, or a name under it."""
    parts = name.split(".")
    return len(parts) >= 2 and parts[0] == "tests" and parts[1].startswith("test_")


def _imported(node: ast.Import | ast.ImportFrom, package: list[str]) -> list[str]:
    """The modules `node` may import, absolute; for `from a import b`, both a
    and a.b (b may be a module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = package[: len(package) - node.level + 1] if node.level else []
    module = ".".join([*base, *(node.module.split(".") if node.module else [])])
    return [module, *(f"{module}.{alias.name}" for alias in node.names)]


def _test_module_imports(path: Path) -> list[str]:
    """Each import of a test module in `path`, as `file:line: the statement`."""
    rel = path.relative_to(REPO)
    package = list(rel.parent.parts)
    return [
        f"{rel}:{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Import | ast.ImportFrom)
        and any(_is_test_module(name) for name in _imported(node, package))
    ]


def test_no_module_imports_a_test_module() -> None:
    paths = sorted(p for tree in TREES for p in (REPO / tree).rglob("*.py"))
    assert REPO / "tests" / "conftest.py" in paths  # the tree was found
    offending = [hit for path in paths for hit in _test_module_imports(path)]
    assert not offending, (
        "test modules imported (move what they share into a support module under tests/):\n"
        + "\n".join(offending)
    )
