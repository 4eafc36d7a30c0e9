"""A full disk is a message, not a traceback: which folder, how much space the write needed, how much is free.

A device that fills up shows itself in several ways: `OSError` with ENOSPC (or EDQUOT, a quota), torch's
archive writer (`[enforce fail at inline_container.cc] . unexpected pos ...`, `file write failed`),
safetensors (`StorageFull`), numpy's `tofile` (`4096 requested and 2560 written`, the GGUF writer). Each
is recognised here, wherever it is in the exception's chain (no torch needed). `DiskFull` is bad input to
the command line (exit 2): the user has to free space; nothing complete was removed.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

from autotrain.errors import UserInputError

_FULL_ERRNOS = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_FULL_TEXT = re.compile(
    r"No space left on device|Disk quota exceeded|StorageFull|unexpected pos \d+|file write failed"
    r"|\d+ requested and \d+ written",
    re.IGNORECASE,
)


class DiskFull(UserInputError):
    """No space left on the device while writing; exit code 2 (the message names the folder and the space)."""


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether `exc` (or an exception it was raised from) says the device is full."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
            return True
        if _FULL_TEXT.search(str(exc)):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def free_bytes(path: Path) -> int | None:
    """Free space on the device that holds `path` (or its nearest existing parent)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def size_of(path: Path) -> int:
    """Bytes of the files under `path` (or of the file)."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def human(size: float | None) -> str:
    if size is None:
        return "an unknown amount"
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def no_space(folder: Path, writing: str, needed: int | None, advice: str = "free some space there") -> DiskFull:
    """`DiskFull` saying what was being written where, about how much it needs, and how much is free."""
    need = f"it needs about {human(needed)}, " if needed else ""
    free = human(free_bytes(folder))
    return DiskFull(f"no space left on the device writing {writing} in `{folder}`: {need}{free} is free; {advice}")
