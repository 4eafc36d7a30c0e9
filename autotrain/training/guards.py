"""Per-batch instrumentation of the Trainer's loss: the divergence guard and the token counter."""

from __future__ import annotations


class Diverged(Exception):
    def __init__(self, step: int, loss: float, elsewhere: bool = False):
        where = "on another rank" if elsewhere else f"({loss})"
        super().__init__(
            f"training diverged: non-finite loss {where} at step {step + 1}; "
            "lower training_args.lr, check the data, or set training_args.nan_policy: skip_batch"
        )
        self.step = step


class RepeatedSkips(Diverged):
    """The optimizer skipped tensors with non-finite gradients on too many consecutive steps."""

    def __init__(self, step: int, steps: int, tensors: int):
        Exception.__init__(
            self,
            f"training diverged: the optimizer skipped parameters with non-finite gradients on {steps} "
            f"consecutive steps (up to step {step}; {tensors} skipped in all); lower training_args.lr or "
            "check the data",
        )
        self.step = step


def skipped_tensors(optimizer) -> int | None:
    """How many (param, step) updates ``optimizer`` skipped for non-finite gradients (CAME, CAME8Bit and
    the hybrid count them; None for optimizers that do not). Reading it synchronises with the device."""
    optimizer = _unwrapped(optimizer, "skipped_tensors")
    return None if optimizer is None else optimizer.skipped_tensors


def compile_choices(optimizer) -> list[dict]:
    """Where CAME's compiled step failed and it took the eager step (CAME.compile_choices); [] otherwise."""
    optimizer = _unwrapped(optimizer, "compile_choices")
    return [] if optimizer is None else optimizer.compile_choices


def _unwrapped(optimizer, attribute: str):
    while optimizer is not None and not hasattr(optimizer, attribute):
        optimizer = getattr(optimizer, "optimizer", None)  # accelerate's wrapper
    return optimizer


def skip_guard(trainer, limit: int = 10):
    """A callback that stops the run once the optimizer skipped tensors on ``limit`` consecutive steps, and
    leaves the total in ``trainer.skipped_tensors`` (the run reports it).

    Every rank stops, or none: under FSDP each rank steps its own shards and counts its own skips, so the
    ranks agree on the longest run of skips at each step end (autotrain.training.ranks)."""
    from transformers import TrainerCallback

    from autotrain.training.ranks import largest

    class SkipGuard(TrainerCallback):
        seen, consecutive = 0, 0

        def on_step_end(self, args, state, control, **kwargs):
            count = skipped_tensors(trainer.optimizer)
            if count is None:
                return
            self.consecutive = self.consecutive + 1 if count > self.seen else 0
            self.seen = trainer.skipped_tensors = count
            longest = largest(self.consecutive)
            if longest >= limit:
                raise RepeatedSkips(state.global_step, longest, count)

    trainer.skipped_tensors = 0
    return SkipGuard()


def _count_tokens(inputs):
    """Non-padding tokens of a batch, whatever the trainer calls its columns (input_ids, chosen_input_ids...).

    Returned as a tensor on the batch's device when it comes from masks, so counting never waits for the GPU.
    """
    masks = [v for k, v in inputs.items() if k.endswith("attention_mask") and hasattr(v, "sum")]
    if masks:
        return sum(m.sum() for m in masks)
    ids = [v for k, v in inputs.items() if k.endswith("input_ids") and hasattr(v, "numel")]
    return sum(i.numel() for i in ids)


def _count_samples(inputs) -> int:
    first = next((v for v in inputs.values() if hasattr(v, "shape") and len(v.shape) > 0), None)
    return int(first.shape[0]) if first is not None else 0


def install_loss_hooks(trainer, policy: str) -> None:
    """Wrap the trainer's `compute_loss` so every micro-batch loss is checked before backward.

    It also counts the batch's tokens and samples into `trainer.tokens_seen` / `trainer.samples_seen` for
    the progress display (the Trainer's own counter only knows `input_ids`, which preference trainers do
    not use, and images have no tokens). The one host-device sync per micro-batch is the finiteness check,
    which has to come before backward.

    Checking before backward means a bad batch never touches the weights or the optimizer state:
    `halt` raises (the last saved checkpoint stays the newest), `skip_batch` replaces the loss by a zero
    that still reaches every trainable parameter, so the step's gradients simply omit that batch. Under
    `halt` with several processes the ranks agree on each micro-batch's check before backward (a rank
    that raised alone would leave the others waiting in backward's all-reduce): all raise, or none.
    `skip_batch` needs no agreement, since the zero loss runs the same backward.
    """
    import torch

    from autotrain.training.ranks import on_every_rank

    original = trainer.compute_loss
    trainer.skipped_batches = 0
    trainer.tokens_seen = 0
    trainer.samples_seen = 0

    def compute_loss(model, inputs, return_outputs=False, **kwargs):
        if model.training:
            trainer.tokens_seen += _count_tokens(inputs)
            trainer.samples_seen += _count_samples(inputs)
        result = original(model, inputs, return_outputs=return_outputs, **kwargs)
        loss = result[0] if return_outputs else result
        finite = bool(torch.isfinite(loss.detach()).all())
        if policy == "halt" and not on_every_rank(finite):
            raise Diverged(trainer.state.global_step, float(loss.detach().float().mean()), elsewhere=finite)
        if finite:
            return result
        trainer.skipped_batches += 1
        zero = sum((p.sum() * 0.0 for p in model.parameters() if p.requires_grad), loss.new_zeros(()))
        return (zero, result[1]) if return_outputs else zero

    trainer.compute_loss = compute_loss
    trainer.add_callback(skip_guard(trainer))
