"""Hostile input beyond configs: folders that cannot be written, data files of the wrong shape, rewards
that answer nonsense, damaged checkpoints, inputs built to exhaust memory. Each case drives the command
line and expects exit 2 with one line that says what is wrong, or a run that goes on where it safely can.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ASSETS = Path(__file__).parent / "assets"
TINY = ASSETS / "tiny-llama"
CHAT = ASSETS / "data" / "chat.jsonl"


def llm_config(tmp_path: Path, project: Path | None = None, **changes) -> Path:
    """A 2-step SFT/CLM config on the tiny model; `changes` replace top-level keys (dicts are merged)."""
    config = {
        "task": "llm",
        "trainer": "clm",
        "base_model": str(TINY),
        "project_name": str(project or tmp_path / "run"),
        "data": {"path": str(ASSETS / "data" / "text.jsonl")},
        "training_args": {"max_steps": 2, "batch_size": 4, "max_length": 32, "mixed_precision": "no"},
    }
    for key, value in changes.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def one_error_line(result, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert all(fragment in errors[0] for fragment in fragments), errors[0]
    return errors[0]


# --- folders that cannot be written -----------------------------------------------------------------------


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """`folder` made read-only: by its mode, or, for root (whom modes do not stop), as immutable."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o555)
    immutable = False
    try:
        probe = folder / ".probe"
        try:
            probe.touch()
        except PermissionError:
            pass
        else:  # root: the mode does not bind
            probe.unlink()
            chattr = shutil.which("chattr")
            done = subprocess.run([chattr, "+i", str(folder)], capture_output=True) if chattr else None
            if done is None or done.returncode != 0:
                pytest.skip("running as root without `chattr +i`: no way to make a folder read-only here")
            immutable = True
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


@pytest.mark.parametrize("where", ["inside", "itself"])
def test_a_read_only_project_folder_is_bad_input(cli, tmp_path, where):
    locked = tmp_path / "locked"
    project = locked / "run" if where == "inside" else locked
    config = llm_config(tmp_path, project)
    with read_only(locked):
        result = cli("llm", "--config", config)
        one_error_line(result, f"project folder `{project}`", "cannot write", "project_name")
    assert sorted(p.name for p in locked.iterdir()) == []


def test_predict_into_a_read_only_folder_is_refused_before_loading(cli, tmp_path):
    locked = tmp_path / "locked"
    data = tmp_path / "rows.jsonl"
    data.write_text('{"text": "hello"}\n')
    with read_only(locked):
        result = cli("predict", tmp_path / "no-run-needed", "-i", data, "-o", locked / "out.jsonl")
        one_error_line(result, "--output", "is not writable")


# --- data of the wrong shape ------------------------------------------------------------------------------


def test_a_chat_row_whose_messages_is_a_string_is_named(cli, tmp_path):
    rows = CHAT.read_text().splitlines()[:6]
    rows.insert(3, json.dumps({"messages": "hello there"}))
    data = tmp_path / "chat.jsonl"
    data.write_text("\n".join(rows) + "\n")
    config = llm_config(tmp_path, trainer="sft", data={"path": str(data), "chat_template": "chatml"})
    result = cli("llm", "--config", config)
    one_error_line(result, "row 3", "column `messages`", "list of {role, content} messages", "str 'hello there'")
    assert not (tmp_path / "run" / "run.json").exists()


@pytest.mark.parametrize(
    ("lines", "fragments"),
    [
        (['["a", "b"]', '["c", "d"]'], (":1:", "holds an array, not an object")),
        (['{"text": "a"}', "", '{"text": "b"}', '"just a string"'], (":4:", "holds a string, not an object")),
        (['{"text": "a"}', '{"text": "b"'], (":2:", "not valid JSON")),
    ],
    ids=["arrays", "a-string-line", "broken-line"],
)
def test_a_json_lines_file_that_is_not_objects_names_the_line(cli, tmp_path, lines, fragments):
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(lines) + "\n")
    result = cli("llm", "--config", llm_config(tmp_path, data={"path": str(data)}))
    line = one_error_line(result, str(data), *fragments)
    assert "An error occurred while generating the dataset" not in line


# --- GRPO rewards that answer nonsense ---------------------------------------------------------------------


def test_reward_answers_are_checked_one_by_one():
    from autotrain.errors import UserInputError
    from autotrain.trainers.llm.rewards import checked

    def answering(value):
        return checked(lambda completions, **_: value, "mine.py:score")

    assert answering([1, 0.5, None])(completions=["a", "b", "c"]) == [1.0, 0.5, None]
    for value, shown in [
        ([float("nan"), 1.0], "float nan for completion 0"),
        ([1.0, "good"], "str 'good' for completion 1"),
        (None, "NoneType None"),
        ([1.0], "1 values"),
        ("11", "str '11'"),
    ]:
        with pytest.raises(UserInputError, match="reward `mine.py:score` returned") as caught:
            answering(value)(completions=["a", "b"])
        assert shown in str(caught.value)


