"""AutoTrain Advanced's example configs for image scoring, object detection and VLM fine-tuning
(tests/advanced_configs/{image_scoring,object_detection,vlm}, copied unchanged from its repository): each one
validates and migrates, and each one trains to completion on local data of its own columns and splits and
a tiny local model (hub ids swapped for local paths; what needs a GPU set aside on the command line)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
ADVANCED = REPO / "tests" / "advanced_configs"
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
def test_validates(cli, path):
    result = cli("validate", path, env=HUB_ENV)
    assert result.exit_code == 0, result.output
    assert f"ok: {FAMILIES[path.parent.name]}" in result.stdout and "(AutoTrain Advanced format)" in result.stdout


@pytest.mark.parametrize("path", CONFIGS, ids=name)
def test_migrates_to_a_native_config_that_validates(cli, path, tmp_path):
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
