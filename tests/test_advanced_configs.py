"""AutoTrain Advanced's own example configs (tests/advanced_configs/, copied unchanged from its repository):
each one validates and migrates, and each one trains for two steps on local data of its own columns and splits
and the tiny local models, with what needs a GPU (fp16, int4, paged optimizers, tensorboard) set aside on the
command line."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
ADVANCED = REPO / "tests" / "advanced_configs"
ASSETS = REPO / "tests" / "assets"
DATA = ASSETS / "data"
# The text tasks beyond classification have their own test module (tests/test_advanced_text_tasks.py).
FAMILIES = ("llm_finetuning", "text_classification", "image_classification")
CONFIGS = sorted(p for p in ADVANCED.glob("*/*.yml") if p.parent.name in FAMILIES)
HUB_ENV = {"HF_USERNAME": "me", "HF_TOKEN": "hf_example"}
NO_HUB_ENV = {"HF_USERNAME": None, "HF_TOKEN": None}


def name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def test_every_example_of_the_three_tasks_is_here():
    assert len(CONFIGS) == 21
    assert {p.parent.name for p in CONFIGS} == set(FAMILIES)


@pytest.mark.parametrize("path", CONFIGS, ids=name)
def test_validates(cli, placeholder_data, path):
    result = cli("validate", path, env=HUB_ENV)
    assert result.exit_code == 0, result.output
    assert "ok:" in result.stdout and "(AutoTrain Advanced format)" in result.stdout


@pytest.mark.parametrize("path", CONFIGS, ids=name)
def test_migrates_to_a_native_config_that_validates(cli, placeholder_data, path, tmp_path):
    out = tmp_path / "native.yml"
    result = cli("migrate", path, "-o", out, env=HUB_ENV)
    assert result.exit_code == 0, result.output
    native = yaml.safe_load(out.read_text())
    assert "params" not in native and native["task"] in ("llm", "text-classification", "image-classification")
    result = cli("validate", out, env=HUB_ENV)
    assert result.exit_code == 0, result.output
    assert "(AutoTrain Advanced format)" not in result.stdout


def test_settings_another_trainer_uses_are_dropped_with_a_notice(cli):
    """AutoTrain Advanced takes `max_prompt_length` for every trainer and uses it in ORPO/DPO only."""
    path = ADVANCED / "llm_finetuning" / "llama3-8b-sft-unsloth.yml"
    result = cli("validate", path, env=HUB_ENV)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert any(":18:3: params.max_prompt_length: dropped: `trainer: sft` does not use it" in n for n in notes), notes
    assert any("params.unsloth: ignored" in n for n in notes), notes
    result = cli("migrate", path, env=HUB_ENV)
    assert "max_prompt_length" not in result.stdout


def test_native_configs_stay_strict_about_trainer_settings(cli, tmp_path):
    config = tmp_path / "clm.yml"
    text = (REPO / "configs" / "llm" / "quickstart.yml").read_text()
    config.write_text(text.replace("training_args:\n", "training_args:\n  max_prompt_length: 16\n", 1))
    result = cli("validate", config)
    assert result.exit_code == 2
    from autotrain.config.trainers import users

    readers = "/".join(users("max_prompt_length"))  # from the table: a new trainer changes the list
    assert f"`training_args.max_prompt_length` applies to {readers}, not `trainer: clm`" in result.stderr


def test_task_aliases_of_autotrain_advanced(cli):
    """`lm_training` (gpt2_sft.yml) and `text_multi_class_classification` (imdb_bert.yml) are its aliases."""
    for path, kind in (
        ("llm_finetuning/gpt2_sft.yml", "llm (sft)"),
        ("text_classification/imdb_bert.yml", "text-classification"),
    ):
        result = cli("validate", ADVANCED / path, env=HUB_ENV)
        assert result.exit_code == 0 and f"ok: {kind}" in result.stdout, result.output


@pytest.mark.parametrize("path", ["llm_finetuning/smollm2_orpo.yml", "llm_finetuning/llama3-8b-dpo-qlora.yml"])
def test_an_unset_token_is_no_error_when_nothing_is_pushed(cli, path):
    result = cli("validate", ADVANCED / path, env=NO_HUB_ENV)
    assert result.exit_code == 0, result.output
    assert "hub.token: its variable is not set, so no token is used" in result.stderr


def test_an_unset_token_is_an_error_when_pushing(cli):
    result = cli("validate", ADVANCED / "llm_finetuning" / "smollm2.yml", env=NO_HUB_ENV)
    assert result.exit_code == 2
    assert "environment variable `HF_TOKEN` is not set" in result.stderr


def test_an_unset_token_in_a_native_config_when_nothing_is_pushed(cli, tmp_path):
    config = tmp_path / "c.yml"
    text = (REPO / "configs" / "llm" / "quickstart.yml").read_text()
    config.write_text(text + "hub:\n  push_to_hub: false\n  token: ${HF_TOKEN}\n")
    result = cli("validate", config, env=NO_HUB_ENV)
    assert result.exit_code == 0, result.output
    config.write_text(text + "hub:\n  push_to_hub: false\n  token: ${HF_TOKEN\n")  # malformed: still an error
    assert cli("validate", config, env=NO_HUB_ENV).exit_code == 2


def test_a_migrated_repo_id_needs_its_variable_only_when_pushing(cli, tmp_path):
    """Migrated with `push_to_hub: true`, the native config has `repo_id: ${HF_USERNAME}/NAME`. Pushing
    turned off, the unset HF_USERNAME is no error (nothing is pushed: no repository is named); pushing, it is
    one located line, not also the rule's "needs `hub.repo_id`" about the empty value it left."""
    native = tmp_path / "native.yml"
    assert cli("migrate", ADVANCED / "llm_finetuning" / "smollm2.yml", "-o", native).exit_code == 0
    text = native.read_text()
    assert "repo_id: ${HF_USERNAME}/" in text and "push_to_hub: true" in text, text
    off = cli("validate", native, "--set", "hub.push_to_hub=false", env=NO_HUB_ENV)
    assert off.exit_code == 0, off.output
    native.with_name("off.yml").write_text(text.replace("push_to_hub: true", "push_to_hub: false"))
    assert cli("validate", native.with_name("off.yml"), env=NO_HUB_ENV).exit_code == 0

    pushing = cli("validate", native, env={"HF_USERNAME": None, "HF_TOKEN": "hf_example"})
    assert pushing.exit_code == 2, pushing.output
    line = text.splitlines().index(next(x for x in text.splitlines() if "repo_id:" in x)) + 1
    problems = [x for x in pushing.stderr.splitlines() if x.startswith(str(native))]
    assert problems == [
        f"{native}:{line}:3: hub.repo_id: environment variable `HF_USERNAME` is not set (and no "
        "`${HF_USERNAME:-default}`)"
    ], pushing.stderr


