"""`autotrain export -f merged` for the tasks beyond LLMs and classifiers: a full fine-tune's folder copied
(the model's files only, at most rounded), a LoRA run's adapter merged into its base model; either way read
back and checked to predict what the trained model predicts (exit 4 and OUT.failed when it does not). GGUF
and Ollama are refused for them in one line naming `--format merged`."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import yaml
from text_tasks_assets import built, regression_rows, tiny_t5, write_config, write_rows

from autotrain.errors import EXIT_PARITY

REPO = Path(__file__).resolve().parents[1]
TINY_BERT = REPO / "tests" / "assets" / "tiny-bert"

pytestmark = pytest.mark.usefixtures("one_thread")


def finished(folder: Path, cfg: dict) -> Path:
    """`folder` made a completed run of `cfg` (the model already in it), with what training leaves beside
    the model: checkpoints, logs, trainer state, metrics, the card and its plots."""
    (folder / "autotrain.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    (folder / "run.json").write_text(json.dumps({"status": "completed"}), encoding="utf-8")
    for name in ("trainer_state.json", "all_results.json", "train_results.json", "eval_results.json"):
        (folder / name).write_text("{}", encoding="utf-8")
    (folder / "training_args.bin").write_bytes(b"not a model file")
    (folder / "checkpoint-2").mkdir()
    (folder / "checkpoint-2" / "optimizer.pt").write_bytes(b"not a model file")
    (folder / "logs").mkdir()
    (folder / "logs" / "metrics.jsonl").write_text("{}\n", encoding="utf-8")
    (folder / "plots").mkdir()
    (folder / "plots" / "loss.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (folder / "README.md").write_text("# the run\n\n![loss](plots/loss.png)\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def regressor(tmp_path_factory) -> Path:
    """A text-regression run as a full fine-tune leaves it: tiny BERT with a one-output head."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    root = tmp_path_factory.mktemp("export-tasks")
    data = write_rows(root / "data" / "train.csv", regression_rows(random.Random(0), 12))
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(
        TINY_BERT, num_labels=1, problem_type="regression", ignore_mismatched_sizes=True
    )
    with torch.no_grad():  # a random BERT pools every text to about the same vector: a head that magnifies
        model.classifier.weight.normal_(0.0, 50.0)  # the differences tells the rows apart
    run = root / "run"
    model.save_pretrained(run)
    AutoTokenizer.from_pretrained(TINY_BERT).save_pretrained(run)
    cfg = {"task": "text-regression", "base_model": str(TINY_BERT), "project_name": "runs/tiny",
           "data": {"path": str(data.parent), "column_mapping": {"target": "score"}}}  # fmt: skip
    return finished(run, cfg)


def test_a_full_fine_tune_is_copied_without_the_runs_own_files(cli, regressor, tmp_path):
    out = tmp_path / "out"
    result = cli("export", regressor, "-f", "merged", "-o", out)
    assert result.exit_code == 0, result.output
    assert "parity passed: transformers: 8/8 rows agree, max logit diff 0, max prediction diff 0" in result.stdout
    names = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert names == [
        "README.md", "config.json", "export_report.json", "model.safetensors", "plots", "plots/loss.png",
        "tokenizer.json", "tokenizer_config.json",
    ]  # fmt: skip
    assert (out / "model.safetensors").read_bytes() == (regressor / "model.safetensors").read_bytes()
    assert "## Export: merged f32" in (out / "README.md").read_text()
    report = json.loads((out / "export_report.json").read_text())
    assert report["passed"] and report["kind"] == "full" and report["task"] == "text-regression"
    assert report["parity"]["prompts_source"] == f"{regressor.parent / 'data' / 'train.csv'}, first 8 rows"
    assert report["parity"]["readers"]["transformers"]["vs_trained"]["outputs"] == 1  # one batch of 8 rows


