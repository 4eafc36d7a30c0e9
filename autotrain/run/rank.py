"""The rank: the process that trains. One per process of a run, whoever started it: the parent itself for a
one-process run (run/runner.py), `accelerate launch` (run/launch.py) or a Ray Train worker (run/ray_launch.py)
for several. It resolves the plan, builds the trainer, trains, saves and maps every outcome to an exit code;
it never claims the project folder (the parent has) and never launches.

Exit codes: 0 done, 1 failure during training (traceback in project_name/logs/), 2 bad input,
3 diverged (non-finite loss), 130 / 143 interrupted by SIGINT / SIGTERM after saving a checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from autotrain.config.load import LoadedConfig
from autotrain.errors import EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_FAILURE, EXIT_OK, UserInputError, debug_enabled, eprint
from autotrain.training.quiet import quiet_bars, quiet_libraries

# Set in the environment of every rank a launcher starts, so that it trains instead of launching again:
# "1" under `accelerate launch`, "ray" in a Ray Train worker.
LAUNCHED_ENV = "AUTOTRAIN_LAUNCHED"
ACCELERATE_LAUNCHED = "1"
RAY_LAUNCHED = "ray"
# The parent's identity (training/lifetime.py), for the ranks it starts: they end with it, and run.json names it.
PARENT_ENV = "AUTOTRAIN_PARENT"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def launched() -> str | None:
    """How this process was launched as a rank ("1": accelerate, "ray"), or None for a parent."""
    value = os.environ.get(LAUNCHED_ENV)
    return value if value in (ACCELERATE_LAUNCHED, RAY_LAUNCHED) else None


def _write_traceback(folder: Path, secrets: set[str]) -> Path | None:
    from autotrain.config.interpolate import redact

    try:
        (folder / "logs").mkdir(parents=True, exist_ok=True)
        rank = os.environ.get("RANK")
        path = folder / "logs" / (f"error-rank{rank}.log" if rank not in (None, "0") else "error.log")
        path.write_text(redact(traceback.format_exc(), secrets), encoding="utf-8")
        return path
    except OSError:
        return None


def resume_command(loaded: LoadedConfig, argv_sets: list[str]) -> str:
    parts = ["autotrain", loaded.config.task, "--config", loaded.source]
    for item in argv_sets:
        parts += ["--set", item]
    return shlex.join([*parts, "--resume"])


class Run:
    """One run of a validated config in this process: what it says, what it wrote, how it ended."""

    def __init__(self, loaded: LoadedConfig, argv_sets: Sequence[str]):
        self.loaded = loaded
        self.cfg = loaded.config
        self.folder = Path(self.cfg.project_name)
        self.argv_sets = list(argv_sets)
        # a rank started by run.launch ("1") or a Ray Train worker (run.ray_launch)
        self.launched = launched() is not None
        self.main_process = os.environ.get("RANK", "0") == "0"
        self.manifest = None
        self.started = False  # trainer.train() was entered
        self.plan = None  # RunPlan, once resolved
        self.rendezvous = None  # the multi-node check-in store (machine 0 serves it while the run lasts)
        self.checkpoint = None  # the checkpoint this run resumes from
        self.saved = False  # the final model is saved
        self.trainer = None  # once built
        self.writing = None  # what is being written outside the Trainer's checkpoints, for a full disk's message
        self.stop = None  # the GracefulStop of this process

    def say(self, message: str, every_rank: bool = False) -> None:
        """Progress messages come from the main process only; errors from every rank that has one."""
        from autotrain.config.interpolate import redact

        if self.main_process or every_rank:
            prefix = "" if self.main_process or not self.launched else f"[rank {os.environ.get('RANK')}] "
            eprint(prefix + redact(message, self.loaded.secrets))

    def finish(self, status: str, code: int, last: str | None, how: str | None = None, error: str | None = None) -> int:
        if self.manifest is not None:
            with contextlib.suppress(OSError):
                self.manifest.finish(status, code, last, how, error)
        return code

    def on_second_signal(self, signum: int) -> None:
        """A second SIGTERM / SIGINT ends the process at once: run.json says so first."""
        import signal

        from autotrain.training.signals import EXIT_CODES

        name = signal.Signals(signum).name
        how = f"a second {name} ended it at once, without saving"
        self.finish("interrupted", EXIT_CODES[signum], last_checkpoint(self.folder), how=how)


def resolve(this: Run):
    """The plan, decided once in this process, and the checks that need no weights (one error for all ranks)."""
    from autotrain.training.plan import preflight, resolve_plan

    plan = resolve_plan(this.cfg)
    problems = preflight(this.cfg, plan)
    if problems:
        raise UserInputError("; ".join(problems))
    return plan


def train(this: Run, resume: str | None, stop) -> int:
    from autotrain.training.checkpoints import find_resume_checkpoint

    checkpoint = find_resume_checkpoint(this.folder, resume, warn=this.say) if resume else None
    this.checkpoint = checkpoint
    this.stop, stop.before_exit = stop, this.on_second_signal
    if checkpoint:
        this.say(f"resuming from {checkpoint}")
    trainer, progress = _build(this, checkpoint, stop)
    done = _schedule_done(checkpoint, this.cfg) if checkpoint else None
    if done is not None:  # killed during the final save: train no step past the schedule, save again
        this.say(f"{checkpoint} is at step {done}, the end of the schedule: no step left to train; saving the model")
        _load_trained(trainer, checkpoint)
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


def _build(this: Run, checkpoint: str | None, stop):
    """The trainer with autotrain's callbacks, and run.json started; (trainer, progress display)."""
    from transformers.trainer_callback import PrinterCallback

    from autotrain.trainers import build_trainer
    from autotrain.training.checkpoints import AtomicCheckpoints, ResumedSchedule
    from autotrain.training.guards import install_loss_hooks
    from autotrain.training.memory import current_anon, mark_baseline
    from autotrain.training.metrics_log import MetricsLog
    from autotrain.training.progress import ProgressCallback

    cfg, folder = this.cfg, this.folder
    quiet_libraries()
    memory = _memory_estimate(this)
    before_model = current_anon()
    progress = ProgressCallback()
    # The builder returns the plan it ran: the resolved one, or one it refined (recorded as such).
    trainer, this.plan = build_trainer(cfg, this.plan, [progress, stop], token=cfg.hub.token)
    trainer.remove_callback(PrinterCallback)  # our progress display replaces its raw dict lines
    if checkpoint:
        _check_fits(this, checkpoint, trainer.model)
        trainer.add_callback(ResumedSchedule(cfg.training_args.lr, this.say))  # the schedule as the config says
    install_loss_hooks(trainer, cfg.training_args.nan_policy)
    AtomicCheckpoints(folder, cfg.training_args.save_total_limit, [checkpoint] if checkpoint else []).attach(trainer)
    progress.trainer = trainer
    trainer.add_callback(MetricsLog(folder, trainer))  # logs/metrics.jsonl: live charts in `autotrain app`
    if trainer.args.world_size > 1:
        this.say(f"processes: {trainer.args.world_size} (world size)")
    _start_manifest(this, memory)
    this.started, this.trainer = True, trainer
    mark_baseline(trainer.model, before_model)  # the measured peak leaves out what is not the model's
    return trainer, progress


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


