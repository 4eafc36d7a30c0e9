"""vlm: image + question -> answer. A tiny random PaliGemma learns to answer what colour a square is and on
which side it stands (answer accuracy far above the untrained model's 0 and above the 37.5% that knowing
only the questions gives), predicts and evaluates; the loss counts the answers' tokens only; 4-bit loading
is refused on a CPU; bad data is one line naming the file, the row and the column."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from text_tasks_assets import built, results, write_config
from vision_assets import tiny_idefics3, tiny_paligemma, vqa_rows, write_jsonl

CONFIG = """\
task: vlm
trainer: vqa
base_model: {model}
project_name: {project}
data:
  path: {data}
  valid_split: valid
  column_mapping:
    prompt: question
training_args:
  epochs: {epochs}
  batch_size: 16
  lr: {lr}
  warmup_ratio: 0.1
  max_length: 64
  max_new_tokens: 4
  optimizer: adamw_torch
  logging_steps: 50
  eval_strategy: "no"
  save_steps: 100000
"""


def data_folder(folder: Path, train: int = 256, valid: int = 64) -> Path:
    rng = random.Random(0)
    for split, count in (("train", train), ("valid", valid)):
        write_jsonl(folder / split / "metadata.jsonl", vqa_rows(folder / split, rng, count))
    return folder


@pytest.fixture(scope="session")
def paligemma(tmp_path_factory) -> Path:
    return built(tmp_path_factory.getbasetemp() / "vision-tasks", "tiny-paligemma", tiny_paligemma)


@pytest.fixture(scope="session")
def answerer(tmp_path_factory, paligemma):
    """The tiny PaliGemma evaluated untrained (one step at a learning rate of 1e-9) and trained for 25 epochs
    (400 steps)."""
    from typer.testing import CliRunner

    from autotrain.cli.main import app

    root = tmp_path_factory.getbasetemp() / "vision-tasks"

    def train(folder: Path) -> Path:
        model, data = paligemma, data_folder(folder / "data")
        for name, epochs, lr in (("untrained", 0.0625, "1.0e-9"), ("run", 25, "3.0e-3")):
            config = write_config(
                folder / f"{name}.yml", CONFIG, model=model, project=folder / name, data=data, epochs=epochs, lr=lr
            )
            result = CliRunner().invoke(app, ["vlm", "--config", str(config)])
            assert result.exit_code == 0, result.output
        return folder

    return built(root, "vlm-run", train)


@pytest.mark.slow
def test_learns_to_answer_about_the_image(answerer):
    untrained, trained = results(answerer / "untrained"), results(answerer / "run")
    # Answering "right" to every where-question and one colour to every colour-question scores 37.5%.
    assert trained["eval_exact_match"] > 60 and untrained["eval_exact_match"] < 10, (untrained, trained)
    card = (answerer / "run" / "README.md").read_text()
    assert "| eval_exact_match |" in card


@pytest.mark.slow
def test_predict_and_evaluate(cli, answerer, tmp_path):
    run, valid = answerer / "run", answerer / "data" / "valid"
    out = tmp_path / "answers.jsonl"
    result = cli("predict", run, "-i", valid, "-o", out)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    truth = [json.loads(line) for line in (valid / "metadata.jsonl").read_text().splitlines()]
    assert len(rows) == 64 and rows[0]["prompt"] == truth[0]["question"] and rows[0]["image"].endswith(".png")
    right = sum(row["answer"] == true["answer"] for row, true in zip(rows, truth, strict=True))
    result = cli("evaluate", run, "-i", valid, "--json")
    assert result.exit_code == 0, result.output
    measured = json.loads(result.stdout)
    assert measured["rows"] == 64 and measured["exact_match"] == pytest.approx(100 * right / 64)
    assert measured["exact_match"] == pytest.approx(results(run)["eval_exact_match"])


@pytest.mark.slow
def test_the_loss_counts_the_answer_tokens_only(tmp_path, paligemma):
    """PaliGemma's prefix and suffix: labels are -100 on the image tokens, the prompt and the padding, and the
    answer's ids (with the end-of-sequence token) after them."""
    from transformers import AutoProcessor

    from autotrain.trainers.vlm import Conversation

    processor = AutoProcessor.from_pretrained(paligemma)
    rows = vqa_rows(tmp_path / "images", random.Random(0), 2)
    rows = [
        {"image": str(tmp_path / "images" / r["file_name"]), "prompt": r["question"], "answer": r["answer"]}
        for r in rows
    ]
    batch = Conversation(processor, "paligemma", 64).training_batch(rows)
    tokenizer = processor.tokenizer
    for i, row in enumerate(rows):
        labelled = [int(t) for t, label in zip(batch["input_ids"][i], batch["labels"][i], strict=True) if label != -100]
        assert labelled == [*tokenizer(row["answer"], add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
        assert (batch["labels"][i][: processor.image_seq_length] == -100).all()


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"question": "where is the square ?", "answer": 7}, "row 1, column `answer`: must be text, got int 7"),
        ({"question": "", "answer": "left"}, "row 1, column `question`: the text is empty"),
        ({"answer": "left"}, "column `question` (for prompt) not found"),
    ],
    ids=["answer-not-text", "empty-question", "no-question-column"],
)
def test_bad_rows_name_the_file_row_and_column(tmp_path, row, expected):
    from autotrain.config.load import load_config
    from autotrain.data.vlm import load_vlm_splits
    from autotrain.errors import UserInputError

    rows = vqa_rows(tmp_path / "data" / "train", random.Random(0), 3)
    rows[1] = (
        {"file_name": rows[1]["file_name"], **row} if "question" in row else {"file_name": rows[1]["file_name"], **row}
    )
    if "question" not in row:
        rows = [{k: v for k, v in r.items() if k != "question"} for r in rows]
    write_jsonl(tmp_path / "data" / "train" / "metadata.jsonl", rows)
    config = write_config(
        tmp_path / "c.yml", CONFIG, model="m", project=tmp_path / "run", data=tmp_path / "data", epochs=1, lr="1.0e-3"
    )
    with pytest.raises(UserInputError) as caught:
        load_vlm_splits(load_config(config, ["data.valid_split=null"]).config)
    assert expected in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