@pytest.mark.no_cuda
def test_a_paged_8bit_optimizer_is_refused_on_this_cpu_with_what_to_do(cli):
    """The 70B SFT example asks for `paged_adamw_8bit` (bitsandbytes, CUDA): the dry run names both and the
    optimizer that runs here."""
    path = ADVANCED / "llm_finetuning" / "llama3-70b-sft.yml"
    result = cli(
        "llm", "--config", path, "--dry-run", *sets("log=none", "training_args.mixed_precision=no"), env=HUB_ENV
    )
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if "training_args.optimizer: paged_adamw_8bit" in line]
    assert any("needs a CUDA GPU" in e and "came_8bit" in e for e in errors), result.stderr
    if importlib.util.find_spec("bitsandbytes") is None:
        assert any("needs bitsandbytes: pip install bitsandbytes" in e for e in errors), result.stderr
    assert "Traceback" not in result.output


# --- two training steps on local data and the tiny models (slow) -----------------------------------------


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def preference_rows() -> str:
    """tests/assets/data/preferences.jsonl with AutoTrain Advanced's column names (prompt, chosen, rejected)."""
    rows = [json.loads(line) for line in (DATA / "preferences.jsonl").read_text().splitlines()]
    rows = [{"prompt": r["question"], "chosen": r["good"], "rejected": r["bad"]} for r in rows]
    return "".join(json.dumps(row) + "\n" for row in rows)