def _load_trained(trainer, checkpoint: str) -> None:
    """The checkpoint's weights and state into `trainer`, as `train(resume_from_checkpoint=...)` loads them."""
    from transformers import TrainerState

    trainer._load_from_checkpoint(checkpoint)
    trainer.state = TrainerState.load_from_json(str(Path(checkpoint) / "trainer_state.json"))


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
    """What CAME's auto compile measured (on CUDA), in run.json and one line."""
    from autotrain.training.guards import compile_choices

    choices = compile_choices(getattr(trainer, "optimizer", None))
    if not choices:
        return
    kept = sum(choice["kept"] == "compiled" for choice in choices)
    this.say(
        f"optimizer: the compiled step measured faster and kept for {kept} of {len(choices)} groups of "
        "same-shaped parameters (run.json: optimizer_compile)"
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


def failure_code(this: Run, exc: BaseException) -> int:
    """Report an exception that ended the run and return its exit code (re-raise what is not ours)."""
    from autotrain.training.disk import is_disk_full

    if is_disk_full(exc):  # checked first: a full disk may also be behind a UserInputError (DiskFull)
        return _disk_full(this, exc)
    if isinstance(exc, UserInputError):
        if debug_enabled():
            traceback.print_exc()
        this.say(f"error: {exc}", every_rank=True)
        return this.finish("bad input", EXIT_BAD_INPUT, None, error=str(exc))
    if not isinstance(exc, Exception):  # SystemExit, KeyboardInterrupt: not ours to map
        raise exc
    from autotrain.training.guards import Diverged
    from autotrain.training.signals import Interrupted

    if isinstance(exc, Interrupted):
        last = last_checkpoint(this.folder)
        if this.saved:  # during the export or the upload: what was trained is saved whole
            this.say(f"interrupted by {exc} after the final model was saved to {this.folder}/")
            return this.finish("completed", exc.exit_code, last)
        this.say(f"interrupted by {exc} before training started; nothing to save")
        return this.finish("interrupted", exc.exit_code, last)
    last = last_checkpoint(this.folder)
    if isinstance(exc, Diverged):
        this.say(f"error: {exc}" + (f"; the last good checkpoint is {last}" if last else ""), every_rank=True)
        return this.finish("diverged", EXIT_DIVERGED, last, error=str(exc))
    from autotrain.training.verify import refused_pickle, size_mismatch

    if this.checkpoint and size_mismatch(exc):  # what _check_fits could not read (a sharded checkpoint)
        this.say(f"error: {_misfit(this, this.checkpoint, size_mismatch(exc))}", every_rank=True)
        return this.finish("bad input", EXIT_BAD_INPUT, last, error=size_mismatch(exc))
    if refused_pickle(exc):  # torch refused to unpickle a model file: the input, not the run (and no advice)
        this.say(f"error: the model files (base_model or a checkpoint): {refused_pickle(exc)}", every_rank=True)
        return this.finish("bad input", EXIT_BAD_INPUT, last)
    log = _write_traceback(this.folder, this.loaded.secrets)
    if debug_enabled():
        traceback.print_exc()
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    this.say(f"error: training failed: {type(exc).__name__}: {first}", every_rank=True)
    if log is not None:
        this.say(f"full traceback: {log}", every_rank=True)
    return this.finish("failed", EXIT_FAILURE, last, error=f"{type(exc).__name__}: {first}")


def _disk_full(this: Run, exc: BaseException) -> int:
    """The device filled up: one line saying what was written where and the space a checkpoint takes; the
    checkpoint cut short is removed (never complete, it frees space), the last complete one is kept."""
    import shutil

    from autotrain.training.disk import DiskFull, no_space, size_of
    from autotrain.training.folder import is_complete

    step = this.trainer.state.global_step if this.trainer is not None else None
    partial = this.folder / f"checkpoint-{step}" if step else None
    if partial is not None and partial.is_dir() and not is_complete(partial) and this.writing is None:
        if this.main_process:
            shutil.rmtree(partial, ignore_errors=True)
        writing = f"checkpoint `{partial.name}`"
    else:
        writing = this.writing or (f"`{exc.filename}`" if getattr(exc, "filename", None) else "the run's files")
    last = last_checkpoint(this.folder)
    error = exc if isinstance(exc, DiskFull) else no_space(this.folder, writing, size_of(last) if last else None)
    if debug_enabled():
        traceback.print_exc()
    if last:
        this.say(f"error: {error}; the last complete checkpoint, {last}, is kept: then resume with")
        this.say(f"  {resume_command(this.loaded, this.argv_sets)}")
    else:
        this.say(f"error: {error}; no checkpoint was complete yet")
    return this.finish("failed", EXIT_BAD_INPUT, last, error=str(error))


def last_checkpoint(folder: Path) -> str | None:
    from autotrain.training.checkpoints import is_complete, list_checkpoints

    complete = [p for p in list_checkpoints(folder) if is_complete(p)]
    return str(complete[-1]) if complete else None


def run_rank(loaded: LoadedConfig, resume: str | None = None, argv_sets: Sequence[str] = ()) -> int:
    """A launched rank (accelerate's child process, a Ray worker): plan, train, save; returns the exit code."""
    if launched() == ACCELERATE_LAUNCHED:
        die_with_parent()
    quiet_bars()  # before anything imports transformers (and tqdm)
    this = Run(loaded, argv_sets)
    stop = None
    held = None
    try:
        from autotrain.run.project import hold_for_rank

        held = hold_for_rank(this.folder)  # the folder cannot be claimed again while this rank lives
        from autotrain.training.signals import GracefulStop

        stop = GracefulStop()
        stop.install()
        this.plan = resolve(this)
        if launched() == ACCELERATE_LAUNCHED and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            from autotrain.run.rendezvous import check_ranks

            check_ranks(this.cfg.distributed.rendezvous_timeout)  # before the model loads
        return train(this, resume, stop)
    except BaseException as exc:
        return failure_code(this, exc)
    finally:
        if stop is not None:
            stop.uninstall()
        if held is not None:
            os.close(held)


def die_with_parent() -> None:
    """End this rank when the process that launched it ends, however it ends (SIGKILL included), so that no
    rank trains on without its launcher: on Linux the kernel sends SIGKILL the moment the parent exits
    (PR_SET_PDEATHSIG); elsewhere a thread looks every second. A parent already gone ends the rank here."""
    from autotrain.training import lifetime

    parent = lifetime.from_env(os.environ.get(PARENT_ENV))
    if parent is None:
        return
    watch = True
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        with contextlib.suppress(OSError, AttributeError):
            watch = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0
    if lifetime.state(parent) == lifetime.GONE:  # it ended before the line above took effect
        _orphaned(parent)
    if watch:
        import threading

        threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="autotrain-parent").start()


def _watch_parent(parent: dict) -> None:
    import time

    from autotrain.training import lifetime

    while lifetime.state(parent) != lifetime.GONE:
        time.sleep(1.0)
    _orphaned(parent)


def _orphaned(parent: dict) -> None:
    eprint(f"error: the process that launched this rank (pid {parent['pid']}) has ended; this rank stops too")
    os._exit(EXIT_FAILURE)
