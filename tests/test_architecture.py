"""The package's shape, kept by tests: layers that point one way, small functions, light entry points.

Every way one module can reach another is read from the source (at module level or inside a function,
so lazy imports count as much as top-level ones): `import autotrain.x`, `from autotrain.x import y`,
`from autotrain import x`, relative imports (`from . import x`, `from ..config import y`),
`importlib.import_module("autotrain.x")` / `import_module(".x", "autotrain")` / `__import__("autotrain.x")`,
and strings that name a module of the package (`python -m autotrain.cli.main`, a table's "module:function").
An import whose target is not written out (`import_module(name)`) is allowed only where DYNAMIC_IMPORTS
says why. `test_each_import_form_is_caught` feeds crafted sources with each form through the same reader.

Inside a layer the same holds file by file: no file imports one that imports it back, directly or through
others (imports only here, lazy ones included; strings name child programs and table entries). A ring is
allowed only where ALLOWED_CYCLE_IMPORTS names the import that closes it and why.
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
    {"run"},
    {"export"},  # its parity check predicts with the exported model as `autotrain predict` does
    {"inference"},
    {"trainers"},
    {"data", "training"},
    {"config"},
    {"optimizers"},
    # compat: the one module per library that holds its private names (autotrain/compat/__init__.py); at
    # the bottom, so that every layer that needs one may import it
    {"errors", "fields", "hints", "compat"},
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
# Imports from one file to another that close a cycle between files (an import statement, lazy or not, or an
# import call with its target written out): the importing file and the imported one, and why. Each must
# still be there.
ALLOWED_CYCLE_IMPORTS: dict[tuple[str, str], str] = {}
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


def _call_import_module(node: ast.Call, package: list[str]) -> str | None:
    """The dotted module `import_module(...)` / `__import__(...)` names; DYNAMIC when not written out; None
    when `node` is no import call."""
    name = _call_import_name(node)
    if name is None:
        return None
    args = [_literal(a) for a in node.args]
    kwargs = {k.arg: _literal(k.value) for k in node.keywords}
    first = args[0] if args else kwargs.get("name", DYNAMIC)
    if not isinstance(first, str) or first == DYNAMIC:
        return DYNAMIC
    if name == "import_module" and first.startswith("."):
        anchor = args[1] if len(args) > 1 else kwargs.get("package", DYNAMIC)
        if not isinstance(anchor, str) or anchor == DYNAMIC:
            return DYNAMIC
        level = len(first) - len(first.lstrip("."))
        return _absolute(first.lstrip(".") or None, level, anchor.split("."))
    level = args[4] if len(args) > 4 else kwargs.get("level", 0)
    if not isinstance(level, int):
        return DYNAMIC
    return _absolute(first, level, package)


def _call_import(node: ast.Call, package: list[str]) -> list[str] | None:
    """Targets of `import_module(...)` / `__import__(...)`; [DYNAMIC] when not written out; None if no import."""
    module = _call_import_module(node, package)
    if module is None or module == DYNAMIC:
        return None if module is None else [DYNAMIC]
    return _target(module)


def _not_strings(tree: ast.AST) -> set[int]:
    """Constants not read as strings that name modules: prose (docstrings), and the arguments of import calls
    (read as imports)."""
    calls = [n for n in ast.walk(tree) if _call_import_name(n)]
    return _docstrings(tree) | {id(a) for n in calls for a in [*n.args, *(k.value for k in n.keywords)]}


def _edges(path: Path, root: Path = PACKAGE) -> list[tuple[int, str, str]]:
    """(line, unit reached, form) for every reference of `path` to a unit of the package."""
    package = ["autotrain", *path.relative_to(root).parent.parts]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _not_strings(tree)
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
    for path in [PACKAGE / "errors.py", PACKAGE / "fields.py", *sorted((PACKAGE / "compat").glob("*.py"))]:
        assert _edges(path) == [], path.name


def _file_of(dotted: str, root: Path = PACKAGE) -> str | None:
    """The file a module of the package lives in (autotrain.run.cluster -> run/cluster.py); a name inside a
    module (autotrain.run.cluster.render) -> that module's file; None outside the package."""
    parts = dotted.split(".")
    if parts[0] != "autotrain":
        return None
    for end in range(len(parts), 0, -1):
        folder = root.joinpath(*parts[1:end])
        for candidate in (folder.with_suffix(".py") if end > 1 else None, folder / "__init__.py"):
            if candidate is not None and candidate.is_file():
                return candidate.relative_to(root).as_posix()
    return None


