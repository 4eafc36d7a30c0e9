"""The package's shape, kept by tests: layers that point one way, small functions, light entry points.

Every way one module can reach another is read from the source (at module level or inside a function,
so lazy imports count as much as top-level ones): `import autotrain.x`, `from autotrain.x import y`,
`from autotrain import x`, relative imports (`from . import x`, `from ..config import y`),
`importlib.import_module("autotrain.x")` / `import_module(".x", "autotrain")` / `__import__("autotrain.x")`,
and strings that name a module of the package (`python -m autotrain.cli.main`, a table's "module:function").
An import whose target is not written out (`import_module(name)`) is allowed only where DYNAMIC_IMPORTS
says why. `test_each_import_form_is_caught` feeds crafted sources with each form through the same reader.
"""

from __future__ import annotations

import ast
import re
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
# References against the layers that are not imports: a string naming a module above. They pass only as
# strings (an import statement in these files is checked like any other), and each must still be there.
ALLOWED_STRINGS = {
    ("run/launch.py", "cli"): "each rank of a multi-process run is a child `python -m autotrain.cli.main`",
    ("app/runs.py", "cli"): "each run the app starts is a child `python -m autotrain.cli.main`, as from a shell",
    ("app/export_api.py", "cli"): "each export the app starts is a child `python -m autotrain.cli.main export`",
    ("config/trainers.py", "trainers"): "the trainer table names each builder; autotrain.trainers imports it",
    ("config/tasks.py", "trainers"): "the task table names each builder; autotrain.trainers imports it",
    ("config/tasks.py", "inference"): "the task table names each inference module; autotrain.inference imports it",
}
# Imports whose target is computed: where, and why the target stays in bounds.
DYNAMIC_IMPORTS = {
    "optimizers/__init__.py": "lazy exports, each named by a string in the same module (checked as strings)",
    "optimizers/table.py": "bundled optimizer classes, named by the table's strings (checked as strings)",
    "trainers/__init__.py": "the trainer and task tables' builders; each is refused outside autotrain.trainers",
    "config/tasks.py": "the task table's schemas; schema_of refuses one outside autotrain.config",
    "inference/tasks.py": "the task table's inference modules; task_module refuses one outside autotrain.inference",
    "trainers/llm/rewards.py": "a user's own reward function (`module:function` in the config)",
}
_EXEMPT = {("string", key) for key in ALLOWED_STRINGS}
MODULE_STRING = re.compile(r"\bautotrain(?:\.\w+)+")
DYNAMIC = "<computed>"


def _units(root: Path) -> set[str]:
    return {
        p.name.removesuffix(".py")
        for p in root.iterdir()
        if (p.is_dir() and (p / "__init__.py").is_file()) or (p.suffix == ".py" and p.name != "__init__.py")
    }


UNITS = _units(PACKAGE)


def _unit(path: Path, root: Path = PACKAGE) -> str:
    """The top-level package (or module) of a file: autotrain/run/launch.py -> run."""
    return path.relative_to(root).parts[0].removesuffix(".py")


def _target(dotted: str, names: tuple[str, ...] = ()) -> list[str]:
    """The units `autotrain.<unit>...` reaches; `from autotrain import a, b` reaches a and b."""
    parts = dotted.split(".")
    if parts[0] != "autotrain":
        return []
    if len(parts) > 1:
        return [parts[1]]
    return [n for n in names if n in UNITS]  # other names of the root package (__version__) are harmless


def _absolute(module: str | None, level: int, package: list[str]) -> str:
    """`from ..config import x` inside autotrain/run/ -> autotrain.config."""
    if level == 0:
        return module or ""
    base = package[: len(package) - (level - 1)]
    return ".".join([*base, *([module] if module else [])])


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
    }


def _literal(node: ast.AST):
    return node.value if isinstance(node, ast.Constant) else DYNAMIC


def _call_import_name(node: ast.AST) -> str | None:
    """`import_module` or `__import__` when `node` calls one of them (as a name or an attribute)."""
    if not isinstance(node, ast.Call):
        return None
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
    return name if name in ("import_module", "__import__") else None


def _call_import(node: ast.Call, package: list[str]) -> list[str] | None:
    """Targets of `import_module(...)` / `__import__(...)`; [DYNAMIC] when not written out; None if no import."""
    name = _call_import_name(node)
    if name is None:
        return None
    args = [_literal(a) for a in node.args]
    kwargs = {k.arg: _literal(k.value) for k in node.keywords}
    first = args[0] if args else kwargs.get("name", DYNAMIC)
    if not isinstance(first, str) or first == DYNAMIC:
        return [DYNAMIC]
    if name == "import_module" and first.startswith("."):
        anchor = args[1] if len(args) > 1 else kwargs.get("package", DYNAMIC)
        if not isinstance(anchor, str) or anchor == DYNAMIC:
            return [DYNAMIC]
        level = len(first) - len(first.lstrip("."))
        return _target(_absolute(first.lstrip(".") or None, level, anchor.split(".")))
    level = args[4] if len(args) > 4 else kwargs.get("level", 0)
    if not isinstance(level, int):
        return [DYNAMIC]
    return _target(_absolute(first, level, package))


