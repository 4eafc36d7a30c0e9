"""Finding the checkpoint to resume from."""

from __future__ import annotations

import re
from pathlib import Path

from autotrain.config.errors import UserInputError

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def is_complete(folder: Path) -> bool:
    return (folder / "trainer_state.json").is_file()


def list_checkpoints(project: Path) -> list[Path]:
    """Checkpoint folders, oldest first."""
    found = [p for p in project.glob("checkpoint-*") if p.is_dir() and _CHECKPOINT.match(p.name)]
    return sorted(found, key=lambda p: int(_CHECKPOINT.match(p.name).group(1)))


def find_resume_checkpoint(project: Path, resume: str) -> str | None:
    if resume != "latest":
        path = Path(resume)
        if not path.is_dir():
            raise UserInputError(f"--resume {resume}: no such checkpoint folder")
        if not is_complete(path):
            raise UserInputError(f"--resume {resume}: the checkpoint is incomplete (no trainer_state.json)")
        return str(path)
    complete = [p for p in list_checkpoints(project) if is_complete(p)]
    if not complete:
        raise UserInputError(f"--resume: no complete checkpoint in `{project}`; start without --resume "
                             "(add --overwrite to replace what is there)")
    return str(complete[-1])
