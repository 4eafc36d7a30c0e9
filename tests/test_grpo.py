"""GRPO (`trainer: grpo`): the built-in rewards, the user's own reward functions, the config's checks, and
training on the tiny model, where rewards that differ between completions must move the weights."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from autotrain.trainers.llm.rewards import answer_match, exact_match, final_number

ASSETS = Path(__file__).parent / "assets"
TINY = ASSETS / "tiny-llama"
MATH = ASSETS / "data" / "math.jsonl"

# A reward the tiny random model can earn by chance: the share of its completion's characters that are
# digits. Completions differ, so rewards differ within a group and the advantages are not all zero.
DIGITS_REWARD = """
def digits(completions, **kwargs):
    texts = [c if isinstance(c, str) else "".join(m["content"] for m in c) for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]
"""


def write_config(tmp_path: Path, **training) -> Path:
    config = {
        "task": "llm",
        "trainer": "grpo",
        "base_model": str(TINY),
        "project_name": str(tmp_path / "run"),
        "data": {"path": str(MATH), "column_mapping": {"prompt": "question", "answer": "answer"}},
        "training_args": {
            "max_steps": 3,
            "batch_size": 4,
            "lr": 1e-3,
            "logging_steps": 1,
            "mixed_precision": "no",
            "num_generations": 4,
            "max_completion_length": 8,
            **training,
        },
    }
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config))
    return path


# --- rewards -------------------------------------------------------------------------------------------


def test_final_number_reads_gsm8k_answers_and_free_text():
    assert final_number("Natalia sold 48/2 = 24 clips in May.\n#### 72") == 72
    assert final_number("so the total is 1,234.5 dollars") == 1234.5
    assert final_number("#### -3 and then 7") == -3  # the marked answer wins over a later number
    assert final_number("no number here") is None


def test_answer_match_and_exact_match_score_strings_and_messages():
    answers = ["2 + 3 = 5\n#### 5", "#### 12", "#### 7"]
    completions = ["It is 5.", [{"role": "assistant", "content": "3 * 4 = 12"}], "about eight"]
    assert answer_match(completions, answers) == [1.0, 1.0, 0.0]
    assert exact_match([" yes ", "no"], ["yes", "yes"]) == [1.0, 0.0]


def test_the_config_knows_every_built_in_reward_and_its_column():
    from autotrain.config.rules import BUILTIN_REWARDS, GRPO_DEFAULT_REWARDS
    from autotrain.trainers.llm.rewards import BUILTIN

    assert set(BUILTIN_REWARDS) == set(BUILTIN) and set(GRPO_DEFAULT_REWARDS) <= set(BUILTIN)


# --- the config's checks -----------------------------------------------------------------------------------


def test_the_template_and_a_config_validate(cli, tmp_path):
    root = Path(__file__).resolve().parents[1]
    for path in (root / "configs" / "llm" / "grpo.yml", write_config(tmp_path)):
        result = cli("validate", path)
        assert result.exit_code == 0 and "ok: llm (grpo)" in result.stdout, result.output


def test_every_grpo_mistake_at_once(cli, tmp_path):
    path = write_config(
        tmp_path,
        rewards=["answer_mach", "not a reference"],
        reward_weights=[1.0],
        num_generations=3,
        packing=True,
        eval_batch_size=5,
    )
    result = cli("validate", path)
    assert result.exit_code == 2
    err = result.stderr
    assert "unknown reward `answer_mach` (did you mean `answer_match`?)" in err
    assert "unknown reward `not a reference`" in err
    assert "1 weight(s) for 2 reward(s)" in err
    assert "(4 x 1 = 4) must be a multiple of num_generations (3)" in err and "make it 6" in err
    assert "`training_args.packing` applies to sft, not `trainer: grpo`" in err
    assert "eval_batch_size (5) must be a multiple of num_generations (3)" in err
    assert err.count("config.yml:") >= 6 and "Traceback" not in result.output


def test_grpo_settings_are_refused_for_other_trainers(cli, tmp_path):
    path = write_config(tmp_path, num_generations=4)
    config = yaml.safe_load(path.read_text())
    config["trainer"] = "dpo"
    config["data"]["column_mapping"] = {"prompt": "question", "chosen": "answer", "rejected": "answer"}
    config["training_args"]["beta"] = 0
    path.write_text(yaml.safe_dump(config))
    result = cli("validate", path)
    assert result.exit_code == 2
    assert "`training_args.num_generations` applies to grpo, not `trainer: dpo`" in result.stderr
    assert "`training_args.beta` must be above 0 for `trainer: dpo`" in result.stderr


def test_answer_match_without_an_answer_column_stops_before_the_model_loads(cli, tmp_path, monkeypatch):
    import transformers

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the data was checked")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_model)
    path = write_config(tmp_path)
    config = yaml.safe_load(path.read_text())
    config["data"]["column_mapping"] = {"prompt": "question"}
    path.write_text(yaml.safe_dump(config))
    result = cli("llm", "--config", path)
    assert result.exit_code == 2, result.output
    assert "reward `answer_match` compares completions with an `answer` column" in result.stderr
    assert not (tmp_path / "run" / "run.json").exists()  # a refused run leaves nothing behind


@pytest.mark.parametrize(
    ("source", "reference", "message"),
    [
        (None, "missing.py:digits", "no file"),
        ("raise ValueError('broken on purpose')\n", "rewards.py:digits", "importing"),
        ("x = 1\n", "rewards.py:digits", "has no function `digits`"),
    ],
)
def test_a_broken_reward_file_is_one_clear_line(cli, tmp_path, monkeypatch, source, reference, message):
    monkeypatch.chdir(tmp_path)
    if source is not None:
        (tmp_path / "rewards.py").write_text(source)
    result = cli("llm", "--config", write_config(tmp_path, rewards=[reference]))
    assert result.exit_code == 2, result.output
    assert f"reward `{reference}`" in result.stderr and message in result.stderr
    assert "Traceback" not in result.output


def test_plain_prompts_become_user_messages_under_a_chat_template(tmp_path):
    from autotrain.config.load import load_data
    from autotrain.config.yaml_source import Locator
    from autotrain.data.llm import load_llm_split

    cfg = load_data(yaml.safe_load(write_config(tmp_path).read_text()), Locator("config.yml"), environ={}).config
    rows = load_llm_split(cfg, "train")
    assert rows[0]["prompt"] == [{"role": "user", "content": "What is 22 minus 11?"}]
    assert rows[0]["answer"].endswith("#### 11")
    cfg.data.chat_template = "none"
    assert load_llm_split(cfg, "train")[0]["prompt"] == "What is 22 minus 11?"


# --- training (slow) -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_grpo_with_a_reward_from_a_file_moves_the_weights(cli, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    (tmp_path / "my_rewards.py").write_text(DIGITS_REWARD)
    monkeypatch.chdir(tmp_path)
    path = write_config(tmp_path, rewards=["my_rewards.py:digits", "answer_match"], reward_weights=[1.0, 0.5])
    result = cli("llm", "--config", path)
    assert result.exit_code == 0, result.output
    run = tmp_path / "run"
    logs = [e for e in json.loads((run / "trainer_state.json").read_text())["log_history"] if "loss" in e]
    assert len(logs) == 3 and all(math.isfinite(e["loss"]) for e in logs)
    assert all("rewards/digits/mean" in e and "rewards/answer_match/mean" in e for e in logs)
    assert any(e["reward_std"] > 0 for e in logs), "no step had rewards that differ: nothing to learn from"
    assert "reward " in result.stdout  # the progress line shows the mean reward
    before, after = load_file(TINY / "model.safetensors"), load_file(run / "model.safetensors")
    changed = [k for k in after if k in before and not (before[k] == after[k].to(before[k].dtype)).all()]
    assert changed, "GRPO left every weight unchanged"
