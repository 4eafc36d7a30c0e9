"""Train in this process: build the trainer, train (or resume), save; run.json from start to end.

The rank path of run/rank.py, and the whole run of a one-process run (run/runner.py calls it directly).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from autotrain.errors import EXIT_OK, UserInputError, UserInputErrors
from autotrain.run.process import ACCELERATE_LAUNCHED, PARENT_ENV, Run, last_checkpoint, launched, resume_command
from autotrain.training.quiet import quiet_libraries


def resolve(this: Run, resume: str | None = None):
    """The plan, decided once in this process, and the checks that need no weights (one error for all ranks);
    the preflight's notes are said once, by the process the user started."""
    from autotrain.run.fit import planned
    from autotrain.run.preflight import preflight

    plan = planned(this.cfg, this.cfg.hub.token, this.folder if resume else None)
    found = preflight(this.cfg, plan)
    if found.problems:
        raise UserInputErrors(found.problems)
    if not launched():
        for note in found.notes:
            this.say(f"note: {note}")
    return plan


def train(this: Run, resume: str | None, stop) -> int:
    from autotrain.training.checkpoints import find_resume_checkpoint

    checkpoint = find_resume_checkpoint(this.folder, resume, warn=this.say) if resume else None
    this.checkpoint = checkpoint
    this.stop, stop.before_exit = stop, this.on_second_signal
    if checkpoint:
        this.say(f"resuming from {checkpoint}")
    trainer, progress, checkpoint = _build(this, checkpoint, stop, resume)
    this.checkpoint = checkpoint
    done = _schedule_done(checkpoint, this.cfg) if checkpoint else None
    if done is not None:  # killed during the final save: train no step past the schedule, save again
        this.say(f"{checkpoint} is at step {done}, the end of the schedule: no step left to train; saving the model")
        from autotrain.training.checkpoints import load_finished_schedule

        load_finished_schedule(trainer, checkpoint)
        stop.finishing = True
        code = _completed(this, trainer, {}, trained=False)
        _leave_process_group()
        return code
    try:
        result = trainer.train(resume_from_checkpoint=checkpoint)
    finally:
        progress.close()
    if stop.agreed is not None:  # the same on every rank: all save and stop, or none
        code = _interrupted(this, trainer, stop.agreed)
        stop.wait_for_other_ranks()  # none exits while another still writes the checkpoint
    else:
        code = _completed(this, trainer, dict(result.metrics))
    _leave_process_group()
    return code


def _build(this: Run, checkpoint: str | None, stop, resume: str | None):
    """The trainer with autotrain's callbacks, and run.json started; (trainer, progress display, the
    checkpoint every rank resumes from)."""
    from transformers.trainer_callback import PrinterCallback

    from autotrain.data.mapped import ReleasedPages
    from autotrain.trainers import build_trainer
    from autotrain.training.checkpoints import AtomicCheckpoints, ResumedSchedule
    from autotrain.training.guards import install_loss_hooks
    from autotrain.training.memory import current_rss, mark_baseline
    from autotrain.training.metrics_log import MetricsLog
    from autotrain.training.out_of_memory import optimizer_step_watch
    from autotrain.training.progress import ProgressCallback

    cfg, folder = this.cfg, this.folder
    quiet_libraries()
    if this.plan.precision.device == "cpu":
        from autotrain.training.allocator import return_freed_blocks

        return_freed_blocks()  # resident memory follows the tensors alive (what the estimate counts)
    memory = _memory_estimate(this)
    before_model = current_rss()
    progress = ProgressCallback()
    # The builder returns the plan it ran: the resolved one, or one it refined (recorded as such).
    trainer, this.plan = build_trainer(cfg, this.plan, [progress, stop], token=cfg.hub.token)
    if resume:  # each rank looked in its own view of the folder: every rank resumes where rank 0 does
        from autotrain.training.checkpoints import same_checkpoint_on_every_rank

        checkpoint = same_checkpoint_on_every_rank(checkpoint)
    trainer.remove_callback(PrinterCallback)  # our progress display replaces its raw dict lines
    if checkpoint:
        _check_fits(this, checkpoint, trainer.model)
        loraplus = this.plan.adapter.loraplus_lr_ratio if this.plan.adapter is not None else None
        # the schedule as the config says (LoRA+'s B matrices keep their ratio)
        trainer.add_callback(ResumedSchedule(cfg.training_args.lr, this.say, loraplus or 1.0))
    install_loss_hooks(trainer, cfg.training_args.nan_policy)
    this.optimizer_watch = optimizer_step_watch()
    trainer.add_callback(this.optimizer_watch)
    AtomicCheckpoints(folder, cfg.training_args.save_total_limit, [checkpoint] if checkpoint else []).attach(trainer)
    progress.trainer = trainer
    trainer.add_callback(MetricsLog(folder, trainer))  # logs/metrics.jsonl: live charts in `autotrain app`
    trainer.add_callback(ReleasedPages(trainer.train_dataset, *_datasets(trainer.eval_dataset)))
    if trainer.args.world_size > 1:
        this.say(f"processes: {trainer.args.world_size} (world size)")
    _start_manifest(this, memory)
    this.started, this.trainer = True, trainer
    mark_baseline(trainer.model, before_model)  # the measured peak leaves out what is not the model's
    return trainer, progress, checkpoint


