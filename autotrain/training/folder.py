"""What a project folder holds: whether it is a run, and how that run ended (no torch)."""

from __future__ import annotations

import json
from pathlib import Path

# What a finished or interrupted run leaves; a folder holding any of them is not silently reused.
RUN_FILES = ("autotrain.yaml", "run.json", "trainer_state.json")


def holds_run(folder: Path) -> bool:
    if not folder.is_dir():
        return False
    return any((folder / name).exists() for name in RUN_FILES) or any(folder.glob("checkpoint-*"))


def run_status(folder: Path) -> str | None:
    """`status` from the folder's run.json (completed, interrupted, failed, ...), if it has one."""
    try:
        return json.loads((folder / "run.json").read_text(encoding="utf-8")).get("status")
    except (OSError, ValueError, AttributeError):
        return None