def test_the_export_predicts_what_the_run_predicts(cli, regressor, tmp_path):
    """Read back with transformers' own pipeline, the export gives the values `autotrain predict` gives."""
    from transformers import pipeline

    out = tmp_path / "out"
    assert cli("export", regressor, "-o", out).exit_code == 0  # merged: the default beyond LLMs
    data = regressor.parent / "data" / "train.csv"
    result = cli("predict", regressor, "-i", data)
    assert result.exit_code == 0, result.output
    predicted = [json.loads(line) for line in result.stdout.splitlines()]
    scorer = pipeline("text-classification", model=str(out), function_to_apply="none", device="cpu")
    scores = [found["score"] for found in scorer([row["text"] for row in predicted])]
    assert scores == pytest.approx([row["value"] for row in predicted], abs=1e-4)
    assert max(scores) - min(scores) > 0.1  # the rows are told apart: a constant would not prove much


def test_f16_rounds_the_weights_and_says_so_in_the_config(cli, regressor, tmp_path):
    from safetensors import safe_open

    out = tmp_path / "f16"
    result = cli("export", regressor, "-f", "merged", "-q", "f16", "-o", out)
    assert result.exit_code == 0, result.output
    with safe_open(str(out / "model.safetensors"), framework="pt") as handle:
        dtypes = {str(handle.get_tensor(name).dtype) for name in handle.keys()}  # noqa: SIM118 - not a dict
    assert dtypes == {"torch.float16"}
    assert json.loads((out / "config.json").read_text())["dtype"] == "float16"
    figures = json.loads((out / "export_report.json").read_text())["parity"]["readers"]["transformers"]
    assert figures["vs_written_weights"]["max_logit_diff"] < 1e-5
    assert 0 < figures["vs_trained"]["max_logit_diff"] < 1e-2  # rounded: close, not equal


def test_a_sharded_model_is_copied_shard_by_shard(cli, regressor, tmp_path):
    """Weights in several files with their index: every shard rounded, the index's size made to match."""
    from transformers import AutoModelForSequenceClassification

    run = tmp_path / "sharded"
    shutil.copytree(regressor, run, ignore=shutil.ignore_patterns("model.safetensors"))
    AutoModelForSequenceClassification.from_pretrained(regressor).save_pretrained(run, max_shard_size="30KB")
    shards = sorted(p.name for p in run.glob("model-*.safetensors"))
    assert len(shards) > 1
    result = cli("export", run, "-f", "merged", "-q", "bf16", "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    assert sorted(p.name for p in out.glob("model-*.safetensors")) == shards
    index = json.loads((out / "model.safetensors.index.json").read_text())
    stored = json.loads((run / "model.safetensors.index.json").read_text())["metadata"]["total_size"]
    assert index["metadata"]["total_size"] == stored // 2  # every weight a float: 2 bytes instead of 4
    assert json.loads((out / "export_report.json").read_text())["passed"]


def test_weights_that_are_not_the_trained_ones_fail_and_are_kept_aside(cli, regressor, tmp_path, monkeypatch):
    from safetensors.torch import load_file, save_file

    from autotrain.export import model_files

    copy = model_files.copy_model

    def off_by_a_little(source, stage, quant, remote_code=False):
        files = copy(source, stage, quant, remote_code)
        weights = load_file(str(files[0]))
        weights["classifier.bias"] = weights["classifier.bias"] + 0.01
        save_file(weights, str(files[0]), metadata={"format": "pt"})
        return files

    monkeypatch.setattr(model_files, "copy_model", off_by_a_little)
    out = tmp_path / "out"
    result = cli("export", regressor, "-f", "merged", "-o", out)
    assert result.exit_code == EXIT_PARITY
    assert "logits differ by 0.01 from the weights the file holds" in result.stderr
    assert not out.exists() and (tmp_path / "out.failed" / "model.safetensors").is_file()


def test_a_full_disk_is_one_line_and_leaves_nothing(cli, regressor, tmp_path, monkeypatch):
    import errno

    from autotrain.export import model_files

    real = model_files.shutil.copyfile

    def full(source, target, *args, **kwargs):
        if Path(target).suffix == ".safetensors":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(source, target, *args, **kwargs)

    monkeypatch.setattr(model_files.shutil, "copyfile", full)
    result = cli("export", regressor, "-f", "merged", "-o", tmp_path / "out")
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output
    assert errors[0].startswith(f"error: no space left on the device writing `out` in `{tmp_path}`: it needs about ")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no staging folder, nothing under `out`, no lock


def test_a_second_export_to_the_same_output_is_refused(cli, regressor, tmp_path):
    import os

    from autotrain.export.output import locked

    out = tmp_path / "out"
    with locked(out):  # another export holds it (flock: a second open of the lock file conflicts)
        result = cli("export", regressor, "-f", "merged", "-o", out)
        assert (tmp_path / ".out.lock").is_file()  # the refused export leaves the holder's lock alone
    assert result.exit_code == 2
    assert f"error: another export to `{out}` is under way (pid {os.getpid()})" in result.stderr
    assert not out.exists() and not (tmp_path / ".out.lock").exists()  # the holder's release removed it


@pytest.mark.parametrize("fmt", ["gguf", "ollama"])
def test_gguf_and_ollama_are_refused_naming_merged(cli, tmp_path, fmt):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    cfg = {"task": "seq2seq", "base_model": "t5-small", "project_name": "runs/tiny", "data": {"path": "x/y"}}
    finished(run, cfg)
    result = cli("export", run, "-f", fmt)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: `{run}` holds a seq2seq model: it exports as `--format merged` only (GGUF and Ollama are for LLMs)"
    ]
    assert not list(run.glob("export-*")) and not list(run.glob(".export*"))