@pytest.mark.no_cuda
def test_4bit_loading_is_refused_on_this_cpu(cli, tmp_path):
    config = write_config(
        tmp_path / "c.yml", CONFIG, model="m", project=tmp_path / "run", data=tmp_path, epochs=1, lr="1.0e-3"
    )
    result = cli("vlm", "--config", config, "--dry-run", "--set", "peft.quantization=int4")
    assert result.exit_code == 2
    assert "peft.quantization: int4 loads through bitsandbytes and needs a CUDA GPU" in result.stderr
    assert not (tmp_path / "run").exists()


CAPTIONS = """\
task: vlm
trainer: captioning
base_model: {model}
project_name: {project}
data:
  path: {data}
  valid_split: valid
  prompt: describe the image
  column_mapping:
    answer: caption
training_args:
  epochs: {epochs}
  batch_size: 16
  lr: {lr}
  warmup_ratio: 0.1
  max_length: 64
  max_new_tokens: 8
  optimizer: adamw_torch
  logging_steps: 50
  eval_strategy: "no"
  save_steps: 100000
"""


@pytest.fixture(scope="session")
def captioner(tmp_path_factory):
    """A tiny random Idefics3 (SmolVLM's architecture, a chat template) evaluated untrained and trained to
    caption the squares for 16 epochs (256 steps)."""
    from typer.testing import CliRunner

    from autotrain.cli.main import app

    root = tmp_path_factory.getbasetemp() / "vision-tasks"

    def train(folder: Path) -> Path:
        model, data = tiny_idefics3(folder / "tiny-idefics3"), data_folder(folder / "data")
        for name, epochs, lr in (("untrained", 0.0625, "1.0e-9"), ("run", 16, "3.0e-3")):
            config = write_config(
                folder / f"{name}.yml", CAPTIONS, model=model, project=folder / name, data=data, epochs=epochs, lr=lr
            )
            result = CliRunner().invoke(app, ["vlm", "--config", str(config)])
            assert result.exit_code == 0, result.output
        return folder

    return built(root, "vlm-captions-run", train)


