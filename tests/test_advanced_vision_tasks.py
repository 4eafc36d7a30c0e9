"""AutoTrain Advanced's example configs for image scoring, object detection and VLM fine-tuning
(tests/advanced_configs/{image_scoring,object_detection,vlm}, copied unchanged from its repository): each one
validates and migrates, and each one trains to completion on local data of its own columns and splits and
a tiny local model (hub ids swapped for local paths; what needs a GPU set aside on the command line)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml
from vision_assets import box_rows, count_rows, tiny_paligemma, tiny_yolos, vqa_rows, write_jsonl

REPO = Path(__file__).resolve().parents[1]
ADVANCED = REPO / "tests" / "advanced_configs"
ASSETS = REPO / "tests" / "assets"
FAMILIES = {"image_scoring": "image-regression", "object_detection": "object-detection", "vlm": "vlm"}
CONFIGS = sorted(p for p in ADVANCED.glob("*/*.yml") if p.parent.name in FAMILIES)
HUB_ENV = {"HF_USERNAME": "me", "HF_TOKEN": "hf_example"}


def name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def test_every_example_of_the_three_tasks_is_here():
    assert [name(p) for p in CONFIGS] == [
        "image_scoring/hub_dataset.yml",
        "image_scoring/image_quality.yml",
        "image_scoring/local.yml",
        "object_detection/hub_dataset.yml",
        "object_detection/local.yml",
        "vlm/paligemma_vqa.yml",
    ]


@pytest.mark.parametrize("path", CONFIGS, ids=name)
def test_validates(cli, placeholder_data, path):
    result = cli("validate", path, env=HUB_ENV)
    assert result.exit_code == 0, result.output
    assert f"ok: {FAMILIES[path.parent.name]}" in result.stdout and "(AutoTrain Advanced format)" in result.stdout


@pytest.mark.parametrize("path", CONFIGS, ids=name)
def test_migrates_to_a_native_config_that_validates(cli, placeholder_data, path, tmp_path):
    out = tmp_path / "native.yml"
    result = cli("migrate", path, "-o", out, env=HUB_ENV)
    assert result.exit_code == 0, result.output
    native = yaml.safe_load(out.read_text())
    assert "params" not in native and native["task"] == FAMILIES[path.parent.name]
    result = cli("validate", out, env=HUB_ENV)
    assert result.exit_code == 0, result.output
    assert "(AutoTrain Advanced format)" not in result.stdout


def test_what_the_vqa_example_asks_for_is_kept(cli, tmp_path):
    """`vlm:vqa` with `peft: true` and `quantization: int4`: a LoRA adapter on a 4-bit base, the question as
    the prompt and `multiple_choice_answer` as the answer; object detection keeps its image size."""
    out = tmp_path / "native.yml"
    assert cli("migrate", ADVANCED / "vlm" / "paligemma_vqa.yml", "-o", out, env=HUB_ENV).exit_code == 0
    native = yaml.safe_load(out.read_text())
    assert native["trainer"] == "vqa" and native["peft"] == {"enabled": True, "quantization": "int4"}
    assert native["data"]["column_mapping"] == {
        "image": "image",
        "prompt": "question",
        "answer": "multiple_choice_answer",
    }
    out = tmp_path / "detection.yml"
    assert cli("migrate", ADVANCED / "object_detection" / "local.yml", "-o", out, env=HUB_ENV).exit_code == 0
    native = yaml.safe_load(out.read_text())
    assert native["training_args"]["image_square_size"] == 600
    assert native["training_args"]["early_stopping"] == {"patience": 50, "threshold": 0.001}


def test_a_detection_setting_is_refused_for_another_task(cli, tmp_path):
    config = tmp_path / "c.yml"
    text = (ADVANCED / "image_scoring" / "local.yml").read_text()
    config.write_text(text.replace("params:\n", "params:\n  image_square_size: 512\n"))
    result = cli("validate", config, env=HUB_ENV)
    assert result.exit_code == 2
    assert "params.image_square_size: `image_square_size` applies to object-detection, not" in result.stderr


# --- two training steps on local data and the tiny models (slow) -----------------------------------------


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def local_data(config: dict, tmp: Path) -> Path:
    """Local data shaped as the config's own: its columns (its column_mapping names them) and its splits,
    as AutoTrain Advanced's local layout (SPLIT/ with images and a metadata.jsonl) or, for a hub dataset, a
    file per split with image paths."""
    data, folder = config["data"], tmp / "data"
    columns = data.get("column_mapping") or {}
    splits = [s for s in (data.get("train_split"), data.get("valid_split")) if s]
    rng = random.Random(0)
    for split in splits:
        if config["task"] == "object_detection":
            rows = box_rows(folder / split, rng, 6, most=1)
            rows = [{"file_name": r["file_name"], columns["objects_column"]: r["objects"]} for r in rows]
        elif config["task"] == "image_regression":
            rows = count_rows(folder / split, rng, 6)
            rows = [{"file_name": r["file_name"], columns["target_column"]: r["target"]} for r in rows]
        else:
            rows = [
                {
                    "file_name": r["file_name"],
                    columns["prompt_text_column"]: r["question"],
                    columns["text_column"]: r["answer"],
                }
                for r in vqa_rows(folder / split, rng, 4)
            ]
        if data["path"].startswith("data/"):  # local: images and metadata.jsonl, file_name read as the image
            write_jsonl(folder / split / "metadata.jsonl", rows)
        else:  # a hub dataset: a table per split, its image column holding paths
            image = columns["image_column"]
            write_jsonl(folder / f"{split}.jsonl", [{image: f"{split}/{r.pop('file_name')}", **r} for r in rows])
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "image_scoring": ASSETS / "tiny-vit",
        "object_detection": tiny_yolos(root / "tiny-yolos"),
        "vlm": tiny_paligemma(root / "tiny-paligemma"),
    }


@pytest.mark.slow
@pytest.mark.parametrize("path", CONFIGS, ids=name)
def test_trains_two_steps_on_local_data(cli, path, tmp_path, monkeypatch, models):
    """Every example config trains to the end (two steps, then the final evaluation and the saved model):
    its model and data swapped for a tiny local model and local data of the same columns and splits,
    GPU-only settings (fp16, 4-bit loading) and tensorboard set aside."""
    config = yaml.safe_load(path.read_text())
    params = config.get("params") or {}
    overrides = [
        f"base_model={models[path.parent.name]}",
        f"data.path={local_data(config, tmp_path)}",
        f"project_name={tmp_path / 'run'}",
        "log=none",
        "hub.push_to_hub=false",
        "training_args.max_steps=2",
        "training_args.batch_size=2",
        "training_args.mixed_precision=no",
        *(["peft.quantization=null"] if params.get("quantization") else []),
    ]
    monkeypatch.chdir(tmp_path)
    result = cli(FAMILIES[path.parent.name], "--config", path, *sets(*overrides), env=HUB_ENV)
    assert result.exit_code == 0, result.output
    run = tmp_path / "run"
    state = json.loads((run / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert losses and all(loss == loss and abs(loss) < 1e4 for loss in losses)
    evaluated = json.loads((run / "eval_results.json").read_text())
    expected = {"image_scoring": "eval_r2", "object_detection": "eval_map_50", "vlm": "eval_exact_match"}
    assert expected[path.parent.name] in evaluated
