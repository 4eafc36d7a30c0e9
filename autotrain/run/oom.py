"""A run that ran out of memory: one line with the step, the batch, the estimate and what to change; a
checkpoint of the last completed step when the weights are whole; exit 5.

The allocation that failed leaves the weights and the optimizer state as the last completed optimizer step
left them, unless it failed inside the optimizer's step (some parameters updated, others not: nothing is
saved then). With one process the run saves that state as a checkpoint (the previous complete one is kept,
as rotation allows); a checkpoint that could not be written whole is removed, so nothing half written is
left to resume from. With several processes the ranks would have to save together, which a rank that ran
out of memory cannot: the last complete checkpoint stands.
"""

from __future__ import annotations

import gc
import shutil
import sys
import traceback

from autotrain.errors import EXIT_OUT_OF_MEMORY, debug_enabled
from autotrain.run.process import Run, last_checkpoint, resume_command
from autotrain.training.folder import is_complete
from autotrain.training.out_of_memory import advice


def out_of_memory(this: Run, exc: BaseException) -> int:
    """Report the failed allocation, save what can be saved, and return exit code 5."""
    if debug_enabled():
        traceback.print_exc()
    traceback.clear_frames(exc.__traceback__)  # the failed step's frames hold its activations: let them go
    _release()
    trainer = this.trainer
    where = _where(this)
    saved, why = _save(this)
    last = last_checkpoint(this.folder)
    if saved:
        kept = f"checkpoint saved to {saved}"
    elif last:
        kept = f"{why}; the last complete checkpoint, {last}, is kept"
    else:
        kept = f"{why}; no checkpoint was complete yet"
    message = f"out of memory {where} ({_batch(this)}{_estimate(this)}): {_advice(this)}; {kept}"
    this.say(f"error: {message}", every_rank=True)
    if last and trainer is not None:
        this.say(f"  then resume with: {resume_command(this.loaded, this.argv_sets)}")
    return this.finish("out of memory", EXIT_OUT_OF_MEMORY, last, error=message)


def _release() -> None:
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _where(this: Run) -> str:
    if this.trainer is None:
        return "before training (loading the data or the model)"
    if this.writing:
        return f"writing {this.writing}"
    return f"at step {this.trainer.state.global_step + 1}"


def _batch(this: Run) -> str:
    plan = this.plan
    if plan is None:
        return "the batch not yet planned"
    auto = " (batch_size: auto)" if plan.batch_choice else ""
    length = getattr(this.cfg.training_args, "max_length", None)
    tokens = f" of {length} tokens" if length else ""
    accumulation = f"gradient_accumulation {plan.gradient_accumulation}"
    return f"training_args.batch_size {plan.batch_size}{tokens} x {accumulation}{auto}"


def _estimate(this: Run) -> str:
    from autotrain.training.memory import gib

    record = (this.manifest.data.get("memory") if this.manifest is not None else None) or {}
    if "bytes_per_device" not in record:
        return ""
    where = {"cpu": "for the process", "cuda": "per GPU"}.get(record.get("device"), "per device")
    source = record.get("budget_from", "available")
    has = f" of the {gib(record['available'])} {source}" if "available" in record else ""
    return f"; the estimate was {gib(record['bytes_per_device'])} {where}{has}"


def _advice(this: Run) -> str:
    args, plan = this.cfg.training_args, this.plan
    batch = plan.batch_size if plan is not None else 1
    accumulation = plan.gradient_accumulation if plan is not None else 1
    lora = this.cfg.uses_peft if hasattr(this.cfg, "uses_peft") else None
    return advice(batch, accumulation, args.gradient_checkpointing, lora)


def _save(this: Run) -> tuple[str | None, str]:
    """(the checkpoint saved, or None and why not)."""
    from autotrain.training.checkpoints import save_checkpoint_now

    trainer = this.trainer
    watch = getattr(this, "optimizer_watch", None)
    if trainer is None or not trainer.state.global_step:
        return None, "no step was completed"
    if this.writing:
        return None, "no checkpoint saved (the failure came while writing)"
    if watch is not None and watch.stepping:
        return None, "no checkpoint saved (it came inside the optimizer's step: the weights are half updated)"
    if this.plan is not None and this.plan.world_size > 1:
        return None, "no checkpoint saved (several processes save together)"
    folder = this.folder / f"checkpoint-{trainer.state.global_step}"
    if is_complete(folder):
        return str(folder), ""
    trainer.model.zero_grad(set_to_none=True)  # the failed step's partial gradients
    try:
        save_checkpoint_now(trainer)
    except Exception as exc:  # noqa: BLE001 - the save needs memory too: whatever stops it, nothing half written
        _discard(folder)
        return None, f"the checkpoint could not be saved ({type(exc).__name__})"
    if not is_complete(folder):
        _discard(folder)
        return None, "the checkpoint could not be completed"
    return str(folder), ""


def _discard(folder) -> None:
    if folder.is_dir() and not is_complete(folder):
        shutil.rmtree(folder, ignore_errors=True)
