"""Vision-language fine-tuning: image + text -> text (visual question answering, captioning) through
AutoModelForImageTextToText and the checkpoint's own processor, as a full fine-tune or a LoRA adapter (on a
4/8-bit base with `peft.quantization`, CUDA only).

Each sample is the processor's rendering of the image and the prompt followed by the answer: PaliGemma's
prefix and suffix (its processor masks the prefix), or the checkpoint's chat template for chat models
(SmolVLM / Idefics3, Qwen2-VL, ...), whose user turn and generation prompt are masked here. The loss counts
the answer's tokens only (and the end of the turn, so the model learns to stop). Each evaluation also
generates the validation answers (greedy, up to `max_new_tokens`) and scores them against the references:
SQuAD exact match and F1 (torchmetrics), as VQA answers are scored.
"""

from __future__ import annotations

from autotrain.data.images import read_image
from autotrain.data.vlm import load_vlm_splits
from autotrain.errors import UserInputError
from autotrain.trainers.common import load_pretrained
from autotrain.trainers.task_common import lora_model, rows_preview, task_trainer
from autotrain.training.plan import RunPlan

PREFIX_STYLE = ("paligemma",)  # processors that take the answer as a `suffix` and mask the prefix themselves


class Conversation:
    """How a checkpoint's processor renders (image, prompt[, answer]) for training and for generation."""

    def __init__(self, processor, model_type: str, max_length: int, fixed_prompt: str | None = None):
        self.processor, self.max_length, self.fixed_prompt = processor, max_length, fixed_prompt
        self.prefix_style = model_type in PREFIX_STYLE
        if not self.prefix_style and not getattr(processor, "chat_template", None):
            raise UserInputError(
                f"base_model's processor ({type(processor).__name__}) has no chat template, so a prompt and its "
                "answer cannot be laid out for it; use a chat (instruct) checkpoint"
            )

    def prompt_of(self, row: dict) -> str:
        return self.fixed_prompt if self.fixed_prompt is not None else row["prompt"]

    def _user(self, prompt: str) -> list[dict]:
        return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]

    def asked(self, prompt: str) -> str:
        """The text before the answer: the image token(s) and the prompt, or the chat up to the reply."""
        if self.prefix_style:
            return self.processor.image_token + prompt
        return self.processor.apply_chat_template(self._user(prompt), add_generation_prompt=True, tokenize=False)

    def answered(self, prompt: str, answer: str) -> str:
        """The whole chat with the assistant's answer (chat models)."""
        reply = {"role": "assistant", "content": [{"type": "text", "text": answer}]}
        full = self.processor.apply_chat_template([*self._user(prompt), reply], tokenize=False)
        if not full.startswith(self.asked(prompt)):
            raise UserInputError(
                "base_model's chat template renders the question differently once it is answered, so the "
                "answer's tokens cannot be told apart; use another checkpoint"
            )
        return full

    def training_batch(self, rows: list[dict]) -> dict:
        """Padded inputs with labels on the answers' tokens only (-100 elsewhere)."""
        images = [[read_image(row["image"])] for row in rows]
        prompts = [self.prompt_of(row) for row in rows]
        answers = [row["answer"] for row in rows]
        self.processor.tokenizer.padding_side = "right"
        if self.prefix_style:
            texts = [self.asked(p) for p in prompts]
            batch = self.processor(text=texts, images=images, suffix=answers, padding="longest", return_tensors="pt")
            return self._cut(batch, self._masked_until(batch["labels"]))
        batch = self.processor(
            text=[self.answered(p, a) for p, a in zip(prompts, answers, strict=True)],
            images=images,
            padding="longest",
            return_tensors="pt",
        )
        asked = self.processor(text=[self.asked(p) for p in prompts], images=images, padding="longest")
        lengths = [sum(mask) for mask in asked["attention_mask"]]
        labels = batch["input_ids"].clone()
        labels[batch["attention_mask"] == 0] = -100
        for i, length in enumerate(lengths):
            labels[i, :length] = -100
        batch["labels"] = labels
        return self._cut(batch, lengths)

    @staticmethod
    def _masked_until(labels) -> list[int]:
        return [int((row == -100).long().cumprod(0).sum()) for row in labels]

    def _cut(self, batch: dict, prompt_lengths: list[int]) -> dict:
        """Inputs longer than max_length lose the end of their answer; a prompt (its image's tokens included)
        that does not fit is an error, since cutting into the image's tokens would break the model's input."""
        longest = max(prompt_lengths)
        if longest >= self.max_length:
            raise UserInputError(
                f"a prompt with its image is {longest} tokens, not below `training_args.max_length` "
                f"({self.max_length}); raise max_length"
            )
        width = batch["input_ids"].shape[1]
        if width <= self.max_length:
            return dict(batch)
        return {
            k: v[:, : self.max_length] if hasattr(v, "dim") and v.dim() == 2 and v.shape[1] == width else v
            for k, v in batch.items()
        }

    def generation_batch(self, images: list, prompts: list[str]) -> dict:
        """Left-padded prompts (every row ends where generation starts) with their images."""
        self.processor.tokenizer.padding_side = "left"
        try:
            return self.processor(
                text=[self.asked(p) for p in prompts],
                images=[[i] for i in images],
                padding="longest",
                return_tensors="pt",
            )
        finally:
            self.processor.tokenizer.padding_side = "right"