def test_a_module_folder_outside_the_run_is_refused(tmp_path):
    from autotrain.errors import UserInputError
    from autotrain.export.model_files import model_files

    (tmp_path / "elsewhere").mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "modules.json").write_text(json.dumps([{"path": ""}, {"path": "../elsewhere"}]))
    with pytest.raises(UserInputError, match="names the module folder `../elsewhere`, which is not a folder inside"):
        model_files(run)


def test_the_rounded_reference_rounds_the_buffers_the_file_holds_too():
    """A detector's frozen batch-norm statistics are saved with its weights and rounded with them; a buffer
    that is not saved (rotary frequencies) is not in the file and stays as it is."""
    import torch

    from autotrain.export.parity import rounded_copy

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    model[1].running_mean.fill_(1 / 3)
    model.register_buffer("unsaved", torch.full((2,), 1 / 3), persistent=False)
    twin = rounded_copy(model, lambda array: array.astype("float16").astype("float32"))
    assert twin[1].running_mean[0].item() == torch.tensor(1 / 3).half().item() != 1 / 3
    assert twin.unsaved[0].item() == torch.tensor(1 / 3).item()
    assert twin[0].weight.dtype == torch.float32 and model[1].running_mean[0].item() == torch.tensor(1 / 3).item()


def test_data_that_cannot_be_read_here_gives_fixed_probes(tmp_path):
    from autotrain.config.load import load_config
    from autotrain.export.predictions import probe_rows

    config = tmp_path / "c.yml"
    config.write_text("task: extractive-qa\nbase_model: b\nproject_name: p\ndata:\n  path: someone/squad\n")
    rows, where = probe_rows(load_config(config).config)
    assert where == "fixed probe inputs (the data could not be read: `someone/squad` [train] is not a local file)"
    assert rows.kind == "question" and set(rows.values[0]) == {"question", "context"}


def test_a_qlora_adapter_is_merged_into_its_unquantized_base(cli, tmp_path_factory, tmp_path):
    """A seq2seq QLoRA run (its base loaded in 4 bits for training) exports on a CPU: the adapter goes onto
    the base loaded unquantized, and the merged folder gives the logits of base + adapter."""
    import torch
    from peft import LoraConfig, get_peft_model
    from test_seq2seq import data_folder
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    root = tmp_path_factory.getbasetemp() / "text-tasks"
    model_dir, data = built(root, "tiny-t5", tiny_t5), built(root, "seq2seq-data", data_folder)
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q", "v"], init_lora_weights=False)
    adapted = get_peft_model(AutoModelForSeq2SeqLM.from_pretrained(model_dir), lora).eval()
    run = tmp_path / "run"
    adapted.save_pretrained(run)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(run)
    cfg = {"task": "seq2seq", "base_model": str(model_dir), "project_name": "runs/q",
           "data": {"path": str(data), "valid_split": "valid", "column_mapping": {"target": "summary"}},
           "peft": {"r": 4, "alpha": 8, "target_modules": ["q", "v"], "quantization": "int4"}}  # fmt: skip
    finished(run, cfg)
    result = cli("export", run, "-f", "merged")
    assert result.exit_code == 0, result.output
    out = run / "export-merged-f32"
    assert json.loads((out / "export_report.json").read_text())["kind"] == "qlora"
    merged = AutoModelForSeq2SeqLM.from_pretrained(out, dtype=torch.float32).eval()
    ids, start = torch.tensor([[5, 9, 14, 1]]), torch.tensor([[0, 7]])
    with torch.inference_mode():
        expected = adapted(input_ids=ids, decoder_input_ids=start).logits
        got = merged(input_ids=ids, decoder_input_ids=start).logits
        plain = AutoModelForSeq2SeqLM.from_pretrained(model_dir)(input_ids=ids, decoder_input_ids=start).logits
    assert float((expected - got).abs().max()) < 1e-5 < float((plain - got).abs().max())