@pytest.mark.slow
def test_a_chat_model_learns_to_caption(captioner):
    """8 captions are possible (4 colours, 2 sides): one caption for every image matches 12.5% of them."""
    untrained, trained = results(captioner / "untrained"), results(captioner / "run")
    assert trained["eval_exact_match"] > 30 and untrained["eval_exact_match"] < 5, (untrained, trained)
    assert trained["eval_f1"] > untrained["eval_f1"] + 30, (untrained, trained)


@pytest.mark.slow
def test_the_memory_estimate_counts_the_vision_tower_and_its_image():
    """The parameters of the tower and projector beside the language model's, and the tower's activations:
    four times the patches keep more per sample."""
    from transformers import PaliGemmaConfig

    from autotrain.training.model_shape import trace_model

    def config(side: int) -> str:
        vision = {"model_type": "siglip_vision_model", "hidden_size": 64, "intermediate_size": 128}
        vision |= {"num_hidden_layers": 2, "num_attention_heads": 2, "image_size": side, "patch_size": 8}
        text = {"model_type": "gemma", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128}
        text |= {"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32}
        return PaliGemmaConfig(vision_config=vision, text_config=text, projection_dim=64).to_json_string()

    small, large = (trace_model(config(side), "vlm", 128, "float32", "sdpa", None) for side in (32, 64))
    text_only = PaliGemmaConfig.from_dict(json.loads(config(32))).text_config.to_json_string()
    language = trace_model(text_only, "llm", 128, "float32", "sdpa", None)
    tower = 2 * (4 * 64 * 64 + 2 * 64 * 128)  # two layers' attention and MLP weights, at least
    assert small.params > language.params + tower
    assert large.rest_bytes_per_token > small.rest_bytes_per_token + 1000


@pytest.mark.slow
def test_chat_about_an_image(cli, answerer):
    run, image = answerer / "run", answerer / "data" / "valid" / "0001.png"
    result = cli("chat", run, "--image", image, "-m", "what color is the square ?", "-m", "where is the square ?")
    assert result.exit_code == 0, result.output
    colour, side = result.stdout.split()
    assert colour in ("red", "green", "blue", "yellow") and side in ("left", "right"), result.stdout
    result = cli("chat", run, "-m", "what color is the square ?")
    assert result.exit_code == 2 and "give the image to talk about with --image PATH" in result.stderr
    result = cli("chat", run, "--image", answerer / "data" / "nope.png", "-m", "hi")
    assert (
        result.exit_code == 2
        and "--image: row 0, column `image`: " in result.stderr
        and "file not found" in result.stderr
    )


@pytest.mark.slow
def test_a_lora_adapter_trains_merges_and_predicts(cli, answerer, tmp_path):
    """`peft:` trains an adapter (with a bundled optimizer); `merge_adapter` also saves the merged model,
    which predict loads; without it predict puts the adapter on its base."""
    config = answerer / "run.yml"
    for name, merge in (("adapter", "false"), ("merged", "true")):
        run = tmp_path / name
        args = ["--set", f"project_name={run}", "--set", "training_args.max_steps=2", "--set", "peft.r=4"]
        args += ["--set", f"peft.merge_adapter={merge}", "--set", "training_args.optimizer=came"]
        result = cli("vlm", "--config", config, *args)
        assert result.exit_code == 0, result.output
        assert (run / "adapter_config.json").is_file() and (run / "merged" / "config.json").is_file() == (
            merge == "true"
        )
        out = tmp_path / f"{name}.jsonl"
        result = cli("predict", run, "-i", answerer / "data" / "valid", "-o", out)
        assert result.exit_code == 0, result.output
        assert len(out.read_text().splitlines()) == 64
