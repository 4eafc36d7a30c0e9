"""This process's part in a run: how it was started (the parent, or a rank a launcher started), what it
says, and how it records the run's end. Shared by the parent (run/runner.py), the training (run/train.py)
and the rank (run/rank.py).
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from autotrain.config.load import LoadedConfig
from autotrain.errors import eprint

# Set in the environment of every rank a launcher starts, so that it trains instead of launching again:
# "1" under `accelerate launch`, "ray" in a Ray Train worker.
LAUNCHED_ENV = "AUTOTRAIN_LAUNCHED"
ACCELERATE_LAUNCHED = "1"
RAY_LAUNCHED = "ray"
# The parent's identity (training/lifetime.py), for the ranks it starts: they end with it, and run.json names it.
PARENT_ENV = "AUTOTRAIN_PARENT"
# `batch_size: auto` as the parent decided it (run/fit.py), for the ranks: each deciding alone could differ.
BATCH_ENV = "AUTOTRAIN_BATCH_CHOICE"


def launched() -> str | None:
    """How this process was launched as a rank ("1": accelerate, "ray"), or None for a parent."""
    value = os.environ.get(LAUNCHED_ENV)
    return value if value in (ACCELERATE_LAUNCHED, RAY_LAUNCHED) else None


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
        self.optimizer_watch = None  # whether the optimizer is inside its step (autotrain.run.oom reads it)

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


def last_checkpoint(folder: Path) -> str | None:
    from autotrain.training.checkpoints import is_complete, list_checkpoints

    complete = [p for p in list_checkpoints(folder) if is_complete(p)]
    return str(complete[-1]) if complete else None