def _datasets(value) -> list:
    """The evaluation datasets of a trainer's `eval_dataset` (None, one, or a dict of them)."""
    if value is None:
        return []
    return list(value.values()) if isinstance(value, dict) else [value]


def _schedule_done(checkpoint: str, cfg) -> int | None:
    """The checkpoint's step when it already holds the whole schedule (a run killed during its final save),
    else None: the Trainer would train one step more from it."""
    import json

    try:
        state = json.loads((Path(checkpoint) / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    step, epoch, args = state.get("global_step", 0), state.get("epoch") or 0, cfg.training_args
    if args.max_steps is not None:
        return step if step >= args.max_steps else None
    return step if epoch >= args.epochs - 1e-6 else None


def _check_fits(this: Run, checkpoint: str, model) -> None:
    """A checkpoint whose tensors are not the model's shapes (another base model, other LoRA settings) is bad
    input, said before the Trainer fails on it."""
    from autotrain.training.verify import shape_problem

    problem = shape_problem(Path(checkpoint), model)
    if problem:
        raise UserInputError(_misfit(this, checkpoint, problem))


def _misfit(this: Run, checkpoint: str, problem: str) -> str:
    return (
        f"--resume: checkpoint `{checkpoint}` does not fit the model being trained: {problem} (base_model "
        f"`{this.cfg.base_model}`); resume with the model and settings it was trained with, or start without --resume"
    )


def _leave_process_group() -> None:
    """Tear the rank's process group down here, once its last collective is done, rather than in the
    interpreter's exit: gloo's threads destroyed during exit now and then abort the process (`terminate
    called without an active exception`, exit -6), which turned a finished run into a failed one."""
    if launched() != ACCELERATE_LAUNCHED:  # only ranks the launcher started (Ray tears its own down)
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def _memory_estimate(this: Run) -> dict | None:
    """The memory estimate for run.json (main process only), shown when the run would not fit."""
    if not this.main_process:
        return None
    from autotrain.run.fit import memory_lines, memory_record

    record = memory_record(this.cfg, this.plan, token=this.cfg.hub.token)
    if record.get("fits") is False:
        this.say("\n".join(memory_lines(record)))
    return record


def _start_manifest(this: Run, memory: dict | None = None) -> None:
    """run.json, written once the data and model are known good (so a refused run leaves none)."""
    if not this.main_process:
        return
    from autotrain.config.interpolate import redact
    from autotrain.run.manifest import RunManifest
    from autotrain.training.lifetime import from_env

    argv = [redact(a, this.loaded.secrets) for a in sys.argv]
    parent = from_env(os.environ.get(PARENT_ENV))  # the launcher of the ranks: the run's own process
    this.manifest = RunManifest(this.loaded, this.plan, this.folder, argv, this.checkpoint, parent)
    if memory is not None:
        this.manifest.data["memory"] = memory
    this.manifest.write()


def _record_memory(this: Run) -> None:
    """The measured peak beside the estimate in run.json (and then the model card)."""
    if this.manifest is None or "memory" not in this.manifest.data:
        return
    from autotrain.run.fit import add_measured

    this.manifest.data["memory"] = add_measured(this.manifest.data["memory"], this.plan.precision.device)


def _record_compile_choices(this: Run, trainer) -> None:
    """Where CAME's compiled step failed and it took the eager step: in run.json and one line."""
    from autotrain.training.guards import compile_choices

    choices = compile_choices(getattr(trainer, "optimizer", None))
    if not choices:
        return
    failures = "; ".join(choice["failure"] for choice in choices)
    this.say(
        f"optimizer: CAME's compiled step failed ({failures}); it took the eager step (run.json: optimizer_compile)"
    )
    if this.manifest is not None:
        this.manifest.data["optimizer_compile"] = choices


def _interrupted(this: Run, trainer, signum: int) -> int:
    from autotrain.training.signals import Interrupted

    code = Interrupted(signum).exit_code
    last = last_checkpoint(this.folder)
    this.say(
        f"interrupted: checkpoint saved to {last} (step {trainer.state.global_step}); "
        f"resume with:\n  {resume_command(this.loaded, this.argv_sets)}"
    )
    return this.finish("interrupted", code, last)


def _completed(this: Run, trainer, metrics: dict, trained: bool = True) -> int:
    from autotrain.run.outputs import save_final

    if getattr(trainer, "skipped_batches", 0):
        metrics["skipped_batches"] = trainer.skipped_batches
        this.say(f"warning: skipped {trainer.skipped_batches} batch(es) with a non-finite loss")
    if getattr(trainer, "skipped_tensors", 0):
        metrics["skipped_tensors"] = trainer.skipped_tensors
        this.say(f"warning: the optimizer skipped {trainer.skipped_tensors} parameter update(s): non-finite gradient")
    if trained:
        _record_compile_choices(this, trainer)
        _record_memory(this)  # before saving: the peak of training, not of writing the model
    this.writing = "the final model"
    save_final(trainer, this.loaded, this.plan, metrics)
    this.writing = None
    if this.manifest is not None and "memory" in this.manifest.data:
        from autotrain.run.outputs import add_memory_to_card

        add_memory_to_card(this.folder, this.manifest.data["memory"])
    this.saved = True
    this.say(f"done: model saved to {this.folder}/ ({_losses(trainer, metrics)})")
    stopped = _stop_after_saving(this)
    if stopped is not None:
        return stopped
    code, exported = EXIT_OK, []
    if getattr(this.cfg, "export", None) is not None and trainer.is_world_process_zero():
        from autotrain.run.outputs import export_after_training

        code, exported = export_after_training(this.loaded, this.say)
    if this.cfg.hub.push_to_hub and trainer.is_world_process_zero():
        from autotrain.run.outputs import push_to_hub

        this.say(f"pushed to {push_to_hub(this.loaded, exported)}")
    return this.finish("completed", code, last_checkpoint(this.folder))


def _stop_after_saving(this: Run) -> int | None:
    """A signal that came during the final save waited for it; the export and upload that would follow are
    skipped (the exit code says so). A signal from here on interrupts them at once."""
    from autotrain.training.signals import EXIT_CODES

    stop = this.stop
    if stop is None:
        return None
    stop.finishing = False
    asked = (("export", getattr(this.cfg, "export", None)), ("upload", this.cfg.hub.push_to_hub))
    after = [what for what, wanted in asked if wanted]
    if stop.received is None or not after:
        return None
    this.say(f"stopped on {signal_name(stop.received)} before the {' and '.join(after)} (the model is saved)")
    return this.finish("completed", EXIT_CODES[stop.received], last_checkpoint(this.folder))


def signal_name(signum: int) -> str:
    import signal

    return signal.Signals(signum).name


def _losses(trainer, metrics: dict) -> str:
    """`final loss 1.6312 at step 50; mean train loss over the run 2.9229`: the Trainer's `train_loss` is the mean of
    every step, far above where the progress display ended; both are said, each by its name."""
    logged = [e for e in trainer.state.log_history if isinstance(e.get("loss"), (int, float))]
    mean = f"mean train loss over the run {metrics.get('train_loss', float('nan')):.4f}"
    return f"final loss {logged[-1]['loss']:.4f} at step {logged[-1]['step']}; {mean}" if logged else mean
