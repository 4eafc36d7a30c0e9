"""Checkpoints that are complete or plainly not, and finding the one to resume from.

The Trainer writes a checkpoint file by file, so a crash or a full disk can leave a `checkpoint-N` that
looks real but is not. Here a checkpoint gets its completion marker only after every rank has written
its part and every file is flushed to disk: a `checkpoint-N` without the marker was not made by a
complete save and is never resumed from.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from transformers import TrainerCallback

from autotrain.errors import UserInputError
from autotrain.training.folder import COMPLETE_MARKER, is_complete, list_checkpoints, share_like_umask


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _fsync_tree(folder: Path) -> None:
    """Flush every file of a checkpoint, in parallel (one fsync after another waits on the disk each
    time: on a busy disk that was ~50 ms against ~7 ms), then the folder itself."""
    from concurrent.futures import ThreadPoolExecutor

    files = [p for p in folder.rglob("*") if p.is_file()]
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(files)))) as pool:
        list(pool.map(_fsync_file, files))
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def find_resume_checkpoint(project: Path, resume: str, warn=print) -> str:
    """`latest` = the newest complete checkpoint in `project` whose files check out (a damaged one is
    passed over with a warning); anything else is a checkpoint path, which must check out."""
    from autotrain.training.verify import checkpoint_problem

    if resume != "latest":
        path = Path(resume)
        if not path.is_dir():
            raise UserInputError(f"--resume {resume}: no such checkpoint folder")
        if not is_complete(path):
            raise UserInputError(
                f"--resume {resume}: the checkpoint is incomplete (no {COMPLETE_MARKER}); it was not fully written"
            )
        problem = checkpoint_problem(path)
        if problem:
            raise UserInputError(f"--resume {resume}: the checkpoint is damaged: {problem}")
        return str(path)
    checkpoints = list_checkpoints(project)
    for broken in (p for p in checkpoints if not is_complete(p)):
        warn(f"warning: skipping incomplete checkpoint {broken} (no {COMPLETE_MARKER})")
    complete = [p for p in checkpoints if is_complete(p)]
    if not complete:
        raise UserInputError(
            f"--resume: no complete checkpoint in `{project}`; start without --resume "
            "(add --overwrite to replace what is there)"
        )
    problems = []
    for candidate in reversed(complete):
        problem = checkpoint_problem(candidate)
        if problem is None:
            return str(candidate)
        problems.append(problem)
        warn(f"warning: skipping damaged checkpoint {candidate}: {problem}")
    raise UserInputError(
        f"--resume: every complete checkpoint in `{project}` is damaged (newest: {problems[0]}); "
        "start without --resume (add --overwrite to replace what is there)"
    )


def same_checkpoint_on_every_rank(checkpoint: str | None) -> str | None:
    """Rank 0's checkpoint to resume from, on every rank (call once the process group exists).

    Each rank finds `--resume latest` in its own view of the project folder; ranks resuming from different
    steps would take different numbers of steps (the first to finish leaving the others waiting in their
    next all-reduce) from different weights. Refused on every rank where some rank does not see that
    checkpoint complete (a project folder that is not on storage every machine shares).
    """
    from autotrain.training.ranks import main_rank_value, on_every_rank

    chosen = main_rank_value(checkpoint)
    if not on_every_rank(chosen is None or is_complete(Path(chosen))):
        raise UserInputError(
            f"--resume: rank 0 resumes from {chosen}, which is not complete on every machine; keep "
            "project_name on storage that every machine shares"
        )
    return chosen


class AtomicCheckpoints(TrainerCallback):
    """Marks each checkpoint complete once all of it is on disk, and rotates complete checkpoints only.

    The Trainer writes `checkpoint-N` file by file; `on_save` comes after the last file, on every rank.
    After a barrier (every rank has written its part), the main process flushes the files to disk and
    only then adds the marker. A checkpoint of the same step left by an earlier attempt loses its
    marker before it is written again (`on_step_end` / `on_epoch_end`, when a save is due), so a half
    rewritten folder never looks complete. Rotation (`save_total_limit`, taken over from the Trainer,
    whose own rotation would count broken checkpoints) never deletes the checkpoint the run resumed
    from nor the best one.
    """

    def __init__(self, project: Path, limit: int | None, protected: list[str] | tuple = ()):
        self.project = project
        self.limit = limit
        self.keep = {Path(p).resolve() for p in protected}
        self.trainer = None  # set by `attach`: the barrier needs the Trainer's accelerator

    def attach(self, trainer) -> AtomicCheckpoints:
        self.trainer = trainer
        trainer.add_callback(self)  # last: it sees `should_save` as every other callback left it
        return self

    def _unmark_rewrite(self, state, control) -> None:
        if control.should_save and state.is_world_process_zero:
            stale = self.project / f"checkpoint-{state.global_step}" / COMPLETE_MARKER
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()

    def on_step_end(self, args, state, control, **kwargs):
        self._unmark_rewrite(state, control)

    def on_epoch_end(self, args, state, control, **kwargs):
        self._unmark_rewrite(state, control)

    def on_save(self, args, state, control, **kwargs):
        self.trainer.accelerator.wait_for_everyone()
        if state.is_world_process_zero:
            folder = self.project / f"checkpoint-{state.global_step}"
            share_like_umask(folder)
            _fsync_tree(folder)
            (folder / COMPLETE_MARKER).write_text("complete\n", encoding="utf-8")
            _fsync_file(folder / COMPLETE_MARKER)
            _fsync_dir(folder)
            best = {Path(state.best_model_checkpoint).resolve()} if state.best_model_checkpoint else set()
            _rotate(self.project, self.limit, self.keep | best)
        self.trainer.accelerator.wait_for_everyone()


def save_checkpoint_now(trainer) -> None:
    """A checkpoint of the trainer's state as it is, outside the training loop (after an allocation failed
    mid-step, the weights and optimizer state are those of the last completed step), marked complete and
    rotated as the loop's own are: what the loop runs (transformers has no public call for it:
    autotrain.compat.transformers), then the callbacks' `on_save` (AtomicCheckpoints marks the folder complete)."""
    from autotrain.compat.transformers import save_checkpoint

    save_checkpoint(trainer)
    trainer.control = trainer.callback_handler.on_save(trainer.args, trainer.state, trainer.control)


