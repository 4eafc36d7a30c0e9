"""`autotrain validate F [F ...]`: check configs without importing torch."""

from __future__ import annotations

from pathlib import Path

import typer

from autotrain.cli.common import SetOption, with_mount_hint
from autotrain.errors import EXIT_BAD_INPUT, eprint


def validate(
    files: list[Path] = typer.Argument(..., help="Config files to check.", show_default=False),
    set_: list[str] = SetOption,
) -> None:
    """Check configs only: one `FILE: ok` line per good file, every problem of a bad one (a base_model or
    data.path that can only be a path here and is not, too). Exit 2 if any is bad."""
    from autotrain.config.load import load_config
    from autotrain.errors import ConfigError

    bad = problems = 0
    for path in files:
        try:
            loaded = load_config(path, set_ or [], local_paths=True)
        except ConfigError as exc:
            bad += 1
            problems += len(exc.issues)
            for issue in exc.issues:
                eprint(with_mount_hint(issue, path).format())
            continue
        cfg = loaded.config
        kind = cfg.task + (f" ({cfg.trainer})" if getattr(cfg, "trainer", None) else "")
        note = " (AutoTrain Advanced format)" if loaded.advanced else ""
        print(f"{path}: ok: {kind}{note}")
        for notice in loaded.notices[1 if loaded.advanced else 0 :]:  # the first one says it was translated
            eprint(f"note: {notice}")
    if bad:
        files_bad = f" in {bad} of {len(files)} files" if len(files) > 1 else ""
        eprint(f"{problems} problem{'s' if problems != 1 else ''} found{files_bad}.")
        raise typer.Exit(EXIT_BAD_INPUT)