def _file_imports(path: Path, root: Path = PACKAGE) -> list[tuple[int, str]]:
    """(line, file) for every file of the package that `path` imports. `from autotrain.run import cluster`
    reaches run/cluster.py; `from autotrain.run.cluster import render` too. Strings are left out: they name
    a child program or a table's entry, which runs nothing of this file's in the same process."""
    package = ["autotrain", *path.relative_to(root).parent.parts]
    found: list[tuple[int, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, _file_of(alias.name, root)) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, package)
            found += [(node.lineno, _file_of(f"{base}.{alias.name}", root)) for alias in node.names]
        elif isinstance(node, ast.Call) and (module := _call_import_module(node, package)) not in (None, DYNAMIC):
            found.append((node.lineno, _file_of(module, root)))
    here = path.relative_to(root).as_posix()
    return [(line, target) for line, target in found if target is not None and target != here]


def _file_cycles(root: Path = PACKAGE, allowed=ALLOWED_CYCLE_IMPORTS) -> list[str]:
    """Every group of files that import each other (in a ring of any length), with the imports that tie it,
    once the imports ALLOWED_CYCLE_IMPORTS names are left out."""
    graph: dict[str, dict[str, int]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        graph[rel] = {}
        for line, target in _file_imports(path, root):
            if (rel, target) not in allowed:
                graph[rel].setdefault(target, line)
    rings = []
    for group in _strongly_connected(graph):
        if len(group) > 1:
            ties = [f"{a}:{line} imports {b}" for a in sorted(group) for b, line in graph[a].items() if b in group]
            rings.append("; ".join(ties))
    return rings


def _strongly_connected(graph: dict[str, dict[str, int]]) -> list[set[str]]:
    """Tarjan's strongly connected components: the sets of nodes that each reach all the others."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = {stack.pop()}
            while node not in group:
                group.add(stack.pop())
            groups.append(group)

    for node in graph:
        if node not in index:
            visit(node)
    return groups


def test_no_two_files_import_each_other():
    """Within a package as between packages, imports point one way: no file imports one that imports it back
    (directly or through others), lazy imports included."""
    rings = _file_cycles()
    assert not rings, "files that import each other (move what they share into one of them, or below):\n" + "\n".join(
        rings
    )


def test_the_allowed_cycle_imports_are_still_there():
    for source, target in ALLOWED_CYCLE_IMPORTS:
        assert target in {t for _, t in _file_imports(PACKAGE / source)}, (source, target)


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


# Two or three files of run/ that import each other, in each form an import between files takes: the ring
# closes in b.py, and a.py and c.py import ahead.
RING_FORMS = {
    "from-import": "from autotrain.run.a import x\n",
    "from-package-import": "from autotrain.run import a\n",
    "import": "import autotrain.run.a\n",
    "lazy-import": "def f():\n    from autotrain.run.a import x\n",
    "relative-import": "from . import a\n",
    "relative-name": "from .a import x\n",
    "import_module": "import importlib\nimportlib.import_module('autotrain.run.a')\n",
    "import_module-relative": "from importlib import import_module\nimport_module('.a', 'autotrain.run')\n",
    "through-a-third": "from autotrain.run.c import x\n",
}


def _ring(tmp_path: Path, closing: str) -> Path:
    root = tmp_path / "autotrain"
    (root / "run").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "run" / "__init__.py").write_text("")
    (root / "run" / "a.py").write_text("from autotrain.run.b import y\nx = 1\n")
    (root / "run" / "c.py").write_text("from autotrain.run.a import x\n")
    (root / "run" / "b.py").write_text(closing + "y = 2\n")
    return root


@pytest.mark.parametrize("form", list(RING_FORMS))
def test_each_form_of_a_cycle_between_files_is_caught(tmp_path, form):
    rings = _file_cycles(_ring(tmp_path, RING_FORMS[form]), {})
    assert len(rings) == 1 and re.search(r"run/b\.py:\d+ imports run/[ac]\.py", rings[0]), rings


def test_files_that_import_one_way_pass_and_an_allowed_import_opens_its_ring(tmp_path):
    assert _file_cycles(_ring(tmp_path / "one-way", "import os\n"), {}) == []
    assert _file_cycles(_ring(tmp_path / "a-string", "NAME = 'autotrain.run.a'\n"), {}) == []
    root = _ring(tmp_path / "allowed", "from autotrain.run.a import x\n")
    assert _file_cycles(root, {("run/b.py", "run/a.py"): "why"}) == []
    assert len(_file_cycles(root, {("run/a.py", "run/c.py"): "not an import of this ring"})) == 1


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_functions_are_small(path):
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"split these: {long}"


# --- the benchmarks: what they use of the package, seen here ---------------------------------------------

BENCHMARKS = PACKAGE.parent / "benchmarks"
BASELINES = BENCHMARKS / "baselines"  # hand-written transformers / TRL scripts: nothing of autotrain
BENCHMARK_SOURCES = sorted(BENCHMARKS.rglob("*.py"))
# A line of a string that is Python importing something: a child program handed to `python -c`, which
# neither linters nor these checks would read. A child runs a function of its script (benchmarks/_common.py).
CODE_IN_STRING = re.compile(r"^\s*(?:from\s+[\w.]+\s+import\s|import\s+\w)", re.MULTILINE)


def _module_file(dotted: str, root: Path = PACKAGE) -> Path | None:
    """The file of the package's module `dotted` exactly (autotrain.run -> run/__init__.py); None if none."""
    parts = dotted.split(".")
    if parts[0] != "autotrain":
        return None
    base = root.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py") if len(parts) > 1 else None, base / "__init__.py"):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def _defines(module: Path, name: str) -> bool:
    """Whether a module defines `name` at its top level (def, class, assignment, import), or names it in a
    string where a module `__getattr__` computes its attributes (lazy exports)."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    if "__getattr__" in names:
        names |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return name in names


def _reaches(dotted: str, root: Path = PACKAGE) -> bool:
    """Whether `autotrain.a.b[.name]` is a module of the package or a name one defines."""
    if _module_file(dotted, root) is not None:
        return True
    module, _, name = dotted.rpartition(".")
    found = _module_file(module, root)
    return found is not None and _defines(found, name)


def _package_uses(path: Path) -> list[tuple[int, str, str]]:
    """(line, dotted name, form) for everything of the package a file outside it names: each name an import
    takes (`from autotrain.x import y` -> autotrain.x.y), each module an import call or a string names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _not_strings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, "import") for a in node.names if a.name.split(".")[0] == "autotrain"]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "autotrain":
            found += [(node.lineno, f"{node.module}.{a.name}", "import") for a in node.names]
        elif isinstance(node, ast.Call) and (module := _call_import_module(node, ["autotrain"])) not in (None, DYNAMIC):
            found += [(node.lineno, module, "import call")] if module.split(".")[0] == "autotrain" else []
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            named = [d for d in MODULE_STRING.findall(node.value) if d.split(".")[1] in UNITS]  # not autotrain.yaml
            found += [(node.lineno, dotted, "string") for dotted in named]
    return found


