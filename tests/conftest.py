"""Shared pytest fixtures."""

from __future__ import annotations

import pytest

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
