"""A run that runs out of memory anyway: recognised whatever raised it (torch's CUDA allocator, the CPU
allocator, Python), and said in one line with what to change; the run layer saves a checkpoint when the
weights are whole (autotrain.run.rank)."""

from __future__ import annotations

import sys

# What torch's CPU allocator and the CUDA runtime say when an allocation fails (a RuntimeError, not torch's
# OutOfMemoryError): "DefaultCPUAllocator: can't allocate memory: you tried to allocate ...", "CUDA error: out
# of memory"
ALLOCATION_FAILED = ("can't allocate memory", "not enough memory", "out of memory", "std::bad_alloc")


def is_out_of_memory(exc: BaseException | None) -> bool:
    """Whether `exc`, or an exception it was raised from, is an allocation that failed."""
    seen: set[int] = set()
    torch = sys.modules.get("torch")
    oom = getattr(torch, "OutOfMemoryError", ()) if torch is not None else ()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, MemoryError) or (oom and isinstance(exc, oom)):
            return True
        if isinstance(exc, RuntimeError) and any(text in str(exc) for text in ALLOCATION_FAILED):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def optimizer_step_watch():
    """A callback whose `stepping` says whether the optimizer is inside its step: an allocation failing
    there may leave some parameters updated and others not, and such weights are not saved as a checkpoint."""
    from transformers import TrainerCallback

    class OptimizerStepWatch(TrainerCallback):
        stepping = False

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            self.stepping = True

        def on_optimizer_step(self, args, state, control, **kwargs):
            self.stepping = False

    return OptimizerStepWatch()


def advice(batch_size: int, accumulation: int, checkpointing: bool, lora: bool | None) -> str:
    """What to change, cheapest first: a smaller batch with more accumulation (the same samples per step),
    gradient checkpointing, LoRA (`lora` None: the task has no LoRA)."""
    changes = []
    if batch_size > 1:
        changes.append(
            f"training_args.batch_size: {batch_size // 2} with gradient_accumulation: "
            f"{accumulation * batch_size // (batch_size // 2)} (the same samples per step)"
        )
    if not checkpointing:
        changes.append("training_args.gradient_checkpointing: true")
    if lora is False:
        changes.append("peft.enabled: true (LoRA)")
    if not changes:
        return "shorten training_args.max_length, or use a device with more memory"
    return "set " + ", or ".join(changes)