def _benchmark_problems(path: Path, root: Path = PACKAGE) -> list[str]:
    """What a benchmark script may not do: use a private name of the package, name one that does not exist,
    hide code in a string for a child process; and a baseline may not use the package at all."""
    rel = path.relative_to(path.parents[1] if path.parent.name == "baselines" else path.parent).as_posix()
    wrong = []
    for line, dotted, form in _package_uses(path):
        if path.parent.name == "baselines":
            wrong.append(f"{rel}:{line}: a baseline uses {dotted} ({form}); it stands for a script without autotrain")
        elif any(part.startswith("_") and not part.startswith("__") for part in dotted.split(".")):
            wrong.append(f"{rel}:{line}: {dotted} is private ({form}); make what the benchmark needs public")
        elif not _reaches(dotted, root):
            wrong.append(f"{rel}:{line}: {dotted} does not exist ({form})")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    strings = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    for node in strings:
        if id(node) not in skip and CODE_IN_STRING.search(node.value):
            hint = "run a function of the script with `child`, or a file of benchmarks/baselines/"
            wrong.append(f"{rel}:{node.lineno}: Python in a string; {hint}")
    return wrong


@pytest.mark.parametrize("path", BENCHMARK_SOURCES, ids=lambda p: str(p.relative_to(BENCHMARKS)))
def test_benchmarks_use_public_names_that_exist_in_plain_code(path):
    """A benchmark that imports a renamed or private name, or hides its imports in a string for `python -c`,
    breaks unseen until someone needs its figure; here it fails at once, without running it."""
    wrong = _benchmark_problems(path)
    assert not wrong, "\n".join(wrong)


