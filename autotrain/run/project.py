"""The project folder's lifecycle: claim it, lock it, replace a run only when asked, leave no debris.

- A folder autotrain writes a run into gets a marker file (`.autotrain-run`). `--overwrite` empties a
  folder only when the marker is there: a folder autotrain did not make is never deleted.
- One run per folder at a time: an exclusive lock on `.autotrain.lock` (released by the OS when the
  process ends, however it ends), naming its holder (pid, start time, host) so the second run can name it;
  a clean end empties it, so a holder still named in a free lock ended without releasing it (SIGKILL, a
  stopped machine or container), and the next claim says so as it takes the lock over. The ranks a
  launcher starts hold a shared lock on `.autotrain-ranks.lock` while they train, and a claim needs that one
  free too: the folder is never free while any process of a run may still write to it.
- A run refused before training (bad data, a missing column, ...) takes back what it created, so the
  corrected rerun is not refused as "already holds a run".
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path

from autotrain.config.paths import RUN_MARKER, why_not_a_run_folder
from autotrain.errors import UserInputError
from autotrain.hints import cannot_write_hint
from autotrain.training.folder import LOCK, RANKS_LOCK, holds_run

MARKER = RUN_MARKER
# What autotrain writes before training starts; it does not make a folder a run.
OWN_FILES = {MARKER, LOCK, RANKS_LOCK, "logs"}


class ProjectFolder:
    """A claimed, locked project folder; `release()` when the run ends, `abandon()` if it never started."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.created = False  # this run made the folder
        self.fresh = False  # the folder held no run when this one started
        self._lock = None  # training.locks.OwnedLock, while held
        self.took_over: dict | None = None  # the holder an earlier run left named in the lock (it was killed)
        self._lock_made = False  # this run made the lock files (so it takes them away on abandon)
        self._ranks_made = False

    def claim(self, resume: str | None, overwrite: bool) -> ProjectFolder:
        try:
            return self._claim(resume, overwrite)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            where = exc.filename or self.folder
            remedy = cannot_write_hint(where, "choose a project_name in a folder you can write to")
            raise UserInputError(
                f"project folder `{self.folder}`: cannot write to `{where}` ({exc.strerror}); {remedy}"
            ) from None

    def _claim(self, resume: str | None, overwrite: bool) -> ProjectFolder:
        if resume and overwrite:
            raise UserInputError("--resume and --overwrite contradict each other; pick one")
        folder = self.folder
        if folder.exists() and not folder.is_dir():
            raise UserInputError(f"project_name `{folder}` is a file, not a folder")
        reason = why_not_a_run_folder(str(folder))
        if reason is not None:  # checked with the config too; again here, right before anything is deleted
            raise UserInputError(f"project_name `{folder}` {reason}; refusing to use it")
        try:
            folder.mkdir(parents=True)
            self.created = True
        except FileExistsError:  # there already, or made a moment ago by a run started at the same time
            pass
        try:
            self._take_lock()
            self._check(resume, overwrite)
        except BaseException:
            self.abandon()
            raise
        (folder / MARKER).write_text("made by autotrain; --overwrite may empty this folder\n", encoding="utf-8")
        return self

    def _take_lock(self) -> None:
        try:
            import fcntl
        except ImportError:  # no advisory locks on this platform: runs are not serialised
            return
        from autotrain.training.locks import OwnedLock, describe

        lock = OwnedLock(self.folder / LOCK)
        if not lock.acquire():
            raise UserInputError(
                f"project folder `{self.folder}` is in use by another run ({describe(lock.holder)}); wait for it "
                "to end or choose another project_name"
            )
        self._lock, self._lock_made, self.took_over = lock, lock.made, lock.stale
        self._no_ranks_left(fcntl)

    def _no_ranks_left(self, fcntl) -> None:
        """Refuse while a rank of an earlier run still holds the ranks' lock (its launcher ended first)."""
        fd, self._ranks_made, locked = _exclusive(fcntl, self.folder / RANKS_LOCK)
        os.close(fd)  # closing drops the probe's lock at once
        if not locked:
            raise UserInputError(
                f"project folder `{self.folder}` is still written to by the processes of an earlier run whose "
                "launcher has ended; wait a moment for them to stop, or choose another project_name"
            )

    def _check(self, resume: str | None, overwrite: bool) -> None:
        folder = self.folder
        ours = (folder / MARKER).is_file()
        if resume:
            if not holds_run(folder):
                raise UserInputError(f"--resume: `{folder}` holds no run to resume; start without --resume")
            return
        if holds_run(folder):
            if not overwrite:
                raise UserInputError(
                    f"project folder `{folder}` already holds a run; add --resume to continue it, "
                    "--overwrite to replace it, or change project_name"
                )
            if not ours:
                raise UserInputError(
                    f"project folder `{folder}` was not made by autotrain (no {MARKER} in it), so --overwrite "
                    "will not delete it; remove it yourself or change project_name"
                )
            self._empty()
        foreign = sorted(p.name for p in folder.iterdir() if p.name not in OWN_FILES)
        if foreign and not ours:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise UserInputError(
                f"project folder `{folder}` already holds files that are not an autotrain run ({shown}); "
                "choose a new or empty folder as project_name"
            )
        self.fresh = True

    def _empty(self) -> None:
        """Delete the old run's files (not the lock this process holds)."""
        for entry in self.folder.iterdir():
            if entry.name == LOCK:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()  # empties the file (no holder named) and drops the lock
            self._lock = None

    def abandon(self) -> None:
        """Take back what this run wrote before training started: the folder is as if never used."""
        try:
            if self.fresh or self.created:
                for name in (MARKER, "run.json"):
                    with contextlib.suppress(OSError):
                        (self.folder / name).unlink()
                logs = self.folder / "logs"
                with contextlib.suppress(OSError):
                    logs.rmdir()  # only if empty: an error log of a crash stays
            if self._lock_made and self._lock is not None:
                with contextlib.suppress(OSError):
                    (self.folder / LOCK).unlink()
                if self._ranks_made:
                    with contextlib.suppress(OSError):
                        (self.folder / RANKS_LOCK).unlink()
            if self.created:
                with contextlib.suppress(OSError):
                    self.folder.rmdir()  # only if nothing else is left
        finally:
            self.release()


def hold_for_rank(folder: Path) -> int | None:
    """A rank's shared lock on the folder's ranks' lock, held until the descriptor is closed (or the process
    ends): a claim of the folder is refused meanwhile. Waits only while a claim looks (a moment)."""
    try:
        import fcntl
    except ImportError:
        return None
    folder.mkdir(parents=True, exist_ok=True)  # a Ray worker on a machine of its own disk
    fd = os.open(folder / RANKS_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def _exclusive(fcntl, path: Path) -> tuple[int, bool, bool]:
    """Open `path` (made if missing) and try to lock it exclusively without waiting: its descriptor, whether
    this call made the file, and whether the lock is taken (False: another process holds it)."""
    made = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return fd, made, False
    return fd, made, True