def _edges(path: Path, root: Path = PACKAGE) -> list[tuple[int, str, str]]:
    """(line, unit reached, form) for every reference of `path` to a unit of the package."""
    package = ["autotrain", *path.relative_to(root).parent.parts]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)  # prose, and the arguments of import calls (read as imports)
    skip |= {id(a) for n in ast.walk(tree) if _call_import_name(n) for a in [*n.args, *(k.value for k in n.keywords)]}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, t, "import") for alias in node.names for t in _target(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            targets = _target(_absolute(node.module, node.level, package), tuple(a.name for a in node.names))
            found += [(node.lineno, t, "relative import" if node.level else "from import") for t in targets]
        elif isinstance(node, ast.Call) and (targets := _call_import(node, package)) is not None:
            found += [(node.lineno, t, "computed import" if t == DYNAMIC else "import call") for t in targets]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            for dotted in MODULE_STRING.findall(node.value):
                found += [(node.lineno, t, "string") for t in _target(dotted) if t in UNITS]
    return found


def _layer(unit: str) -> int:
    for depth, members in enumerate(LAYERS):
        if unit in members:
            return depth
    raise AssertionError(f"autotrain/{unit} is in no layer of tests/test_architecture.py: place it")


def _violations(root: Path = PACKAGE) -> list[str]:
    """Every reference against the layers, and every computed import outside DYNAMIC_IMPORTS."""
    wrong = []
    for path in sorted(p for p in root.rglob("*.py") if p.name != "__init__.py" or p.parent != root):
        unit, rel = _unit(path, root), path.relative_to(root).as_posix()
        for line, target, form in _edges(path, root):
            where = f"{rel}:{line}: {unit} reaches {target} ({form})"
            if target == DYNAMIC:
                allowed = rel in DYNAMIC_IMPORTS
            else:
                allowed = target == unit or _layer(target) > _layer(unit) or (form, (rel, target)) in _EXEMPT
            if not allowed:
                wrong.append(where)
    return wrong


SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE)


def test_every_import_points_down():
    wrong = _violations()
    assert not wrong, "references against the layers:\n" + "\n".join(wrong)


def test_the_allowed_exceptions_are_still_needed():
    """Each named exception is still used, so a stale one cannot hide a new reference."""
    for rel, target in ALLOWED_STRINGS:
        assert (target, "string") in {(t, f) for _, t, f in _edges(PACKAGE / rel)}, (rel, target)
    for rel in DYNAMIC_IMPORTS:
        assert any(t == DYNAMIC for _, t, _ in _edges(PACKAGE / rel)), rel


def test_the_bottom_imports_nothing_of_autotrain():
    for name in ("errors.py", "fields.py"):
        assert _edges(PACKAGE / name) == [], name


# Each form of an upward reference, as it would appear in autotrain/training/probe.py (training is below run).
UPWARD_FORMS = {
    "import": "import autotrain.run.runner\n",
    "from-import": "from autotrain.run.runner import run\n",
    "from-root-import": "from autotrain import run\n",
    "lazy-import": "def f():\n    from autotrain.run import runner\n",
    "relative-package": "from .. import run\n",
    "relative-module": "from ..run.runner import run\n",
    "relative-subpackage": "from ..run import runner\n",
    "import_module": "import importlib\nimportlib.import_module('autotrain.run.runner')\n",
    "import_module-relative": "from importlib import import_module\nimport_module('.runner', 'autotrain.run')\n",
    "import_module-keyword": "import importlib\nimportlib.import_module(name='autotrain.run')\n",
    "__import__": "__import__('autotrain.run.runner')\n",
    "__import__-relative": "__import__('run.runner', globals(), locals(), [], 2)\n",
    "child-process": "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'autotrain.run.runner'])\n",
    "python-c": "import subprocess\nsubprocess.run(['python', '-c', 'import autotrain.run.runner'])\n",
    "computed-import": "import importlib\nNAME = 'runner'\nimportlib.import_module(NAME)\n",
}


def _probe(tmp_path: Path, source: str, where: str = "training/probe.py") -> list[str]:
    """The violations the checks find in a copy of the package's layout holding one crafted module."""
    root = tmp_path / "autotrain"
    for unit in UNITS:
        (root / unit).mkdir(parents=True, exist_ok=True)
        (root / unit / "__init__.py").write_text("")
    probe = root / where
    probe.parent.mkdir(parents=True, exist_ok=True)
    probe.write_text(source, encoding="utf-8")
    return _violations(root)


@pytest.mark.parametrize("form", list(UPWARD_FORMS))
def test_each_import_form_is_caught(tmp_path, form):
    found = _probe(tmp_path, UPWARD_FORMS[form])
    assert len(found) == 1 and found[0].startswith("training/probe.py:"), found


def test_downward_and_sibling_references_pass(tmp_path):
    source = (
        "from ..config import llm\n"
        "from . import plan\n"
        "from autotrain import errors, __version__\n"
        "import importlib\n"
        "importlib.import_module('autotrain.optimizers.came')\n"
        "def f():\n"
        '    """A docstring may name autotrain.run.runner."""\n'
    )
    assert _probe(tmp_path, source) == []


def test_an_allowed_exception_covers_its_string_only(tmp_path):
    """run/launch.py may name `autotrain.cli.main` for the ranks it starts, but not import the CLI."""
    assert _probe(tmp_path, "RANK_ENTRY = ('-m', 'autotrain.cli.main')\n", "run/launch.py") == []
    assert len(_probe(tmp_path, "from autotrain.cli import main\n", "run/launch.py")) == 1
    assert len(_probe(tmp_path, "from ..cli import main\n", "run/launch.py")) == 1


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_functions_are_small(path):
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"split these: {long}"
