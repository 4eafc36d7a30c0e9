"""What a project folder holds: whether it is a run, how that run ended, its checkpoints (no torch)."""

from __future__ import annotations

import json
import re
from pathlib import Path

# What a finished or interrupted run leaves; a folder holding any of them is not silently reused.
RUN_FILES = ("autotrain.yaml", "run.json", "trainer_state.json")
# How a run that ended before it could write its record ended, by its exit code (the documented codes).
EXIT_STATUS = {0: "completed", 1: "failed", 2: "bad input", 3: "diverged", 130: "interrupted", 143: "interrupted"}


def holds_run(folder: Path) -> bool:
    if not folder.is_dir():
        return False
    return any((folder / name).exists() for name in RUN_FILES) or any(folder.glob("checkpoint-*"))


def run_record(folder: Path) -> dict:
    """The folder's run.json as it stands ({} without one), with a `running` run whose process is gone shown
    as `died` (and `how`): the record of a process killed before it could write its end."""
    try:
        record = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict):
        return {}
    if record.get("status") == "running":
        from autotrain.training.lifetime import GONE, state

        process = record.get("process")
        if state(process) == GONE:
            record["status"] = "died"
            record["how"] = (
                f"its process (pid {process['pid']}) ended without recording how the run ended: it was killed "
                "(SIGKILL, out of memory) or its machine stopped"
            )
    return record


def run_status(folder: Path) -> str | None:
    """`status` of the folder's run (completed, interrupted, failed, died, ...), if it has a run.json."""
    status = run_record(folder).get("status")
    return status if isinstance(status, str) else None


COMPLETE_MARKER = ".autotrain-complete"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def is_complete(folder: Path) -> bool:
    return (folder / COMPLETE_MARKER).is_file() and (folder / "trainer_state.json").is_file()


def list_checkpoints(project: Path) -> list[Path]:
    """Checkpoint folders (complete or not), oldest first."""
    found = [p for p in project.glob("checkpoint-*") if p.is_dir() and _CHECKPOINT.match(p.name)]
    return sorted(found, key=lambda p: int(_CHECKPOINT.match(p.name).group(1)))


def _umask() -> int:
    """The process's umask, read without changing it (os.umask would, for an instant, for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def share_like_umask(folder: Path) -> None:
    """Give the weights under `folder` that safetensors wrote owner-only (it writes its files 0600) the mode
    the umask gives any new file, so whoever may read the folder (another user of the machine, the host of
    a container) can read them too. Only `*.safetensors` files 0600 and ours change; a 077 umask keeps them."""
    import os

    mode = 0o666 & ~_umask()
    for path in folder.rglob("*.safetensors"):
        try:
            info = path.lstat()
        except OSError:
            continue
        if path.is_file() and not path.is_symlink() and info.st_mode & 0o777 == 0o600 and info.st_uid == os.getuid():
            path.chmod(mode)