BENCHMARK_FORMS = {
    "private-name": ("from autotrain.training.memory import _status\n", "is private"),
    "private-lazy": ("def f():\n    from autotrain.training import _hidden\n", "is private"),
    "missing-name": ("from autotrain.training.memory import no_such_name\n", "does not exist"),
    "missing-module": ("import autotrain.training.no_such_module\n", "does not exist"),
    "missing-in-string": ("ARGV = ['-m', 'autotrain.cli.no_such_module']\n", "does not exist"),
    "import_module": ("import importlib\nimportlib.import_module('autotrain.no_such')\n", "does not exist"),
    "python-c": ("CODE = 'import torch\\nprint(1)'\n", "Python in a string"),
    "python-c-from": ("CODE = '''\nfrom transformers import pipeline\n'''\n", "Python in a string"),
}


@pytest.mark.parametrize("form", list(BENCHMARK_FORMS))
def test_each_benchmark_problem_is_caught(tmp_path, form):
    source, expected = BENCHMARK_FORMS[form]
    script = tmp_path / "benchmarks" / "probe.py"
    script.parent.mkdir()
    script.write_text(source, encoding="utf-8")
    found = _benchmark_problems(script)
    assert len(found) == 1 and expected in found[0], found


def test_public_names_plain_code_and_baselines_without_autotrain(tmp_path):
    script = tmp_path / "benchmarks" / "probe.py"
    script.parent.mkdir()
    script.write_text(
        '"""A docstring may say `import torch` and name autotrain.no_such."""\n'
        "from autotrain.training.memory import proc_status\n"
        "from autotrain.optimizers import CAME8Bit\n"
        "from autotrain import errors\n"
        "ARGV = ['-m', 'autotrain.cli.main', '-c', 'pass']\n",
        encoding="utf-8",
    )
    assert _benchmark_problems(script) == []
    baseline = tmp_path / "benchmarks" / "baselines" / "probe.py"
    baseline.parent.mkdir()
    baseline.write_text("from transformers import pipeline\nfrom autotrain.errors import UserInputError\n")
    found = _benchmark_problems(baseline)
    assert len(found) == 1 and "a baseline uses autotrain.errors.UserInputError" in found[0], found
