"""The SFT trainer: TRL's SFTTrainer with autotrain's loss, batches and token counts, each set at construction.

Read top to bottom: the constructor takes how the loss is computed (`cross_entropy`, from the plan) and whether
the training batches are length-grouped; the collator comes in as TRL's own `data_collator` argument.
`compute_loss` counts the batch's tokens and computes the loss (autotrain.training.lm_loss); `log` adds the
counts to each log line; `get_train_dataloader` draws length-grouped batches when asked.
"""

from __future__ import annotations

from functools import partial

import torch
from transformers import Trainer
from trl import SFTTrainer

from autotrain.training.lm_loss import IGNORE, causal_lm_loss, language_model, logit_stats


class AutotrainSFTTrainer(SFTTrainer):
    """TRL's SFTTrainer whose loss is `cross_entropy`'s (`full`: the model's own, on its whole logits).

    Logged beside the loss, as TRL names them: `num_tokens`, every token of the batches so far (prompts and
    template markers included, padding not), `trained_tokens`, the tokens that carried loss so far (both over
    every process), and `entropy` and `mean_token_accuracy` of the trained tokens since the last log line (the
    predictions' entropy; how often the label was the most likely token). The kernel losses (`liger`,
    `cut_cross_entropy`) give neither of the last two.
    """

    def __init__(self, *args, cross_entropy: str = "chunked", length_grouped: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.cross_entropy = cross_entropy
        self.length_grouped = length_grouped
        self.token_counts = TokenCounts()

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        batch_tokens = inputs.pop("num_tokens", None)  # a row-packed batch's own count: its rows have no mask
        if model.training:
            self.token_counts.count_batch(inputs, batch_tokens)
        if self.cross_entropy == "full" or return_outputs:
            return self._plain_loss(model, inputs, return_outputs, num_items_in_batch)
        inner = language_model(self.accelerator.unwrap_model(model))
        smoothing = self.args.label_smoothing_factor
        parts = causal_lm_loss(model, inner, inputs, self.cross_entropy, smoothing, num_items_in_batch)
        self.token_counts.add_stats(model.training, parts.labelled, parts.entropy, parts.correct)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            # as transformers' Trainer does: num_items_in_batch counts every process's tokens, DDP averages
            return parts.loss * self.accelerator.num_processes
        return parts.loss

    def _plain_loss(self, model, inputs, return_outputs, num_items_in_batch):
        """The model's own loss on its whole logits, as transformers' Trainer computes it (label smoothing,
        num_items_in_batch and all); TRL's own `compute_loss` would use TRL's fused LM head instead."""
        plain = {**inputs, "use_cache": False}
        loss, outputs = Trainer.compute_loss(self, model, plain, True, num_items_in_batch)
        self.token_counts.add_stats(model.training, *logit_stats(outputs.logits.detach(), inputs["labels"]))
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        training = self.model.training
        counted = self.token_counts.logs(training, self.accelerator)
        logs.update(counted if training else {f"eval_{key}": value for key, value in counted.items()})
        super().log(logs, start_time)

    def get_train_dataloader(self):
        if not self.length_grouped:
            return super().get_train_dataloader()
        return length_grouped_dataloader(self)


class TokenCounts:
    """Token counts and prediction statistics, kept on the device between log lines (no host sync per step) and
    summed over the processes when a line is logged (every process logs at the same steps)."""

    def __init__(self) -> None:
        self.seen = self.trained = 0  # every token of the training batches; those with loss (cumulative)
        self.stats = {True: [0, 0.0, 0], False: [0, 0.0, 0]}  # training?: [tokens, entropy sum, top-1 hits]

    def count_batch(self, inputs: dict, batch_tokens) -> None:
        self.trained = self.trained + (inputs["labels"][..., 1:] != IGNORE).sum()
        if batch_tokens is not None:
            self.seen = self.seen + batch_tokens
        elif "attention_mask" in inputs:
            self.seen = self.seen + inputs["attention_mask"].sum()
        else:  # one padding-free sequence: all of it is tokens
            self.seen = self.seen + inputs["position_ids"].size(1)

    def add_stats(self, training: bool, tokens, entropy, correct) -> None:
        if entropy is None:  # a kernel loss: no statistics
            return
        kept = self.stats[training]
        kept[0], kept[1], kept[2] = kept[0] + tokens, kept[1] + entropy.detach(), kept[2] + correct

    def logs(self, training: bool, accelerator) -> dict[str, float]:
        tokens, entropy, correct = self.stats[training]
        values = [self.seen, self.trained, tokens, entropy, correct]
        summed = accelerator.reduce(
            torch.stack([torch.as_tensor(v, dtype=torch.float64, device=accelerator.device) for v in values]),
            reduction="sum",
        ).tolist()
        self.stats[training] = [0, 0.0, 0]
        logs = {"num_tokens": summed[0]}
        if training:
            logs["trained_tokens"] = summed[1]
        if summed[2] > 0:
            logs["entropy"], logs["mean_token_accuracy"] = summed[3] / summed[2], summed[4] / summed[2]
        return logs


def length_grouped_dataloader(trainer):
    """The Trainer's training DataLoader (same collator and loader settings) with a length-grouped batch sampler
    (autotrain.training.batching). The collator reads only the columns it needs (input_ids, labels)."""
    from torch.utils.data import DataLoader
    from transformers.trainer_utils import seed_worker

    from autotrain.training.batching import length_grouped_batches, sample_lengths

    args, dataset = trainer.args, trainer.train_dataset
    seed = args.data_seed if args.data_seed is not None else args.seed
    batches = length_grouped_batches(sample_lengths(dataset), args.per_device_train_batch_size, seed)
    loader = DataLoader(
        dataset,
        batch_sampler=batches,
        collate_fn=trainer.data_collator,
        num_workers=args.dataloader_num_workers,
        pin_memory=args.dataloader_pin_memory,
        persistent_workers=args.dataloader_persistent_workers and args.dataloader_num_workers > 0,
        worker_init_fn=partial(seed_worker, num_workers=args.dataloader_num_workers, rank=args.process_index),
    )
    return trainer.accelerator.prepare(loader)
