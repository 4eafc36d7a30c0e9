"""Answers only: the loss of chat data falls on the assistant turns, found from the chat template's own
rendering. Hand-counted on a multi-turn conversation for four templates, and equal to TRL's own
`assistant_only_loss` mask where TRL ships a template with `{% generation %}` markers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trl
import yaml
from datasets import Dataset

ROOT = Path(__file__).resolve().parent
TINY = ROOT / "assets" / "tiny-llama"
TRL_TEMPLATES = Path(trl.__file__).parent / "chat_templates"
# The markers of the templates below, one token each as in the models that use them.
MARKERS = [
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|end|>",
]
SYSTEM = [{"role": "system", "content": "a white snow is a happy snow."}]
TURNS = [
    {"role": "user", "content": "what color is the sky?"},
    {"role": "assistant", "content": "the sky is blue."},
    {"role": "user", "content": "what color is the grass?"},
    {"role": "assistant", "content": "the grass is green."},
]
# SmolLM2's template: a default system prompt when the conversation has none
SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' "
    "}}{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(TINY)
    tokenizer.add_tokens(MARKERS, special_tokens=True)
    return tokenizer


def _template(name: str) -> str:
    if name == "chatml":
        return (TINY / "chat_template.jinja").read_text()
    if name == "smollm2":
        return SMOLLM2
    return (TRL_TEMPLATES / f"{name}.jinja").read_text()


def _trained(tokenizer, ids: list[int], mask: list[int]) -> list[str]:
    """The trained runs of tokens, decoded."""
    runs, current = [], []
    for token, bit in zip(ids, mask, strict=True):
        if bit:
            current.append(token)
        elif current:
            runs.append(tokenizer.decode(current))
            current = []
    return runs + ([tokenizer.decode(current)] if current else [])


# Counted by hand: "the sky is blue." is 5 tokens of the tiny tokenizer (the, " sky", " is", " blue", ".") and
# "the grass is green." 5; each template's end of turn adds its marker, and the newline it writes after it.
HAND_COUNTED = {
    # <|im_end|> and "\n": 7 + 7
    "chatml": (SYSTEM + TURNS, ["the sky is blue.<|im_end|>\n", "the grass is green.<|im_end|>\n"], 14),
    # <|eot_id|>, no newline: 6 + 6
    "llama3": (SYSTEM + TURNS, ["the sky is blue.<|eot_id|>", "the grass is green.<|eot_id|>"], 12),
    # no system role; <end_of_turn> and "\n": 7 + 7
    "gemma": (TURNS, ["the sky is blue.<end_of_turn>\n", "the grass is green.<end_of_turn>\n"], 14),
    # <|end|> and "\n"; the last turn also the EOS the template writes after the conversation: 7 + 8
    "phi3": (SYSTEM + TURNS, ["the sky is blue.<|end|>\n", "the grass is green.<|end|>\n<|end_of_text|>"], 15),
    # the default system prompt of a conversation that opens with the assistant is not trained: 5 + 2
    "smollm2": (TURNS[1:2], ["the sky is blue.<|im_end|>\n"], 7),
}


@pytest.mark.parametrize("name", list(HAND_COUNTED))
def test_trained_tokens_are_the_assistant_turns(tokenizer, name):
    from autotrain.data.answers import answer_tokens

    messages, answers, count = HAND_COUNTED[name]
    tokenizer.chat_template = _template(name)
    ids, mask = answer_tokens(tokenizer, messages)
    assert _trained(tokenizer, ids, mask) == answers
    assert sum(mask) == count
    # the ids are the conversation as the chat template tokenizes it
    assert ids == tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]


class _NoOffsets:
    """The tokenizer without character offsets, as a slow (Python) tokenizer."""

    is_fast = False

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, text, **kwargs):
        assert "return_offsets_mapping" not in kwargs
        return self.tokenizer(text, **kwargs)

    def apply_chat_template(self, *args, **kwargs):
        return self.tokenizer.apply_chat_template(*args, **kwargs)


@pytest.mark.parametrize("name", list(HAND_COUNTED))
def test_a_tokenizer_without_offsets_marks_the_same_tokens(tokenizer, name):
    from autotrain.data.answers import answer_tokens

    messages = HAND_COUNTED[name][0]
    tokenizer.chat_template = _template(name)
    assert answer_tokens(_NoOffsets(tokenizer), messages) == answer_tokens(tokenizer, messages)


def _trl_labels(tokenizer, rows: list[list[dict]], tmp_path: Path) -> list[list[int]]:
    """TRL's own preparation with `assistant_only_loss=True` (the template's generation markers), read from the
    dataset its public SFTTrainer prepares."""
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(
        output_dir=str(tmp_path), assistant_only_loss=True, max_length=None, report_to="none", use_cpu=True, bf16=False
    )
    model = AutoModelForCausalLM.from_pretrained(TINY)
    trainer = SFTTrainer(model, args, train_dataset=Dataset.from_dict({"messages": rows}), processing_class=tokenizer)
    return trainer.train_dataset["input_ids"], trainer.train_dataset["labels"]


@pytest.mark.parametrize("name", ["llama3", "gemma", "phi3"])
def test_the_mask_is_trls_where_the_template_marks_generation(tokenizer, name, tmp_path):
    """TRL's training variants of these templates wrap each assistant turn in `{% generation %}`: TRL's mask
    from those markers equals the one read here from the plain template, which has none."""
    from autotrain.data.sft_rows import SftSettings, label_batch

    conversations = [HAND_COUNTED[name][0], HAND_COUNTED[name][0][:-2], HAND_COUNTED[name][0][:-1]]
    tokenizer.chat_template = _template(f"{name}_training")
    trl_ids, trl_labels = _trl_labels(tokenizer, conversations, tmp_path)
    assert any(label == -100 for label in trl_labels[0]) and any(label != -100 for label in trl_labels[0])
    settings = SftSettings("messages", True, False, 10**6, False)
    for template in (name, f"{name}_training"):
        tokenizer.chat_template = _template(template)
        ours, _ = label_batch(tokenizer, {"messages": conversations}, settings)
        assert ours.column("input_ids").to_pylist() == trl_ids
        assert ours.column("labels").to_pylist() == trl_labels


def _config(tmp_path: Path, rows: list[dict], **training):
    from autotrain.config.load import load_config

    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(TINY),
        "project_name": str(tmp_path / "run"),
        "log": "none",
        "data": {"path": str(data)},
        "training_args": {"batch_size": 4, "max_length": 128, "mixed_precision": "no", **training},
    }
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return load_config(path, []).config


def _prepared(cfg):
    """The training rows the SFT builder hands the trainer (labelled, cut to max_length), and the tokenizer."""
    from autotrain.trainers.llm.base import prepare
    from autotrain.trainers.llm.sft_data import answered_splits
    from autotrain.training.plan import resolve_plan

    plan = resolve_plan(cfg)
    ready = prepare(cfg, plan)
    train = answered_splits(cfg, plan, ready.tokenizer, ready.train, ready.valid)[0]
    return train[:], ready.tokenizer  # every row as the trainer reads it: columns -> lists


def test_train_on_inputs_trains_every_token(tmp_path):
    rows = [{"messages": SYSTEM + TURNS}]
    answers, tokenizer = _prepared(_config(tmp_path, rows))
    everything, _ = _prepared(_config(tmp_path, rows, train_on_inputs=True))
    assert answers["input_ids"] == everything["input_ids"]
    assert sum(label != -100 for label in answers["labels"][0]) == 14  # hand-counted above (chatml)
    assert everything["labels"] == everything["input_ids"]


def test_prompt_completion_rows_train_the_completion_unless_asked(tmp_path):
    rows = [{"prompt": "what color is the sky?", "completion": "the sky is blue."}]
    answers, tokenizer = _prepared(_config(tmp_path, rows))
    ids, labels = answers["input_ids"][0], answers["labels"][0]
    trained = [t for t, label in zip(ids, labels, strict=True) if label != -100]
    assert tokenizer.decode(trained) == "the sky is blue.<|im_end|>\n"
    everything, _ = _prepared(_config(tmp_path, rows, train_on_inputs=True))
    assert everything["labels"][0] == everything["input_ids"][0]


def test_examples_whose_answer_is_cut_off_are_named_and_left_out(tmp_path, capsys):
    from autotrain.errors import UserInputError

    long_question = {"role": "user", "content": "what color is the sky? " * 20}
    rows = [{"messages": TURNS}, {"messages": [long_question, TURNS[1]]}, {"messages": TURNS}]
    kept, _ = _prepared(_config(tmp_path, rows, max_length=64))
    assert len(kept["input_ids"]) == 2
    err = capsys.readouterr().err
    assert "1 of 3 training examples have no answer token within the first 64 tokens" in err
    assert "(row 1, counting from 0)" in err
    with pytest.raises(UserInputError, match="none of the 1 training examples has an answer token within the first"):
        _prepared(_config(tmp_path, rows[1:2], max_length=64))
    # trained on every token, the same example keeps its prompt
    assert len(_prepared(_config(tmp_path, rows, max_length=64, train_on_inputs=True))[0]["input_ids"]) == 3


def test_the_trainer_trains_and_logs_the_assistant_tokens(tmp_path):
    """One epoch over 8 copies of the hand-counted conversation: `trained_tokens` is 8 x 14."""
    from autotrain.trainers import build_trainer
    from autotrain.training.plan import resolve_plan

    cfg = _config(tmp_path, [{"messages": SYSTEM + TURNS}] * 8, max_steps=2, logging_steps=2, lr=1e-3)
    trainer, _ = build_trainer(cfg, resolve_plan(cfg), [])
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "trained_tokens" in entry]
    assert logged[-1]["trained_tokens"] == 8 * 14
    assert logged[-1]["num_tokens"] > 8 * 14  # TRL's count: every token, the prompts' too


def test_packing_keeps_each_examples_answer_labels(tmp_path):
    """Packed into max_length blocks, the examples keep their labels: the same trained tokens, 8 x 14."""
    from autotrain.trainers import build_trainer
    from autotrain.training.plan import resolve_plan

    cfg = _config(tmp_path, [{"messages": SYSTEM + TURNS}] * 8, packing=True, max_length=256)
    trainer, _ = build_trainer(cfg, resolve_plan(cfg), [])
    blocks = trainer.train_dataset
    assert len(blocks) < 8  # packed: several conversations per block
    assert sum(label != -100 for row in blocks[:]["labels"] for label in row) == 8 * 14


def test_autotrain_advanced_configs_keep_answers_only_and_say_so(cli):
    """AutoTrain Advanced trained SFT on every token and has no setting for it: migrating keeps the
    answers-only default, with a note naming the setting that restores the old behaviour."""
    result = cli("migrate", ROOT / "advanced_configs" / "llm_finetuning" / "smollm2.yml")
    assert result.exit_code == 0, result.output
    assert "AutoTrain Advanced trained on every token: set `training_args.train_on_inputs: true`" in result.stderr
    assert "train_on_inputs" not in result.stdout  # the default, not written out
    orpo = cli("migrate", ROOT / "advanced_configs" / "llm_finetuning" / "smollm2_orpo.yml")
    assert orpo.exit_code == 0 and "train_on_inputs" not in orpo.stderr  # preference trainers: not theirs
