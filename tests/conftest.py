"""Shared pytest fixtures."""

from __future__ import annotations

import os

import pytest

# This machine (and CI) has no network: the check that the hub is reachable for a config's hub ids would
# refuse every dry run of the shipped templates. Tests of that check clear the variable themselves.
os.environ["AUTOTRAIN_SKIP_HUB_CHECK"] = "1"

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
