"""What `--help` shows a person, and templates that keep their editor schema wherever they are written."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import pytest

COMMANDS = [
    [],
    ["llm"],
    ["text-classification"],
    ["image-classification"],
    ["validate"],
    ["init"],
    ["schema"],
    ["migrate"],
    ["env"],
    ["chat"],
    ["predict"],
    ["evaluate"],
    ["export"],
    ["app"],
    ["launch"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "autotrain")
def test_flags_show_as_flags(cli, command):
    """On/off options are listed bare: `--dry-run`, never `--dry-run <bool>` (as if it took a value)."""
    result = cli(*command, "--help", env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.stdout and "BOOLEAN" not in result.stdout, result.stdout


def test_dry_run_and_overwrite_are_plain_flags(cli):
    help_text = cli("llm", "--help", env={"COLUMNS": "120"}).stdout
    for flag in ("--dry-run", "--overwrite"):
        line = next(line for line in help_text.splitlines() if flag in line)
        after = line.split(flag, 1)[1].strip(" │")
        assert after[0].isupper(), line  # straight to the help text: no value placeholder
    result = cli("llm", "--config", "configs/llm/quickstart.yml", "--dry-run")
    assert result.exit_code == 0, result.output  # no value needed
    assert cli("llm", "--config", "configs/llm/quickstart.yml", "--dry-run", "true").exit_code == 2


@pytest.mark.parametrize("trainer", ["sft", "orpo"])
def test_init_writes_an_absolute_schema_location_that_exists(cli, tmp_path, monkeypatch, trainer):
    """A template written anywhere (another folder, another depth) still points editors at the schema."""
    elsewhere = tmp_path / "somewhere" / "deeper"
    monkeypatch.chdir(tmp_path)
    out = elsewhere / "mine.yml"
    result = cli("init", "llm", "--trainer", trainer, "-o", out)
    assert result.exit_code == 0, result.output
    first = out.read_text().splitlines()[0]
    prefix = "# yaml-language-server: $schema="
    assert first.startswith(prefix), first
    location = urlparse(first.removeprefix(prefix))
    assert location.scheme == "file", first
    schema = Path(url2pathname(location.path))
    assert schema.is_absolute() and schema.is_file(), schema
    assert json.loads(schema.read_text())["title"] == "autotrain llm config"
    # ...and the copy is moved once more: the location is absolute, so it still holds.
    moved = tmp_path / "moved.yml"
    out.rename(moved)
    assert Path(url2pathname(urlparse(moved.read_text().splitlines()[0].removeprefix(prefix)).path)).is_file()


def _options(command) -> set[str]:
    return {flag for param in command.params for flag in param.opts} - {"--version", "--help", "-h"}


def test_autotrain_config_takes_the_options_of_the_task_commands(cli):
    """`autotrain --config F` and `autotrain llm --config F` read one option list (the root once lacked
    --preview: "No such option")."""
    import typer

    from autotrain.cli.main import app

    group = typer.main.get_command(app)
    root = _options(group)
    assert "--preview" in root and "--accept-changes" in root
    for task in ("llm", "text-classification", "image-classification"):
        assert _options(group.commands[task]) == root, task
    result = cli("--config", "configs/llm/quickstart.yml", "--preview", "1")
    assert result.exit_code == 0, result.output
    assert result.output == cli("llm", "--config", "configs/llm/quickstart.yml", "--preview", "1").output
