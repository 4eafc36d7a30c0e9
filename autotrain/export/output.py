"""Where an export goes and how it gets there whole: written into a hidden staging folder beside the final
one, renamed into place at the end (a rename in one folder is atomic), so a crash, a full disk or a failed
parity check never leaves a half-written export under the final name. Only folders autotrain wrote (they
hold `export_report.json`) are ever replaced, and only with `--force`. One export at a time writes to an
output: each holds a lock beside it (`.NAME.lock`, naming its pid and start time) from its checks to its
rename, and removes it on every way out (an error, a full disk, SIGINT, SIGTERM); one left by an export that
was killed (SIGKILL) is taken over by the next, which says so and removes it in turn."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from autotrain.errors import UserInputError
from autotrain.hints import cannot_write_hint
from autotrain.training.disk import is_disk_full, no_space
from autotrain.training.lifetime import pid_alive

REPORT = "export_report.json"
FAILED_SUFFIX = ".failed"
# Bytes a weight takes in each output type (GGUF blocks: 32 weights with their scale, and offset); for the
# space an export needs.
BYTES_PER_WEIGHT = {"f32": 4, "f16": 2, "bf16": 2, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32}
BYTES_PER_WEIGHT |= {"q4_1": 20 / 32, "q4_0": 18 / 32}


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


@contextlib.contextmanager
def locked(out: Path, say: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the output's lock while exporting to it; a second export to the same output is refused at once."""
    try:
        import fcntl  # noqa: F401
    except ImportError:  # no advisory locks here: exports are not serialised
        yield
        return
    from autotrain.training.locks import OwnedLock, describe

    out.parent.mkdir(parents=True, exist_ok=True)
    lock = OwnedLock(out.parent / f".{out.name}.lock", remove=True)
    if not lock.acquire(wait=0):
        raise UserInputError(
            f"another export to `{out}` is under way ({describe(lock.holder)}); wait for it to end, "
            "or choose another -o"
        )
    try:
        if lock.stale is not None and say is not None:
            say(
                f"note: `{lock.path.name}` was left by an export that ended without removing it "
                f"({describe(lock.stale)}, killed); taken over"
            )
        yield
    finally:
        lock.release()  # removes the file, then drops the lock


def staging(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in [*out.parent.glob(f".{out.name}.partial-*"), *out.parent.glob(f".{out.name}*.old-*")]:
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not pid_alive(int(pid)):  # left by an export that was killed: ours, and dead
            shutil.rmtree(stale, ignore_errors=True)
    folder = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    return folder


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


def writing_error(exc: BaseException, out: Path, needed: int | None = None) -> UserInputError | None:
    """A full disk or an unwritable output as one line (the staging folder is removed by the caller); None
    for another error than an OSError (not ours to explain)."""
    if is_disk_full(exc):
        return no_space(out.parent, f"`{out.name}`", needed, "free some space there or choose another -o")
    if not isinstance(exc, OSError):
        return None
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return UserInputError(f"cannot write `{out}`: {exc.strerror}; {cannot_write_hint(out, 'choose another -o')}")
    return UserInputError(f"writing `{out}` failed: {exc.strerror or exc}")


def size_needed(model, quant: str) -> int | None:
    """About how many bytes the export of `model` takes (its weights at the output's type)."""
    per_weight = BYTES_PER_WEIGHT.get(quant)
    if per_weight is None:
        return None
    return int(sum(p.numel() for p in model.parameters()) * per_weight)