# --- trained runs (slow) ---------------------------------------------------------------------------------

SEQ2SEQ = """\
task: seq2seq
base_model: {model}
project_name: {project}
data:
  path: {data}
  valid_split: valid
  column_mapping:
    target: summary
peft:
  r: 8
  alpha: 16
  target_modules: all-linear
training_args:
  epochs: 3
  batch_size: 16
  lr: 2.0e-2
  max_length: 16
  max_target_length: 8
  optimizer: adamw_torch
  logging_steps: 20
"""


@pytest.fixture(scope="module")
def adapter_run(tmp_path_factory) -> Path:
    """A seq2seq LoRA run that saved its adapter only (no `merge_adapter`): export has to merge it."""
    from test_seq2seq import data_folder
    from typer.testing import CliRunner

    from autotrain.cli.main import app

    root = tmp_path_factory.getbasetemp() / "text-tasks"
    model, data = built(root, "tiny-t5", tiny_t5), built(root, "seq2seq-data", data_folder)
    folder = tmp_path_factory.mktemp("seq2seq-lora")
    config = write_config(folder / "config.yml", SEQ2SEQ, model=model, project=folder / "run", data=data)
    result = CliRunner().invoke(app, ["seq2seq", "--config", str(config)])
    assert result.exit_code == 0, result.output
    return folder / "run"


def _generations(model, tokenizer, texts: list[str]) -> list[str]:
    import torch

    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        ids = model.generate(**encoded, max_length=8, num_beams=1)
    return [t.strip() for t in tokenizer.batch_decode(ids, skip_special_tokens=True)]


