"""No private attribute of another library outside autotrain/compat/.

A private name (`x._name`) of torch, transformers, TRL, peft, accelerate, datasets or the standard library
may be renamed or dropped in any release; the code uses the libraries' public APIs, and where a private
name is the only way it goes through the one compat module of its library (autotrain/compat/), whose tests
(tests/test_compat.py) fail on a rename. Read from the source, as `grep -rnE "\\._[a-z]" autotrain/` would
find them, less what is the code's own:

- `self._x`, `cls._x`, `super()._x`: the class's own attribute, except in a class built on another
  library's class (or on one it is handed), where `self._x` must be defined (a method, or assigned) in the
  class itself;
- an import of a private module or name from outside the package (`from torch._guards import ...`);
- `getattr` / `setattr` / `hasattr` / `delattr` of a private name, and `(owner, "_name", ...)` (a patch).
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "autotrain"
COMPAT = "compat"
# Underscored names that are documented public API.
PUBLIC = {
    "os._exit": "https://docs.python.org/3/library/os.html#os._exit: ends the process at once, no clean-up",
}
# Uses the reader cannot tell from another library's, each as the source writes it, with why it is the
# project's own: anything else in those files is caught like any file's.
OWN: dict[str, set[str]] = {
    "optimizers/came_8bit.py": {"CAME._FLAGS"},  # the project's own CAME class, which CAME8Bit extends
}
CALLS = {"getattr", "setattr", "hasattr", "delattr"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and len(name) > 1


def _own(node: ast.AST, in_class: set[int]) -> bool:
    """`self`, `cls` or `super()` inside a class (elsewhere `cls` may name any class)."""
    if id(node) not in in_class:
        return False
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _own_names(tree: ast.Module) -> set[str]:
    """Names a module binds to the package's own: imported from autotrain, or classes it defines."""
    names = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("autotrain")):
            names |= {a.asname or a.name for a in node.names}
    return names


def _defined_in(cls: ast.ClassDef, in_class: set[int]) -> set[str]:
    """What a class defines itself: its methods and class attributes, and what it assigns to `self.x` (not
    to an item of one: `self._metrics["train"] = ...` uses `_metrics`)."""
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        targets = {ast.Assign: lambda n: n.targets, ast.AnnAssign: lambda n: [n.target]}.get(type(node), lambda n: [])
        stack = list(targets(node))
        while stack:
            target = stack.pop()
            if isinstance(target, (ast.Tuple, ast.List)):
                stack.extend(target.elts)
            elif isinstance(target, ast.Name):
                names.add(target.id)
            elif isinstance(target, ast.Attribute) and _own(target.value, in_class):
                names.add(target.attr)
    return names


def _on_foreign_class(tree: ast.Module, in_class: set[int]) -> dict[int, set[str]]:
    """id of each `self` attribute node inside a class built on another library's class -> what the class
    defines itself."""
    own = _own_names(tree) | set(dir(builtins))
    found: dict[int, set[str]] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        # built on another library's class, or on one it is handed (`class Counting(trainer_cls)`)
        roots = {ast.unparse(b).split(".")[0].split("(")[0] for b in cls.bases}
        if roots - own:
            defined = _defined_in(cls, in_class)
            found.update({id(n): defined for n in ast.walk(cls) if isinstance(n, (ast.Attribute, ast.Call))})
    return found


