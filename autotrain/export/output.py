"""Where an export goes and how it gets there whole: written into a hidden staging folder beside the final
one, renamed into place at the end (a rename in one folder is atomic), so a crash, a full disk or a failed
parity check never leaves a half-written export under the final name. Only folders autotrain wrote (they
hold `export_report.json`) are ever replaced, and only with `--force`."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from autotrain.errors import UserInputError

REPORT = "export_report.json"
FAILED_SUFFIX = ".failed"


def default_output(run: Path, fmt: str, quant: str) -> Path:
    return run / f"export-{fmt}-{quant}"


def failed_name(out: Path) -> Path:
    return out.with_name(out.name + FAILED_SUFFIX)


def ours(path: Path) -> bool:
    return path.is_dir() and (path / REPORT).is_file()


def check_output(out: Path, force: bool) -> None:
    """Refuse before any work: an existing output without --force, or one autotrain did not write."""
    for path in (out, failed_name(out)):
        if not path.exists():
            continue
        if not force:
            raise UserInputError(f"`{path}` exists; add --force to replace it, or choose another -o")
        if not ours(path):
            raise UserInputError(
                f"`{path}` exists and is not an autotrain export (no {REPORT}); remove it yourself or choose another -o"
            )


def staging(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in [*out.parent.glob(f".{out.name}.partial-*"), *out.parent.glob(f".{out.name}*.old-*")]:
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):  # left by an export that was killed: ours, and dead
            shutil.rmtree(stale, ignore_errors=True)
    folder = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    return folder


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def publish(stage: Path, final: Path) -> Path:
    """Move the finished staging folder to `final`, replacing an earlier export of ours there."""
    old = None
    if final.exists():
        old = final.parent / f".{final.name}.old-{os.getpid()}"
        final.rename(old)
    stage.rename(final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


def writing_error(exc: OSError, out: Path) -> UserInputError:
    """A full disk or an unwritable output as one line (the staging folder is removed by the caller)."""
    if exc.errno == errno.ENOSPC:
        return UserInputError(f"no space left on the device writing `{out}`; free some space or choose another -o")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return UserInputError(f"cannot write `{out}`: {exc.strerror}; choose another -o")
    return UserInputError(f"writing `{out}` failed: {exc.strerror or exc}")
