"""AutoTrain Advanced configs that are wrong in ways the translation must name: a trainer that is not a
word, unknown or malformed `hub:` keys, a task the trainer overrides, a misspelt task; and `migrate -o`
into a folder that does not exist. Each is one line and exit 2 (a note for the override), never a
traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotrain.config.advanced import ADVANCED_TRAINERS

ORPO = """task: llm-orpo
base_model: tests/assets/tiny-llama
project_name: runs/aa
data:
  path: d.jsonl
  column_mapping:
    text_column: chosen
    rejected_text_column: rejected
    prompt_text_column: prompt
params:
  epochs: 1
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "aa.yml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("trainer", ["[sft]", "{name: sft}"], ids=["list", "mapping"])
@pytest.mark.parametrize("command", ["validate", "migrate", "llm"])
def test_a_trainer_that_is_not_a_word_is_one_line(cli, tmp_path, command, trainer):
    path = write(tmp_path, ORPO + f"  trainer: {trainer}\n")
    args = [command, path] if command != "llm" else ["llm", "--config", path, "--dry-run"]
    result = cli(*args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "TypeError" not in result.output
    choices = ", ".join(ADVANCED_TRAINERS)  # from the trainer table, plus the generic names
    assert f"{path}:12:3: params.trainer: must be one word, one of: {choices}" in result.stderr


@pytest.mark.parametrize("command", ["validate", "migrate"])
def test_an_unknown_hub_key_is_reported_with_a_suggestion(cli, tmp_path, command):
    path = write(tmp_path, ORPO + "hub:\n  username: me\n  pushtohub: true\n")
    result = cli(command, path)
    assert result.exit_code == 2, result.output
    assert f"{path}:14:3: hub.pushtohub: unknown AutoTrain Advanced hub key (did you mean `push_to_hub`?)" in (
        result.stderr
    )


def test_a_list_as_hub_username_is_refused(cli, tmp_path):
    path = write(tmp_path, ORPO + "hub:\n  username: [me, you]\n  push_to_hub: true\n")
    result = cli("migrate", path)
    assert result.exit_code == 2, result.output
    assert f"{path}:13:3: hub.username: must be text" in result.stderr
    assert "repo_id" not in result.stdout


def test_a_trainer_that_overrides_the_task_gets_a_note(cli, tmp_path):
    """AutoTrain Advanced trains what `params.trainer` says; so does the translation, and says so."""
    sft = ORPO.replace("    rejected_text_column: rejected\n    prompt_text_column: prompt\n", "")
    path = write(tmp_path, sft + "  trainer: sft\n")
    result = cli("migrate", path)
    assert result.exit_code == 0, result.output
    assert "trainer: sft" in result.stdout
    assert "params.trainer: `trainer: sft` overrides `task: llm-orpo`: this trains `sft`" in result.stderr
    same = write(tmp_path, ORPO + "  trainer: orpo\n")
    assert "overrides" not in cli("migrate", same).stderr  # no conflict, no note


@pytest.mark.parametrize("params", ["", "params:\n  epochs: 1\n"], ids=["without-params", "with-params"])
def test_migrate_suggests_the_task_a_typo_meant(cli, tmp_path, params):
    path = write(tmp_path, "task: llm-sftt\nbase_model: m\nproject_name: p\n" + params)
    result = cli("migrate", path)
    assert result.exit_code == 2, result.output
    assert "unknown AutoTrain Advanced task `llm-sftt` (did you mean `llm-sft`?)" in result.stderr
    assert "needs no migration" not in result.stderr


def test_migrate_into_a_missing_folder_is_bad_usage(cli, tmp_path):
    path = write(tmp_path, ORPO)
    target = tmp_path / "missing" / "new.yml"
    result = cli("migrate", path, "-o", target)
    assert result.exit_code == 2, result.output
    assert f"error: cannot write {target}: the folder {target.parent} does not exist" in result.stderr
    assert not target.parent.exists()


def test_the_note_names_the_task_of_the_trainer_that_wins(cli, tmp_path):
    sft = ORPO.replace("    rejected_text_column: rejected\n    prompt_text_column: prompt\n", "")
    result = cli("migrate", write(tmp_path, sft.replace("chosen", "text") + "  trainer: default\n"))
    assert result.exit_code == 0, result.output
    assert "this trains `clm`, as AutoTrain Advanced would; set `task: llm-generic`" in result.stderr