@pytest.mark.slow
def test_a_seq2seq_adapter_is_merged_and_generates_what_the_run_does(cli, adapter_run, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    assert (adapter_run / "adapter_config.json").is_file() and not (adapter_run / "merged").exists()
    out = tmp_path / "out"
    result = cli("export", adapter_run, "-f", "merged", "-o", out)
    assert result.exit_code == 0, result.output
    assert "parity passed: transformers: 8/8 rows agree" in result.stdout
    report = json.loads((out / "export_report.json").read_text())
    assert (
        report["passed"]
        and report["kind"] == "lora"
        and "valid.jsonl, first 8 rows" in report["parity"]["prompts_source"]
    )
    assert not list(out.glob("adapter*")) and (out / "config.json").is_file()

    valid = Path(yaml.safe_load((adapter_run / "autotrain.yaml").read_text())["data"]["path"]) / "valid.jsonl"
    texts = [json.loads(line)["text"] for line in valid.read_text().splitlines()]
    exported = AutoModelForSeq2SeqLM.from_pretrained(out, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    got = _generations(exported, tokenizer, texts)
    base_dir = yaml.safe_load((adapter_run / "autotrain.yaml").read_text())["base_model"]
    base = AutoModelForSeq2SeqLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    untrained = _generations(base, tokenizer, texts)
    adapted = PeftModel.from_pretrained(base, str(adapter_run)).eval()  # the adapter as trained, not merged
    assert got == _generations(adapted, tokenizer, texts)
    assert sum(a != b for a, b in zip(got, untrained, strict=True)) > len(texts) // 2  # the adapter is in it

    result = cli("predict", adapter_run, "-i", valid)
    assert result.exit_code == 0, result.output
    assert got == [json.loads(line)["generated"] for line in result.stdout.splitlines()]


@pytest.mark.slow
def test_an_adapter_merged_wrong_fails_the_check(cli, adapter_run, tmp_path, monkeypatch):
    """Saving the base model without the adapter (a merge that did nothing) is caught: exit 4, OUT.failed."""
    from transformers import AutoModelForSeq2SeqLM

    from autotrain.export import model_files

    save = model_files.save_merged

    def without_the_adapter(model, processor, quant, stage):
        base_dir = yaml.safe_load((adapter_run / "autotrain.yaml").read_text())["base_model"]
        return save(AutoModelForSeq2SeqLM.from_pretrained(base_dir), processor, quant, stage)

    monkeypatch.setattr(model_files, "save_merged", without_the_adapter)
    out = tmp_path / "out"
    result = cli("export", adapter_run, "-f", "merged", "-o", out)
    assert result.exit_code == EXIT_PARITY, result.output
    assert "rows get the trained model's predictions (text, labels, spans)" in result.stderr
    assert not out.exists() and (tmp_path / "out.failed" / "export_report.json").is_file()


@pytest.mark.slow
def test_a_token_classifier_exported_tags_as_the_run_does(cli, tmp_path_factory, tmp_path):
    """A trained full fine-tune at f16: transformers' own NER pipeline on the export finds the entities
    `autotrain predict` finds with the run."""
    from test_token_classification import trained
    from transformers import pipeline

    folder = trained(tmp_path_factory.getbasetemp() / "text-tasks")
    run, out = folder / "run", tmp_path / "ner"
    result = cli("export", run, "-f", "merged", "-q", "f16", "-o", out)
    assert result.exit_code == 0, result.output
    assert not (out / "checkpoint-30").exists() and not (out / "trainer_state.json").exists()
    texts = ["alice smith lives in paris .", "we saw bob near oslo .", "carol works in rome ."]
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    result = cli("predict", run, "-i", rows)
    assert result.exit_code == 0, result.output
    expected = [[(e["entity"], e["text"]) for e in json.loads(line)["entities"]] for line in result.stdout.splitlines()]
    tagger = pipeline("token-classification", model=str(out), aggregation_strategy="first", device="cpu")
    assert [[(e["entity_group"], e["word"]) for e in found] for found in tagger(texts)] == expected
    assert ("PER", "alice smith") in expected[0] and ("LOC", "paris") in expected[0]  # it learned to tag


@pytest.mark.slow
def test_a_vlm_adapter_is_merged_with_its_processor(cli, tmp_path_factory, tmp_path):
    """A tiny PaliGemma's LoRA adapter (two steps) merged into its base: the folder loads with the Auto
    classes and gives the logits of the base with the adapter on it, unmerged."""
    import torch
    from peft import PeftModel
    from test_vlm import CONFIG, data_folder
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from typer.testing import CliRunner
    from vision_assets import tiny_paligemma

    from autotrain.cli.main import app
    from autotrain.data.images import read_image

    root = tmp_path_factory.getbasetemp() / "vision-tasks"
    model = built(root, "tiny-paligemma", tiny_paligemma)
    data = built(root, "export-vqa-data", lambda folder: data_folder(folder, 32, 8))
    config = CONFIG + "peft:\n  r: 4\n  alpha: 8\n"
    config = write_config(
        tmp_path / "c.yml", config, model=model, project=tmp_path / "run", data=data, epochs=1, lr=1e-2
    )
    result = CliRunner().invoke(app, ["vlm", "--config", str(config), "--set", "training_args.max_steps=2"])
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    result = cli("export", tmp_path / "run", "-f", "merged", "-o", out)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "export_report.json").read_text())
    assert report["kind"] == "lora" and report["parity"]["prompts"] == 8 and report["passed"]

    processor = AutoProcessor.from_pretrained(out)
    row = json.loads((data / "valid" / "metadata.jsonl").read_text().splitlines()[0])
    image = read_image(str(data / "valid" / row["file_name"]))
    inputs = processor(images=image, text="<image>" + row["question"], return_tensors="pt")
    exported = AutoModelForImageTextToText.from_pretrained(out, dtype=torch.float32).eval()
    base = AutoModelForImageTextToText.from_pretrained(model, dtype=torch.float32).eval()
    with torch.inference_mode():
        untrained = base(**inputs).logits
        adapted = PeftModel.from_pretrained(base, str(tmp_path / "run")).eval()(**inputs).logits
        got = exported(**inputs).logits
    assert float((got - adapted).abs().max()) < 1e-4 < float((got - untrained).abs().max())
