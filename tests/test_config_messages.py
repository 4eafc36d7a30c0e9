"""What `validate` says about a config a newcomer wrote: names brought from other tools, plain messages
(not pydantic's), a summary line, `--set` errors, and many unknown keys reported fast."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
HEAD = "task: llm\nbase_model: tests/assets/tiny-llama\nproject_name: runs/x\ndata: {path: d.jsonl}\n"


def write(tmp_path: Path, text: str, name: str = "c.yml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("yaml_text", "reported"),
    [
        # transformers / TRL names inside training_args: the key of the same section
        ("training_args:\n  learning_rate: 1e-4\n", "training_args.learning_rate: unknown key (did you mean `lr`?)"),
        (
            "training_args:\n  num_train_epochs: 3\n",
            "training_args.num_train_epochs: unknown key (did you mean `epochs`?)",
        ),
        (
            "training_args:\n  per_device_train_batch_size: 4\n",
            "training_args.per_device_train_batch_size: unknown key (did you mean `batch_size`?)",
        ),
        (
            "training_args:\n  gradient_accumulation_steps: 4\n",
            "training_args.gradient_accumulation_steps: unknown key (did you mean `gradient_accumulation`?)",
        ),
        (
            "training_args:\n  max_seq_length: 512\n",
            "training_args.max_seq_length: unknown key (did you mean `max_length`?)",
        ),
        # a flat layout (axolotl, LLaMA-Factory): the path from the top
        ("learning_rate: 1e-4\n", "learning_rate: unknown key (did you mean `training_args.lr`?)"),
        ("warmup_ratio: 0.1\n", "warmup_ratio: unknown key (did you mean `training_args.warmup_ratio`?)"),
        ("micro_batch_size: 2\n", "micro_batch_size: unknown key (did you mean `training_args.batch_size`?)"),
        ("lora_r: 8\n", "lora_r: unknown key (did you mean `peft.r`?)"),
        ("cutoff_len: 1024\n", "cutoff_len: unknown key (did you mean `training_args.max_length`?)"),
        ("output_dir: out\n", "output_dir: unknown key (did you mean `project_name`?)"),
        ("peft:\n  lora_alpha: 16\n", "peft.lora_alpha: unknown key (did you mean `alpha`?)"),
        # keys with no counterpart here: what to do instead, not a look-alike key (`do_train` is not `trainer`)
        ("do_train: true\n", "do_train: unknown key (not needed: a training command always trains)"),
        ("overwrite_output_dir: true\n", "overwrite_output_dir: unknown key (not a config key: pass `--overwrite`"),
        ("resume_from_checkpoint: true\n", "resume_from_checkpoint: unknown key (not a config key: pass `--resume`"),
        (
            "val_set_size: 0.1\n",
            "val_set_size: unknown key (an LLM run evaluates on a split of its own: `data.valid_split`)",
        ),
        ("dataset_name: imdb\n", "dataset_name: unknown key (did you mean `data.path`?)"),  # TRL's CLI
        # torchtune
        ("dtype: bf16\n", "dtype: unknown key (did you mean `training_args.mixed_precision`?)"),
        (
            "enable_activation_checkpointing: true\n",
            "enable_activation_checkpointing: unknown key (did you mean `training_args.gradient_checkpointing`?)",
        ),
        ("shuffle: true\n", "shuffle: unknown key (not needed: training batches are drawn in a new random order"),
    ],
)
def test_names_from_other_tools_suggest_ours(cli, tmp_path, yaml_text, reported):
    result = cli("validate", write(tmp_path, HEAD + yaml_text))
    assert result.exit_code == 2
    assert any(line.split(": ", 1)[1].startswith(reported) for line in result.stderr.splitlines()), result.stderr


def test_a_suggestion_names_only_what_the_task_has(cli, tmp_path):
    """`lora_r` in a text-classification config: there is no `peft` section there, so no `peft.r`."""
    text = "task: text-classification\nbase_model: m\nproject_name: runs/x\ndata: {path: d.csv}\nlora_r: 8\n"
    result = cli("validate", write(tmp_path, text))
    assert result.exit_code == 2 and "lora_r: unknown key" in result.stderr
    assert "peft.r" not in result.stderr


def test_validate_ends_with_a_summary_line(cli, tmp_path):
    bad = write(tmp_path, HEAD + "training_args:\n  lr: abc\n  epochs: -1\n", "bad.yml")
    good = REPO_ROOT / "configs" / "llm" / "quickstart.yml"
    one = cli("validate", bad)
    assert one.exit_code == 2 and one.stderr.splitlines()[-1] == "2 problems found."
    two = cli("validate", bad, good)
    assert two.exit_code == 2 and two.stderr.splitlines()[-1] == "2 problems found in 1 of 2 files."
    assert cli("validate", good).stderr == ""  # nothing to sum up


def test_messages_are_plain_not_pydantic(cli, tmp_path):
    text = HEAD + (
        "peft:\n  r: 1.5\n  target_modules: 7\n"
        "training_args:\n  batch_size: four\n  lr: abc\n  optimizer_args: 5\n"
        "hub:\n  repo_id: 5\n"
    )
    result = cli("validate", write(tmp_path, text))
    assert result.exit_code == 2
    assert "Input should" not in result.stderr and "unable to parse" not in result.stderr
    lines = [line.split(": ", 1)[1] for line in result.stderr.splitlines()[:-1]]
    assert "training_args.batch_size: expected a number of samples, or `auto` (got `four`)" in lines
    assert "training_args.lr: must be a number (got `abc`)" in lines
    assert "peft.r: must be a whole number (got `1.5`)" in lines
    assert "peft.target_modules: must be text or a list of text (got `7`)" in lines  # one line, not one per type
    assert "training_args.optimizer_args: must be a mapping of `key: value` lines (got `5`)" in lines
    assert "hub.repo_id: must be text (got `5`)" in lines


@pytest.mark.parametrize(
    ("betas", "message"),
    [
        ("0.9", "expects a list of 3 numbers (default: [0.9, 0.999, 0.9999])"),
        ("[0.9, 0.99, 0.999, 0.9999]", "expects a list of 3 numbers, got 4 (default: [0.9, 0.999, 0.9999])"),
        ("[0.9, 0.99]", "expects 3 values, got 2"),
    ],
    ids=["scalar", "too-many", "too-few"],
)
def test_came_betas_say_three_numbers_are_expected(cli, tmp_path, betas, message):
    text = HEAD + f"training_args:\n  optimizer: came\n  optimizer_args:\n    betas: {betas}\n"
    result = cli("validate", write(tmp_path, text))
    assert result.exit_code == 2
    assert f"training_args.optimizer_args.betas: {message} (optimizer `came`)" in result.stderr
    assert "tuple" not in result.stderr.lower()


def test_a_set_error_names_its_path_once(cli):
    result = cli("validate", REPO_ROOT / "configs/llm/quickstart.yml", "--set", "training_args.batch_size=four")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "--set training_args.batch_size: expected a number of samples, or `auto` (got `four`)",
        "1 problem found.",
    ]


def test_twenty_thousand_unknown_keys_are_reported_without_a_search_each(cli, tmp_path, monkeypatch):
    """Every key is reported; the nearest-name search (difflib, the cost) runs for the first ones only."""
    from autotrain.config.load import SUGGEST_LIMIT

    calls = []
    real = difflib.get_close_matches
    monkeypatch.setattr(difflib, "get_close_matches", lambda *a, **k: calls.append(1) or real(*a, **k))
    keys = "".join(f"  zq{i:05d}x: 1\n" for i in range(20_000))
    result = cli("validate", write(tmp_path, HEAD + "training_args:\n" + keys))
    assert result.exit_code == 2
    assert result.stderr.count("unknown key") == 20_000
    assert result.stderr.splitlines()[-1] == "20000 problems found."
    assert len(calls) <= SUGGEST_LIMIT  # was two searches per key (40,000) before
    calls.clear()  # at the top, with a required key missing (a typo of it is looked for too)
    top = "task: llm\nproject_name: p\ndata: {path: d.jsonl}\n" + keys.replace("  zq", "zq")
    result = cli("validate", write(tmp_path, top, "top.yml"))
    assert result.exit_code == 2 and result.stderr.count("unknown key") == 20_000
    assert "base_model: required field is missing" in result.stderr
    assert len(calls) <= 2 * SUGGEST_LIMIT
    few = "".join(f"  zq{i:05d}x: 1\n" for i in range(SUGGEST_LIMIT + 100))
    typo = cli("validate", write(tmp_path, HEAD + "training_args:\n  batch_sise: 4\n" + few))
    assert "batch_sise: unknown key (did you mean `batch_size`?)" in typo.stderr  # the first ones keep theirs


# --- hostile configs: where the problem is ---------------------------------------------------------------


@pytest.mark.parametrize("before", ["", "# a comment\n\n"], ids=["line-1", "line-3"])
def test_a_bare_scalar_config_names_its_line(cli, tmp_path, before):
    path = write(tmp_path, before + "hello world\n")
    result = cli("validate", path)
    line = before.count("\n") + 1
    assert result.exit_code == 2
    assert f"{path}:{line}:1: <root>: a config must be a YAML mapping" in result.stderr


def test_a_null_key_names_its_line(cli, tmp_path):
    lines = HEAD.splitlines() + ["training_args:"] + [f"  # note {i}" for i in range(7)] + ["  epochs: 1"]
    assert len(lines) == 13
    path = write(tmp_path, "\n".join(lines) + "\n~: 1\n")
    nested = write(tmp_path, HEAD + "peft:\n  ~: 1\n", "nested.yml")
    result = cli("validate", path, nested)
    assert result.exit_code == 2
    assert f"{path}:14:1: None: a key must be a name (got `None`)" in result.stderr
    assert f"{nested}:6:3: peft.None: a key must be a name" in result.stderr


def test_a_required_key_under_another_tools_name_is_one_problem(cli, tmp_path):
    """LLaMA-Factory's `model_name_or_path` and `output_dir` where `base_model` and `project_name` are missing:
    one line each, the suggestion, not also "required field is missing"."""
    text = "task: llm\nmodel_name_or_path: tiny\noutput_dir: runs/x\ndata: {path: d.jsonl}\n"
    result = cli("validate", write(tmp_path, text))
    assert result.exit_code == 2
    reported = [line.split(": ", 1)[1] for line in result.stderr.splitlines() if ": " in line]
    assert reported == [
        "model_name_or_path: unknown key (did you mean `base_model`?)",
        "output_dir: unknown key (did you mean `project_name`?)",
    ], result.stderr


def test_a_classifier_holds_a_fraction_out_where_an_llm_names_a_split(cli, tmp_path):
    """axolotl's `val_set_size` has a place in a classifier's config (`data.valid_size`), not in an LLM's."""
    text = "task: text-classification\nbase_model: m\nproject_name: runs/x\ndata: {path: d.csv}\nval_set_size: 0.1\n"
    result = cli("validate", write(tmp_path, text))
    assert result.exit_code == 2
    assert "val_set_size: unknown key (did you mean `data.valid_size`?)" in result.stderr, result.stderr
