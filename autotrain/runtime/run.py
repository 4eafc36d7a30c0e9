"""Run a validated config: build the trainer, train, save; map every outcome to an exit code."""

from __future__ import annotations

from autotrain.config.load import LoadedConfig


def run(loaded: LoadedConfig, resume: str | None = None, overwrite: bool = False, argv_sets=()) -> int:
    from autotrain.cli.common import eprint

    eprint(f"error: training for `{loaded.config.task}` is not built yet; the config is valid.")
    return 1