def local_data(config: dict, tmp: Path) -> Path:
    """Local data shaped as the config's own: its columns (its column_mapping names them), and a folder with
    one file (or image sub-folder) per split it names, so each config runs with its splits as written."""
    data, params = config["data"], config.get("params") or {}
    splits = [s for s in (data.get("train_split"), data.get("valid_split")) if s]
    folder = tmp / "data"
    folder.mkdir()
    task = config["task"]
    if "image" in task:
        sources = [DATA / "colors" / "train", DATA / "colors" / "validation"]
        for i, split in enumerate(splits):
            shutil.copytree(sources[min(i, 1)], folder / split)
        return folder
    if "text" in task and "classification" in task:
        source, suffix = (DATA / "sentiment.csv").read_text(), "csv"
    elif task in ("llm-grpo",) or params.get("trainer") == "grpo":
        source, suffix = (DATA / "math.jsonl").read_text(), "jsonl"
    elif task in ("llm-orpo", "llm-dpo", "llm-reward") or params.get("trainer") in ("orpo", "dpo", "reward"):
        source, suffix = preference_rows(), "jsonl"
    elif data.get("column_mapping", {}).get("text_column") == "messages":
        source, suffix = (DATA / "chat.jsonl").read_text(), "jsonl"
    else:
        source, suffix = (DATA / "text.jsonl").read_text(), "jsonl"
    for split in splits:
        (folder / f"{split}.{suffix}").write_text(source)
    return folder


PROMPT = ("training_args.max_prompt_length=32",)  # below max_length=64
MODELS = {"llm_finetuning": "tiny-llama", "text_classification": "tiny-bert", "image_classification": "tiny-vit"}


def local_overrides(path: str, config: dict) -> list[str]:
    """What a CPU machine without the hub needs changed; everything else runs as the file says."""
    params = config.get("params") or {}
    trainer = params.get("trainer") or config["task"].removeprefix("llm-")
    is_llm = path.startswith("llm")
    return [
        "training_args.mixed_precision=no",  # fp16 / bf16 GPU settings
        *(["training_args.max_length=64"] if is_llm else []),
        *(["peft.quantization=null"] if params.get("quantization") else []),  # 4/8-bit loading needs CUDA
        *(["training_args.optimizer=came_8bit"] if "paged" in str(params.get("optimizer")) else []),  # CUDA too
        *(PROMPT if is_llm and trainer in ("orpo", "dpo", "grpo") else ()),
        # short completions keep GRPO's sampling quick on the CPU
        *(["training_args.max_completion_length=8"] if trainer == "grpo" else []),
    ]


TASKS = {
    "llm_finetuning": "llm",
    "text_classification": "text-classification",
    "image_classification": "image-classification",
}


@pytest.mark.slow
@pytest.mark.parametrize("path", CONFIGS, ids=name)
def test_trains_two_steps_on_local_data(cli, path, tmp_path, monkeypatch):
    """Every example config trains: its model and data swapped for a tiny local model and local data of
    the same columns and splits, GPU-only settings set aside."""
    config = yaml.safe_load(path.read_text())
    family = path.parent.name
    overrides = [
        f"base_model={ASSETS / MODELS[family]}",
        f"data.path={local_data(config, tmp_path)}",
        f"project_name={tmp_path / 'run'}",
        "log=none",
        "hub.push_to_hub=false",
        "training_args.max_steps=2",
        "training_args.batch_size=2",
        *local_overrides(name(path), config),
    ]
    monkeypatch.chdir(tmp_path)
    result = cli(TASKS[family], "--config", path, *sets(*overrides), env=HUB_ENV)
    assert result.exit_code == 0, result.output
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert losses and all(loss == loss and abs(loss) < 1e4 for loss in losses)
