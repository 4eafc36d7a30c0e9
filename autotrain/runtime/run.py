"""Run a validated config: build the trainer, train, save; map every outcome to an exit code.

Exit codes: 0 done, 1 failure during training (traceback in project_name/logs/), 2 bad input,
3 diverged (non-finite loss), 130 / 143 interrupted by SIGINT / SIGTERM after saving a checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import traceback
from pathlib import Path

from autotrain.config.errors import UserInputError
from autotrain.config.load import LoadedConfig

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_DIVERGED = 0, 1, 2, 3
# Set in the environment of processes started by `autotrain.runtime.launch` (one per rank).
LAUNCHED_ENV = "AUTOTRAIN_LAUNCHED"


def _quiet_libraries() -> None:
    """Library chatter (warnings, tqdm bars) hides the progress display; AUTOTRAIN_DEBUG=1 keeps it."""
    from autotrain.cli.common import debug_enabled

    if debug_enabled():
        return
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import warnings

    import datasets
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)


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


def run(loaded: LoadedConfig, resume: str | None = None, overwrite: bool = False, argv_sets=()) -> int:
    from autotrain.cli.common import debug_enabled, eprint
    from autotrain.config.interpolate import redact

    cfg = loaded.config
    folder = Path(cfg.project_name)
    launched = os.environ.get(LAUNCHED_ENV) == "1"

    main_process = os.environ.get("RANK", "0") == "0"

    def say(message: str, every_rank: bool = False) -> None:
        """Progress messages come from the main process only; errors from every rank that has one."""
        if main_process or every_rank:
            prefix = "" if main_process or not launched else f"[rank {os.environ.get('RANK')}] "
            eprint(prefix + redact(message, loaded.secrets))

    manifest = None
    from autotrain.runtime.signals import GracefulStop, Interrupted

    stop = GracefulStop()
    stop.install()
    try:
        from autotrain.runtime.outputs import prepare_project

        if not launched:  # under a launcher the parent process has checked the folder already
            prepare_project(folder, resume, overwrite)
            from autotrain.runtime.plan import world_size

            if world_size(loaded) > 1:
                from autotrain.runtime.launch import relaunch

                return relaunch(loaded, resume=resume, argv_sets=list(argv_sets))
        checkpoint = None
        if resume:
            from autotrain.runtime.checkpoints import find_resume_checkpoint

            checkpoint = find_resume_checkpoint(folder, resume, warn=say)
            say(f"resuming from {checkpoint}")
        _quiet_libraries()
        from autotrain.runtime.manifest import RunManifest

        manifest = RunManifest(loaded, folder, [redact(a, loaded.secrets) for a in sys.argv]) if main_process else None
        if manifest is not None:
            manifest.write()

        from transformers.trainer_callback import PrinterCallback

        from autotrain.runtime.checkpoints import install_atomic_checkpoints
        from autotrain.runtime.guards import install_loss_hooks
        from autotrain.runtime.progress import ProgressCallback
        from autotrain.trainers import build_trainer
        from autotrain.trainers.common import check_logger, check_optimizer

        check_logger(cfg.log)
        check_optimizer(cfg.training_args.optimizer)
        progress = ProgressCallback()
        trainer = build_trainer(cfg, [progress, stop], token=cfg.hub.token)
        trainer.remove_callback(PrinterCallback)  # our progress display replaces its raw dict lines
        install_loss_hooks(trainer, cfg.training_args.nan_policy)
        install_atomic_checkpoints(trainer, folder, protected=[checkpoint] if checkpoint else [])
        progress.trainer = trainer
        if trainer.args.world_size > 1:
            say(f"processes: {trainer.args.world_size} (world size)")
        try:
            result = trainer.train(resume_from_checkpoint=checkpoint)
        finally:
            progress.close()
        last = _last_checkpoint(folder)
        if stop.agreed is not None:  # the same on every rank: all save and stop, or none
            code = Interrupted(stop.agreed).exit_code
            say(
                f"interrupted: checkpoint saved to {last} (step {trainer.state.global_step}); "
                f"resume with:\n  {resume_command(loaded, list(argv_sets))}"
            )
            _finish(manifest, "interrupted", code, last)
            stop.wait_for_other_ranks()
            return code
        metrics = dict(result.metrics)
        if getattr(trainer, "skipped_batches", 0):
            metrics["skipped_batches"] = trainer.skipped_batches
            say(f"warning: skipped {trainer.skipped_batches} batch(es) with a non-finite loss")
        from autotrain.runtime.outputs import save_final

        save_final(trainer, loaded, metrics)
        say(f"done: model saved to {folder}/ (train loss {metrics.get('train_loss', float('nan')):.4f})")
        if cfg.hub.push_to_hub and trainer.is_world_process_zero():
            from autotrain.runtime.outputs import push_to_hub

            say(f"pushed to {push_to_hub(loaded)}")
        _finish(manifest, "completed", EXIT_OK, _last_checkpoint(folder))
        return EXIT_OK
    except Interrupted as exc:
        say(f"interrupted by {exc} before training started; nothing to save")
        _finish(manifest, "interrupted", exc.exit_code, _last_checkpoint(folder))
        return exc.exit_code
    except UserInputError as exc:
        if debug_enabled():
            traceback.print_exc()
        say(f"error: {exc}", every_rank=True)
        _finish(manifest, "bad input", EXIT_BAD_INPUT, None)
        return EXIT_BAD_INPUT
    except Exception as exc:
        from autotrain.runtime.guards import Diverged

        last = _last_checkpoint(folder)
        if isinstance(exc, Diverged):
            say(f"error: {exc}" + (f"; the last good checkpoint is {last}" if last else ""), every_rank=True)
            _finish(manifest, "diverged", EXIT_DIVERGED, last)
            return EXIT_DIVERGED
        log = _write_traceback(folder, loaded.secrets)
        if debug_enabled():
            traceback.print_exc()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        say(f"error: training failed: {type(exc).__name__}: {first}", every_rank=True)
        if log is not None:
            say(f"full traceback: {log}", every_rank=True)
        _finish(manifest, "failed", EXIT_FAILURE, last)
        return EXIT_FAILURE
    finally:
        stop.uninstall()


def _last_checkpoint(folder: Path) -> str | None:
    from autotrain.runtime.checkpoints import is_complete, list_checkpoints

    complete = [p for p in list_checkpoints(folder) if is_complete(p)]
    return str(complete[-1]) if complete else None


def _finish(manifest, status: str, code: int, last: str | None) -> None:
    if manifest is not None:
        with contextlib.suppress(OSError):
            manifest.finish(status, code, last)