def generate_answers(model, conversation: Conversation, rows: list[dict], batch_size: int, max_new_tokens: int):
    """Greedy answers, one per row (`image`, and `prompt` unless the conversation has a fixed one)."""
    import torch

    tokenizer = conversation.processor.tokenizer
    answers = []
    for start in range(0, len(rows), batch_size):
        part = rows[start : start + batch_size]
        batch = conversation.generation_batch(
            [read_image(row["image"]) for row in part], [conversation.prompt_of(row) for row in part]
        ).to(model.device)
        with torch.inference_mode():
            out = model.generate(
                **batch,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
            )
        new = out[:, batch["input_ids"].shape[1] :]
        answers += [text.strip() for text in tokenizer.batch_decode(new, skip_special_tokens=True)]
    return answers


def answer_scores(predicted: list[str], references: list[str]) -> dict[str, float]:
    from autotrain.trainers.extractive_qa import squad_scores

    return squad_scores(predicted, [{"text": [answer], "answer_start": [0]} for answer in references])


def answer_scorer(conversation: Conversation, rows: list[dict], args, plan: RunPlan):
    """model -> SQuAD scores of its greedy answers to `rows` (the validation rows), what each evaluation adds."""
    batch_size = args.eval_batch_size or plan.batch_size

    def answering(model) -> dict[str, float]:
        predicted = generate_answers(model, conversation, rows, batch_size, args.max_new_tokens)
        return answer_scores(predicted, [row["answer"] for row in rows])

    return answering


def _answering_trainer():
    from transformers import Trainer

    class AnsweringTrainer(Trainer):
        """Evaluation adds the scores of the answers the model generates for the validation rows."""

        def __init__(self, *args, answering=None, **kwargs):
            super().__init__(*args, **kwargs)
            self.answering = answering

        def evaluation_loop(
            self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix="eval"
        ):
            output = super().evaluation_loop(
                dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix
            )
            if self.answering is not None and metric_key_prefix == "eval":
                scores = self.answering(self.model)
                output.metrics.update({f"{metric_key_prefix}_{name}": value for name, value in scores.items()})
            return output

    return AnsweringTrainer


def build_processor(cfg, token: str | None = None):
    from transformers import AutoProcessor

    return load_pretrained(AutoProcessor, cfg, "processor", token)


def build_model(cfg, plan: RunPlan, token: str | None = None):
    """The model in the planned dtype, quantized when `peft.quantization` asks, with a LoRA adapter."""
    import torch
    from transformers import AutoModelForImageTextToText

    return lora_model(AutoModelForImageTextToText, cfg, plan, token, "CAUSAL_LM", dtype=getattr(torch, plan.load_dtype))


def conversation_of(cfg, processor, model_config) -> Conversation:
    fixed = cfg.data.prompt if cfg.trainer == "captioning" else None
    return Conversation(processor, model_config.model_type, cfg.training_args.max_length, fixed)


def build_trainer(cfg, plan: RunPlan, callbacks: list, token: str | None = None):
    from transformers import set_seed

    set_seed(cfg.training_args.seed)
    processor = build_processor(cfg, token)
    splits = load_vlm_splits(cfg, token)
    model = build_model(cfg, plan, token)
    conversation = conversation_of(cfg, processor, model.config)
    scoring = {
        "trainer_cls": _answering_trainer(),
        "answering": answer_scorer(conversation, list(splits.valid), cfg.training_args, plan),
        # The Trainer would drop the image and text columns (no model argument has their names).
        "args": {"remove_unused_columns": False},
    }
    collator = conversation.training_batch
    return task_trainer(cfg, plan, callbacks, model, splits.train, splits.valid, processor, collator, **scoring)


def preview(cfg, count: int, token: str | None = None) -> dict:
    """The first training rows (image, prompt, answer) as the model will be asked, for `--preview`."""
    splits = load_vlm_splits(cfg, token)

    def example(row: dict) -> dict:
        return {
            "image": row["image"] if isinstance(row["image"], str) else "an image stored in the data",
            "prompt": cfg.data.prompt if cfg.trainer == "captioning" else row["prompt"],
            "answer": row["answer"],
        }

    return rows_preview(splits, count, example, {"trainer": cfg.trainer})