REWARDS = """
def nan(completions, **kwargs):
    return [float("nan")] * len(completions)

def text(completions, **kwargs):
    return ["good"] * len(completions)

def nothing(completions, **kwargs):
    return None
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("function", "shown"), [("nan", "float nan"), ("text", "str 'good'"), ("nothing", "NoneType None")]
)
def test_a_reward_that_answers_nonsense_is_named(cli, tmp_path, function, shown):
    (tmp_path / "rewards.py").write_text(REWARDS)
    config = llm_config(
        tmp_path,
        trainer="grpo",
        data={"path": str(ASSETS / "data" / "math.jsonl"), "column_mapping": {"prompt": "question"}},
        training_args={
            "max_steps": 1,
            "num_generations": 4,
            "max_completion_length": 4,
            "rewards": [f"{tmp_path / 'rewards.py'}:{function}"],
        },
    )
    result = cli("llm", "--config", config)
    one_error_line(result, f"reward `{tmp_path / 'rewards.py'}:{function}` returned {shown}")


# --- chat's stdin -------------------------------------------------------------------------------------------


def test_lines_that_are_not_utf8_are_bad_input():
    from autotrain.errors import UserInputError
    from autotrain.inference.chat import typed_lines

    for errors in ("strict", "surrogateescape"):  # a strict reader, and Python's own stdin in a C locale
        stdin = io.TextIOWrapper(io.BytesIO(b"hello\n\xff\xfe there\n"), encoding="utf-8", errors=errors)
        lines = typed_lines(stdin)
        assert next(lines) == "hello"
        with pytest.raises(UserInputError, match="stdin line 2 is not valid UTF-8"):
            next(lines)


# --- damaged checkpoints ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory) -> Path:
    """A finished 4-step SFT run with complete checkpoints at steps 2 and 4 (copied by each test)."""
    from typer.testing import CliRunner

    from autotrain.cli.main import app

    root = tmp_path_factory.mktemp("checkpointed")
    config = llm_config(root, trainer="sft", training_args={"max_steps": 4, "save_steps": 2, "save_total_limit": 3})
    result = CliRunner().invoke(app, ["llm", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (root / "run").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    return root / "run"


class _RunsCode:
    """Unpickled without `weights_only`, this creates a file: proof that the pickle would have run code."""

    def __init__(self, proof: Path):
        self.proof = proof

    def __reduce__(self):
        return (open, (str(self.proof), "w"))


def damage(path: Path, how: str, proof: Path | None = None) -> None:
    """Cut `path` to half its size, or replace it by a torch file whose pickle, fully unpickled, would
    create `proof`."""
    if how == "truncate":
        os.truncate(path, path.stat().st_size // 2)
    else:
        import torch

        torch.save({"state": _RunsCode(proof)}, path)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.pt", "trainer_state.json"])
def test_resume_passes_over_a_damaged_checkpoint(cli, checkpointed, tmp_path, name):
    copy = tmp_path / "run"
    shutil.copytree(checkpointed, copy)
    damaged = copy / "checkpoint-4" / name
    damage(damaged, "truncate")
    config = llm_config(tmp_path, copy, trainer="sft", training_args={"max_steps": 6, "save_steps": 2})
    result = cli("llm", "--config", config, "--resume", "latest")
    assert result.exit_code == 0, result.output
    assert f"warning: skipping damaged checkpoint {damaged.parent}: {damaged}" in result.stderr
    assert f"resuming from {copy / 'checkpoint-2'}" in result.stderr
    assert json.loads((copy / "trainer_state.json").read_text())["global_step"] == 6


@pytest.mark.parametrize("how", ["truncate", "pickle"])
def test_resume_from_a_named_damaged_checkpoint_is_bad_input(cli, tmp_path, how):
    """A checkpoint as autotrain leaves one (markers, state, optimizer), its optimizer file damaged."""
    import torch

    from autotrain.run.project import MARKER
    from autotrain.training.folder import COMPLETE_MARKER

    run = tmp_path / "run"
    checkpoint = run / "checkpoint-4"
    checkpoint.mkdir(parents=True)
    (run / MARKER).write_text("made by autotrain\n")
    (checkpoint / COMPLETE_MARKER).write_text("complete\n")
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    torch.save({"state": {0: {"exp_avg": torch.zeros(64, 64)}}, "param_groups": []}, checkpoint / "optimizer.pt")
    damage(checkpoint / "optimizer.pt", how, tmp_path / "PWNED")
    config = llm_config(tmp_path, run, trainer="sft", training_args={"max_steps": 6})
    result = cli("llm", "--config", config, "--resume", checkpoint)
    line = one_error_line(result, f"--resume {checkpoint}: the checkpoint is damaged: {checkpoint / 'optimizer.pt'}")
    assert "weights_only" not in result.output
    if how == "pickle":
        assert "could run code" in line
        assert not (tmp_path / "PWNED").exists()


def test_a_run_whose_weights_would_run_code_is_refused_without_advice(cli, tmp_path):
    """A run folder (config, tokenizer) whose weights are a pickle that runs code when fully unpickled."""
    run = tmp_path / "run"
    shutil.copytree(TINY, run, ignore=shutil.ignore_patterns("*.safetensors"))
    shutil.copy(llm_config(tmp_path, tmp_path / "elsewhere"), run / "autotrain.yaml")
    weights = run / "pytorch_model.bin"
    damage(weights, "pickle", tmp_path / "PWNED")
    data = tmp_path / "rows.jsonl"
    data.write_text('{"text": "the apple is"}\n')
    result = cli("predict", run, "-i", data)
    one_error_line(result, f"cannot load the model saved in `{run}`", "could run code")
    assert "weights_only" not in result.output
    assert not (tmp_path / "PWNED").exists()
