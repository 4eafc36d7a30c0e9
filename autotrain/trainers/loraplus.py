"""LoRA+ (`peft.loraplus_lr_ratio`): the adapter's B matrices learn at `lr` x ratio, its A matrices at `lr`.

peft's `create_loraplus_optimizer` makes the parameter groups (A, B, B without decay, embedding adapters) and
builds the optimizer from them. The optimizer is the one the Trainer would build itself: the planned bundled
optimizer (`optimizer_cls_and_kwargs`) or the one TrainingArguments name (`get_optimizer_cls_and_kwargs`), so
every optimizer of the table takes LoRA+ except those that make their own groups (refused by the config's rules).
It is built in `create_optimizer`, the Trainer's documented hook, when the Trainer asks for it: after FSDP or
DeepSpeed has wrapped the model, whose parameter names still say which are B matrices.
"""

from __future__ import annotations

from typing import Any

from autotrain.errors import UserInputError


class LoraPlusOptimizer:
    """Trainer mixin (first in the bases): `create_optimizer` builds LoRA+'s groups at `loraplus_lr_ratio`."""

    loraplus_lr_ratio: float = 1.0

    def create_optimizer(self, model=None):
        if self.optimizer is None:
            opt_model = self.model if model is None else model
            self.optimizer = loraplus_optimizer(self, opt_model, self.loraplus_lr_ratio)
        return super().create_optimizer(model)


def with_loraplus(trainer_cls: type, ratio: float) -> type:
    """`trainer_cls` whose optimizer puts the B matrices at `lr` x `ratio` (a class that already has the mixin
    among its bases only gets the ratio)."""
    bases = (trainer_cls,) if issubclass(trainer_cls, LoraPlusOptimizer) else (LoraPlusOptimizer, trainer_cls)
    name = f"LoraPlus{trainer_cls.__name__}"
    return type(name, bases, {"loraplus_lr_ratio": ratio, "__module__": __name__, "__qualname__": name})


def loraplus_optimizer(trainer, model, ratio: float):
    """peft's LoRA+ optimizer for `model`, of the class and with the arguments the Trainer would use."""
    import torch
    from peft.optimizers import create_loraplus_optimizer

    if trainer.optimizer_cls_and_kwargs is not None:
        cls, kwargs = trainer.optimizer_cls_and_kwargs
    else:
        cls, kwargs = trainer.get_optimizer_cls_and_kwargs(trainer.args, model)
    kwargs: dict[str, Any] = dict(kwargs)
    own_groups = [key for key in ("params", "model", "optimizer_dict") if key in kwargs]
    if own_groups or not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        raise UserInputError(
            f"peft.loraplus_lr_ratio: optimizer `{trainer.args.optim}` makes its own parameter groups, so LoRA+'s "
            "cannot be given to it; use another optimizer, or remove `peft.loraplus_lr_ratio`"
        )
    lr = kwargs.pop("lr", trainer.args.learning_rate)
    return create_loraplus_optimizer(
        model, cls, lr=lr, loraplus_lr_ratio=ratio, loraplus_weight_decay=trainer.args.weight_decay, **kwargs
    )
