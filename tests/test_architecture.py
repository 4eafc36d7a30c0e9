"""The package's shape, kept by tests: layers that point one way, small functions, light entry points.

Imports are read from the source (every `import` and `from ... import`, at module level or inside a
function), so lazy imports count as much as top-level ones.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "autotrain"

# Top to bottom. A module may import from its own layer's package or any layer below, never above.
# Packages sharing a layer do not import each other.
LAYERS: list[set[str]] = [
    {"cli"},
    {"app"},
    {"run", "inference"},
    {"export"},
    {"trainers"},
    {"data", "training"},
    {"config"},
    {"optimizers"},
    {"errors", "fields"},
]
MAX_FUNCTION_LINES = 70


def _unit(path: Path) -> str:
    """The top-level package (or module) of a file: autotrain/run/launch.py -> run."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found += [(node.lineno, n.split(".")[1]) for n in names if n.startswith("autotrain.") and n.count(".") >= 1]
    return found


def _layer(unit: str) -> int:
    for depth, members in enumerate(LAYERS):
        if unit in members:
            return depth
    raise AssertionError(f"autotrain/{unit} is in no layer of tests/test_architecture.py: place it")


SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE)


def test_every_import_points_down():
    wrong = []
    for path in SOURCES:
        unit = _unit(path)
        for line, target in _imports(path):
            if target == unit:
                continue
            if _layer(target) <= _layer(unit):
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {unit} imports {target}")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_the_bottom_imports_nothing_of_autotrain():
    for name in ("errors.py", "fields.py"):
        assert _imports(PACKAGE / name) == [], name


def test_the_contract_would_catch_a_cycle(tmp_path):
    """The check above is not vacuous: an upward import in a module is reported."""
    fake = tmp_path / "training.py"
    fake.write_text("def f():\n    from autotrain.run.runner import run\n", encoding="utf-8")
    assert _imports(fake) == [(2, "run")]
    assert _layer("run") < _layer("training")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_functions_are_small(path):
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"split these: {long}"