def _string(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def private_uses(source: str) -> list[tuple[int, str]]:
    """(line, the use as the source writes it) for every private name of another library in `source`."""
    tree = ast.parse(source)
    in_class = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for n in ast.walk(c)}
    subclassed = _on_foreign_class(tree, in_class)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            inherited = id(node) in subclassed and node.attr not in subclassed[id(node)]
            if not _own(node.value, in_class) or inherited:
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom) and not node.level and not (node.module or "").startswith("autotrain"):
            module = node.module or ""
            if any(_private(part) for part in module.split(".")):
                found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{a.name}") for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if any(_private(p) for p in a.name.split("."))]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CALLS:
            name = _string(node.args[1]) if len(node.args) > 1 else None
            if name and _private(name):
                inherited = id(node) in subclassed and name not in subclassed[id(node)]
                if not _own(node.args[0], in_class) or inherited:
                    found.append((node.lineno, f"{node.func.id}({ast.unparse(node.args[0])}, {name!r})"))
        elif isinstance(node, ast.Tuple) and len(node.elts) >= 2:
            name = _string(node.elts[1])
            if name and _private(name) and isinstance(node.elts[0], (ast.Name, ast.Attribute)):
                found.append((node.lineno, f"({ast.unparse(node.elts[0])}, {name!r}, ...)"))
    return [(line, use.replace("'", '"')) for line, use in found if use.replace("'", '"') not in PUBLIC]


SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != COMPAT)


def test_no_private_name_of_another_library_outside_compat():
    wrong = []
    for path in SOURCES:
        rel = path.relative_to(PACKAGE).as_posix()
        own = OWN.get(rel, set())
        for line, use in private_uses(path.read_text(encoding="utf-8")):
            if use not in own:
                wrong.append(f"autotrain/{rel}:{line}: {use}")
    assert not wrong, (
        "private names of other libraries (use a public API, or put the use in autotrain/compat/<library>.py "
        "with a test in tests/test_compat.py):\n" + "\n".join(wrong)
    )


FORMS = {
    "attribute": ("import torch\ntorch._foreach_add_([], 1)\n", "torch._foreach_add_"),
    "on-an-object": ("def f(trainer):\n    trainer._load_from_checkpoint('x')\n", "trainer._load_from_checkpoint"),
    "chained": ("def f(t):\n    return t.untyped_storage()._cdata\n", "t.untyped_storage()._cdata"),
    "import-from": ("from torch._guards import detect_fake_mode\n", "torch._guards"),
    "import-name": ("from transformers.masking_utils import _ignore\n", "transformers.masking_utils._ignore"),
    "import": ("import torch._inductor\n", "torch._inductor"),
    "cls-outside-a-class": (
        "import transformers\ncls = transformers.LlamaModel\ngetattr(cls, '_no_split_modules')\n",
        'getattr(cls, "_no_split_modules")',
    ),
    "getattr": ("import threading\ngetattr(threading, '_shutdown', None)\n", 'getattr(threading, "_shutdown")'),
    "setattr": ("def f(config):\n    setattr(config, '_attn_implementation', 'eager')\n", "setattr(config"),
    "a-patch": ("from transformers import masking_utils\nP = masking_utils, '_x', None\n", "(masking_utils, "),
    "inherited": (
        "from trl import SFTTrainer\nclass T(SFTTrainer):\n    def f(self):\n        return self._metrics\n",
        "self._metrics",
    ),
    "inherited-item-set": (
        "def make(base):\n    class T(base):\n        def f(self):\n            self._metrics['train'] = 1\n"
        "    return T\n",
        "self._metrics",
    ),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_each_form_of_a_private_use_is_caught(form):
    source, expected = FORMS[form]
    found = private_uses(source)
    assert len(found) == 1 and found[0][1].startswith(expected), found


def test_the_code_own_names_pass():
    source = (
        "import os\n"
        "from autotrain.run.train import _misfit\n"
        "from transformers import TrainerCallback\n"
        "class Own:\n"
        "    def __init__(self):\n"
        "        self._x = 1\n"
        "    def _y(self):\n"
        "        return self._x + super()._z() + getattr(self, '_x')\n"
        "class Callback(TrainerCallback):\n"
        "    def __init__(self):\n"
        "        self._seen = []\n"
        "    def on_step_end(self, args, state, control, **kwargs):\n"
        "        self._seen.append(self._count())\n"
        "    def _count(self):\n"
        "        return len(self._seen)\n"
        "from autotrain.optimizers.came import CAME\n"
        "class Eight(CAME):\n"
        "    def f(self):\n"
        "        return self._steps  # the package's own base class\n"
        "os._exit(0)\n"
        "LINK = ('target', '_blank')\n"
    )
    assert private_uses(source) == []