def _rotate(project: Path, limit: int | None, keep: set[Path]) -> None:
    if not limit:
        return
    complete = [p for p in list_checkpoints(project) if is_complete(p)]
    for old in complete[: max(0, len(complete) - limit)]:
        if old.resolve() not in keep:
            shutil.rmtree(old, ignore_errors=True)


class ResumedSchedule(TrainerCallback):
    """A resumed run's learning-rate schedule continues as the config now defines it, from the resumed step.

    The Trainer builds the schedule from the config, then loads the checkpoint's scheduler state, which holds
    the old base rate and the old schedule's last rate: a new `lr` would be ignored and the first step after
    the resume would run at the old schedule's rate. Here the base rate becomes the config's (groups at a
    fraction of it keep their fraction) and the rate of the resumed step is taken from the schedule as now
    defined (a longer `max_steps` stretches it): the same rates a run with this config has at those steps.
    `highest`: the fastest group's rate over `lr` (LoRA+'s B matrices: its ratio; otherwise 1).
    """

    def __init__(self, lr: float, say=print, highest: float = 1.0):
        self.lr = lr
        self.say = say
        self.highest = highest

    def on_train_begin(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
        from torch.optim.lr_scheduler import LambdaLR

        scheduler = getattr(lr_scheduler, "scheduler", lr_scheduler)  # under accelerate's wrapper, if any
        if not state.global_step or optimizer is None or not isinstance(scheduler, LambdaLR):
            return  # transformers' schedules are LambdaLR: each rate a function of the step alone
        bases = scheduler.base_lrs
        old = max(bases) / self.highest
        ratio = self.lr / old if old else 1.0
        if abs(ratio - 1) > 1e-9:
            scheduler.base_lrs = [base * ratio for base in bases]
            for group in optimizer.param_groups:
                group["initial_lr"] = group.get("initial_lr", group["lr"]) * ratio
            self.say(f"learning rate: {old:g} -> {self.lr:g} from step {state.global_step} on")
        # The resumed step's rates as the schedule now defines them: a step from the one before sets each
        # group's rate and the last rate (what get_last_lr(), the logged rate, reads) from the step alone.
        scheduler.last_epoch -= 1
        scheduler.step()


class _ScheduleDone(Exception):
    """`train(resume_from_checkpoint=...)` has loaded the checkpoint, and no step of the schedule is left."""


class _LoadOnly(TrainerCallback):
    """The first callback of the Trainer: ends `train()` when training would begin, after the Trainer has
    loaded the checkpoint's weights, optimizer and state, before any step or any other callback."""

    def on_train_begin(self, args, state, control, **kwargs):
        raise _ScheduleDone


def load_finished_schedule(trainer, checkpoint: str) -> None:
    """The weights and state of `checkpoint`, which holds the whole schedule (a run killed during its final
    save), into `trainer`, loaded by `train(resume_from_checkpoint=...)` itself, which would otherwise train
    one step past it."""
    stop = _LoadOnly()
    trainer.callback_handler.callbacks.insert(0, stop)
    try:
        trainer.train(resume_from_checkpoint=checkpoint)
    except _ScheduleDone:
        pass
    finally:
        trainer.remove_callback(stop)
    trainer.is_in_train = False  # as a finished train() leaves it
