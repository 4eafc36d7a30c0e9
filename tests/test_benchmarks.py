"""Every benchmark script still runs, so a figure can be measured again when it is needed.

Each script in benchmarks/ (a new one is picked up by its name; `_common.py` is their helper, baselines/ the
hand-written scripts they time against) must parse its arguments: `--help` runs everything the script
imports at its top and builds its parser. A script that offers `--smoke` runs it too: seconds on the tiny
models, no real model and no GPU, to check the script end to end. What the scripts import inside their
functions is checked without running them by tests/test_architecture.py (the names exist and are public).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _parses_arguments(path: Path) -> bool:
    """Whether the script builds an argparse parser and runs only under `if __name__ == "__main__"`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parser = any(isinstance(n, ast.Attribute) and n.attr == "ArgumentParser" for n in ast.walk(tree))
    guarded = any(
        isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and getattr(n.test.left, "id", "") == "__name__"
        for n in tree.body
    )
    return parser and guarded


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_each_benchmark_parses_its_arguments_under_a_main_guard(script):
    """So that `--help` below only prints the usage: a script without a parser would run its whole benchmark."""
    assert _parses_arguments(script), f"{script.name}: parse the arguments with argparse under a __main__ guard"


def _run(script: Path, flag: str, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script), flag], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_each_benchmark_starts_and_its_smoke_run_passes(script):
    if not _parses_arguments(script):
        pytest.fail(f"{script.name} has no argument parser: `--help` would run the whole benchmark")
    shown = _run(script, "--help", timeout=300)
    assert shown.returncode == 0 and shown.stdout.startswith("usage:"), shown.stdout + shown.stderr[-3000:]
    if "--smoke" in shown.stdout:
        smoke = _run(script, "--smoke", timeout=600)
        assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-3000:]


@pytest.mark.slow
def test_a_child_runs_a_function_of_its_script_and_returns_its_result(tmp_path):
    """`child` (benchmarks/_common.py) runs a script's own function in a fresh interpreter, with the
    arguments as strings, and `child_result` gives back what it returned; a failing child stops the caller."""
    import importlib.util

    from _common import child, child_result

    script = tmp_path / "probe_script.py"
    script.write_text(
        "import os\n\ndef pid_and_sum(a, b):\n    return [os.getpid(), int(a) + int(b)]\n\n"
        "def fails():\n    raise ValueError('boom')\n",
        encoding="utf-8",
    )
    spec = importlib.util.spec_from_file_location("probe_script", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules["probe_script"] = module
    try:
        spec.loader.exec_module(module)
        pid, total = child_result(child(module.pid_and_sum, 40, 2))
        assert total == 42 and pid != os.getpid()
        with pytest.raises(SystemExit, match="ValueError: boom"):
            child_result(child(module.fails))
    finally:
        del sys.modules["probe_script"]
