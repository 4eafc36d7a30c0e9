"""The rank: one process of a multi-process run, started by `accelerate launch` (run/launch.py) or as a Ray
Train worker (run/ray_launch.py). It ends with the process that launched it, holds the folder's ranks' lock
while it lives, and trains as a one-process run does (run/train.py); it never claims the folder (the parent
has) and never launches. `failure_code` maps what ended a run to its exit code, for the parent too.

Exit codes: 0 done, 1 failure during training (traceback in project_name/logs/), 2 bad input (a full disk
too), 3 diverged (non-finite loss), 5 out of memory (run/oom.py), 130 / 143 interrupted by SIGINT / SIGTERM
after saving a checkpoint.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Sequence
from pathlib import Path

from autotrain.config.load import LoadedConfig
from autotrain.errors import EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_FAILURE, UserInputError, debug_enabled
from autotrain.run.process import ACCELERATE_LAUNCHED, PARENT_ENV, Run, last_checkpoint, launched, resume_command
from autotrain.run.train import _misfit, resolve, train
from autotrain.training.quiet import quiet_bars


def run_rank(loaded: LoadedConfig, resume: str | None = None, argv_sets: Sequence[str] = ()) -> int:
    """A launched rank (accelerate's child process, a Ray worker): plan, train, save; returns the exit code."""
    if launched() == ACCELERATE_LAUNCHED:
        from autotrain.training.lifetime import die_with, from_env

        die_with(from_env(os.environ.get(PARENT_ENV)))  # no rank trains on without its launcher
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

            # before the model loads; every rank's plan compared (decisions that change the collectives)
            check_ranks(this.cfg.distributed.rendezvous_timeout, plan=this.plan.record())
        return train(this, resume, stop)
    except BaseException as exc:
        return failure_code(this, exc)
    finally:
        if stop is not None:
            stop.uninstall()
        if held is not None:
            os.close(held)


def failure_code(this: Run, exc: BaseException) -> int:
    """Report an exception that ended the run and return its exit code (re-raise what is not ours)."""
    from autotrain.training.disk import is_disk_full

    if is_disk_full(exc):  # checked first: a full disk may also be behind a UserInputError (DiskFull)
        return _disk_full(this, exc)
    from autotrain.training.out_of_memory import is_out_of_memory

    if isinstance(exc, Exception) and is_out_of_memory(exc):
        from autotrain.run.oom import out_of_memory

        return out_of_memory(this, exc)
    if isinstance(exc, UserInputError):
        if debug_enabled():
            traceback.print_exc()
        for line in exc.lines:  # several problems found at once: one line each
            this.say(f"error: {line}", every_rank=True)
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
