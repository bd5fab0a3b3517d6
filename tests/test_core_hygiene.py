"""The privacy core keeps its promises by construction (STYLE: one source of randomness, no
floats in output-defining arithmetic, no I/O).  These checks read the source, so a later edit
that breaks a promise fails here rather than in a review."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).parents[1] / "src" / "postcode_privacy" / "mechanism"
OUTPUT_DEFINING = ["powers.py", "stream.py", "sampler.py", "radius.py", "subject.py"]
IO_MODULES = {"os", "pathlib", "io", "shutil", "tempfile", "socket", "urllib", "requests"}


def _tree(name: str) -> ast.AST:
    return ast.parse((CORE / name).read_text(encoding="utf-8"))


# What the core may import from the rest of the package (relative imports): typed errors, the
# version, and the pure graph structure it samples over.  Nothing that reads or writes files.
CORE_MAY_IMPORT = {"errors", "version", "graph.graph", "graph.shells"}


def _imports(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _package_imports(tree: ast.AST) -> set[str]:
    """Modules of this package imported from outside the core (``from ..x import``), by path."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level >= 2:
            found.add(node.module or "")
    return found


@pytest.mark.parametrize("name", sorted(p.name for p in CORE.glob("*.py")))
def test_core_does_no_io_and_draws_no_ambient_randomness(name):
    tree = _tree(name)
    imported = _imports(tree)
    assert not imported & IO_MODULES, name
    assert "random" not in imported, name
    if name != "keys.py":  # key generation is the one place the OS CSPRNG is read
        assert "secrets" not in imported, name
    calls = {
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    assert "open" not in calls, name
    # Also imports inside functions and relative ones: the core cannot reach I/O through the
    # rest of the package (a key method delegating to the key-file module once did).
    assert _package_imports(tree) <= CORE_MAY_IMPORT, (name, _package_imports(tree))


def test_relative_import_check_sees_imports_inside_functions():
    tree = ast.parse("def f():\n    from ..keyfile import read_key_file\n")
    assert _package_imports(tree) == {"keyfile"}


@pytest.mark.parametrize("name", OUTPUT_DEFINING)
def test_output_defining_arithmetic_has_no_floats(name):
    tree = _tree(name)
    floats = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, float)
    ]
    assert floats == [], name
    calls = {
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    assert "float" not in calls or name == "subject.py", name  # subject.py only inspects inputs
    assert "math" not in _imports(tree) or name == "subject.py", name


# The package's layers, lowest first (CONTRIBUTING.md, "Layout"): a module may import from its
# own layer and the ones before it, never from a later one, so that a record can be followed
# from input file to output file without going back up.  Top-level modules (errors, _limits,
# atomic ...) are shared by every layer.
LAYERS = [
    "sources",
    "graph",
    "mechanism",
    "engine",
    "evaluate",
    "release",
    "ledger",
    "report",
    "spark",
    "commands",
]
PACKAGE = CORE.parent


def _layer_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module path inside the package) of every relative import in ``path``."""
    here = list(path.relative_to(PACKAGE).parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            base = here[: len(here) - (node.level - 1)]
            found.append((node.lineno, ".".join(base + ([node.module] if node.module else []))))
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_no_layer_imports_from_a_later_one(layer):
    later = LAYERS[LAYERS.index(layer) + 1 :]
    wrong = [
        f"{path.relative_to(PACKAGE)}:{line} imports {module}"
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for line, module in _layer_imports(path)
        if module.split(".")[0] in later
    ]
    assert not wrong, wrong


def test_the_shared_bounds_agree_with_the_core():
    from postcode_privacy import _limits
    from postcode_privacy.mechanism.powers import MAX_RADIUS

    assert _limits.MAX_HOPS == MAX_RADIUS
