"""Run a validated config: build the trainer, train, save; map every outcome to an exit code."""

from __future__ import annotations

import os
import traceback
from pathlib import Path

from autotrain.config.errors import UserInputError
from autotrain.config.load import LoadedConfig

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_DIVERGED = 0, 1, 2, 3


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


def _write_traceback(folder: Path) -> Path | None:
    try:
        (folder / "logs").mkdir(parents=True, exist_ok=True)
        path = folder / "logs" / "error.log"
        path.write_text(traceback.format_exc(), encoding="utf-8")
        return path
    except OSError:
        return None


def run(loaded: LoadedConfig, resume: str | None = None, overwrite: bool = False, argv_sets=()) -> int:
    from autotrain.cli.common import debug_enabled, eprint

    cfg = loaded.config
    folder = Path(cfg.project_name)
    try:
        from autotrain.runtime.outputs import prepare_project

        prepare_project(folder, resume, overwrite)
        _quiet_libraries()
        from autotrain.runtime.guards import install_loss_hooks
        from autotrain.runtime.progress import ProgressCallback
        from autotrain.trainers import build_trainer

        progress = ProgressCallback()
        trainer = build_trainer(cfg, [progress], token=cfg.hub.token)
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # our progress display replaces its raw dict lines
        install_loss_hooks(trainer, cfg.training_args.nan_policy)
        progress.trainer = trainer
        checkpoint = None
        if resume:
            from autotrain.runtime.checkpoints import find_resume_checkpoint

            checkpoint = find_resume_checkpoint(folder, resume)
        try:
            result = trainer.train(resume_from_checkpoint=checkpoint)
        finally:
            progress.close()
        metrics = dict(result.metrics)
        if getattr(trainer, "skipped_batches", 0):
            metrics["skipped_batches"] = trainer.skipped_batches
        from autotrain.runtime.outputs import save_final

        save_final(trainer, loaded, metrics)
        eprint(f"done: model saved to {folder}/ (train loss {metrics.get('train_loss', float('nan')):.4f})")
        return EXIT_OK
    except UserInputError as exc:
        if debug_enabled():
            traceback.print_exc()
        eprint(f"error: {exc}")
        return EXIT_BAD_INPUT
    except Exception as exc:
        from autotrain.runtime.guards import Diverged

        if isinstance(exc, Diverged):
            eprint(f"error: {exc}")
            return EXIT_DIVERGED
        log = _write_traceback(folder)
        if debug_enabled():
            traceback.print_exc()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        eprint(f"error: training failed: {type(exc).__name__}: {first}")
        if log is not None:
            eprint(f"full traceback: {log}")
        return EXIT_FAILURE
