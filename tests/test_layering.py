"""DESIGN §3: the protocol layers do no I/O — they import neither anyio nor
structlog, nor any socket, subprocess or clock module — and issue #11 item 5:
"test_layering.py grows to enforce the shape: protocol words (`resultType`,
`inputResponses`, `requestState`, `io.modelcontextprotocol/…`) only in the
pure layers; no fronts module imports the runtime; nothing under `core/`
imports anyio, time, uuid or os"."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "gateway"

# The layers that decide what the protocol means, and do no I/O; the HTTP
# back's wire mapping (what each answer of a server means) too.
PURE = [
    "wire.py",
    "era.py",
    "translate.py",
    "inbound.py",
    "upstream_errors.py",
    "core",
    "backs/http_wire.py",
]
FORBIDDEN = {
    "anyio",
    "structlog",
    "asyncio",
    "socket",
    "subprocess",
    "time",
    "os",
    "select",
    # Ids and randomness are injected into the pure layers, never drawn there.
    "uuid",
    "secrets",
    "random",
    "gateway.runtime",
    "gateway.fronts",
    "gateway.backs",
}
# Imports a pure module still makes while another part of issue #11 reworks
# it; each entry goes when that work lands.
FORBIDDEN_YET_IMPORTED: dict[str, set[str]] = {}

# Where the protocol's own field names and _meta keys may be spelled out: only
# the pure layers decide what they mean.
PROTOCOL_WORDS = ("resultType", "inputResponses", "requestState", "io.modelcontextprotocol/")
PROTOCOL_LAYERS = ["wire.py", "era.py", "translate.py", "inbound.py", "core"]
# Modules outside them that still spell some out, and which: each entry goes
# when its rule moves into the pure layers (another part of issue #11 does
# that; a word not listed here is a new leak and fails).
PROTOCOL_WORDS_YET_USED = {
    # The re-run states (replay mode, the -32042 re-send) still live in the
    # runtime's MRTR bridge: a warning names the requestState key to set.
    "runtime/mrtr_bridge.py": {"requestState"},
    # Prose for a person (the demo's explanation), not a rule.
    "demo.py": {"resultType"},
}


def _in(rel: str, layers: list[str]) -> bool:
    return any(rel == layer or rel.startswith(layer + "/") for layer in layers)


def _modules(layers: list[str]) -> list[Path]:
    out: list[Path] = []
    for name in layers:
        path = ROOT / name
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, `from a import b` counted as both a and a.b
    (b may be a module), type-checking-only imports included."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def _matches(name: str, forbidden: set[str]) -> set[str]:
    return {f for f in forbidden if name == f or name.startswith(f + ".")}


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """The string literals of a module, docstrings excepted (prose, like comments)."""
    tree = ast.parse(path.read_text())
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


@pytest.mark.parametrize("path", _modules(PURE), ids=_rel)
def test_pure_layer_imports(path: Path) -> None:
    """DESIGN §3; issue #11: nothing under core/ imports anyio, time, uuid or os."""
    allowed = FORBIDDEN_YET_IMPORTED.get(_rel(path), set())
    for name in sorted(_imports(path)):
        hit = _matches(name, FORBIDDEN) - allowed
        assert not hit, f"{_rel(path)} imports {name}"


@pytest.mark.parametrize("path", sorted((ROOT / "fronts").rglob("*.py")), ids=_rel)
def test_fronts_do_not_import_the_runtime(path: Path) -> None:
    """Issue #11: "the fronts depend on a small protocol the runtime implements
    (no fronts <-> runtime cycle)" — gateway.fronts.port."""
    for name in sorted(_imports(path)):
        assert not _matches(name, {"gateway.runtime"}), f"{_rel(path)} imports {name}"


def _outside_protocol_layers() -> list[Path]:
    return [p for p in sorted(ROOT.rglob("*.py")) if not _in(_rel(p), PROTOCOL_LAYERS)]


@pytest.mark.parametrize("path", _outside_protocol_layers(), ids=_rel)
def test_protocol_words_stay_in_the_pure_layers(path: Path) -> None:
    """Issue #11: "protocol words (`resultType`, `inputResponses`,
    `requestState`, `io.modelcontextprotocol/…`) only in the pure layers"."""
    allowed = PROTOCOL_WORDS_YET_USED.get(_rel(path), set())
    leaks = sorted(
        f"{word!r} on line {line}"
        for line, text in _code_strings(path)
        for word in PROTOCOL_WORDS
        if word in text and word not in allowed
    )
    assert not leaks, f"{_rel(path)} spells out protocol words: {', '.join(leaks)}"


def test_the_allowances_name_real_modules() -> None:
    """An allowance for a module that is gone or renamed would hide nothing
    and mislead: each names a file that exists."""
    for rel in [*FORBIDDEN_YET_IMPORTED, *PROTOCOL_WORDS_YET_USED]:
        assert (ROOT / rel).is_file(), rel


# -- docs/design.md's layer diagram, checked against the imports -----------------------

DESIGN = ROOT.parent / "docs" / "design.md"
# Package plumbing, in no layer: `python -m gateway` and the package marker.
PLUMBING = {"__init__.py", "__main__.py"}
_NAME = re.compile(r"[a-z_]+(\.py|/)")


def _diagram() -> dict[str, int]:
    """Each module or package of the diagram in DESIGN §3, by its depth (its
    line's indentation): a line's names run until the first word that is not one."""
    text = DESIGN.read_text()
    section = text[text.index("## 3. Layers") :]
    block = section[section.index("```\n") + 4 :]
    block = block[: block.index("```")]
    depths: dict[str, int] = {}
    for line in block.splitlines():
        depth = len(line) - len(line.lstrip(" "))
        for word in line.split():
            name = word.rstrip(",")
            if not _NAME.fullmatch(name):
                break
            assert name not in depths, f"{name} is on two lines of the diagram"
            depths[name] = depth
    return depths


def _unit(path: Path) -> str:
    """What the diagram calls the module: a package by its directory."""
    rel = _rel(path)
    return rel.split("/")[0] + "/" if "/" in rel else rel


def _unit_of_import(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] != "gateway" or len(parts) == 1:
        return None
    target = ROOT.joinpath(*parts[1:])
    if (ROOT / parts[1]).is_dir():
        return parts[1] + "/"
    if target.with_suffix(".py").is_file() and len(parts) == 2:
        return parts[1] + ".py"
    return None  # `from gateway.x import name`: x is counted on its own


def test_the_layer_diagram_names_every_module_once() -> None:
    depths = _diagram()
    units = {_unit(p) for p in ROOT.rglob("*.py")} - PLUMBING
    assert sorted(units - set(depths)) == [], "modules the diagram leaves out"
    assert sorted(set(depths) - units) == [], "names in the diagram that are no module"


def test_every_import_points_down_the_layer_diagram() -> None:
    """DESIGN §3: "Dependencies point down only": every import in gateway/
    goes to a line below the importer's own, never beside or above it."""
    depths = _diagram()
    wrong: set[str] = set()
    for path in sorted(ROOT.rglob("*.py")):
        unit = _unit(path)
        if unit in PLUMBING:
            continue
        for name in _imports(path):
            target = _unit_of_import(name)
            if target is None or target == unit or target in PLUMBING:
                continue
            if depths[target] <= depths[unit]:
                wrong.add(f"{_rel(path)} imports {name} ({target} is not below {unit})")
    assert not wrong, "\n".join(sorted(wrong))
