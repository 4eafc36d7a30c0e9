"""Lock files that name their holder, and the test of whether anyone holds one (no torch).

A lock is an advisory `flock` on a small file: the kernel drops it when its holder ends, however it ends
(SIGKILL included), so a lock is never held by a process that is gone. The file names its holder (pid, start
time, host: training/lifetime.py), so a second process that is refused can say who holds it. A clean release
takes the name away (the file is removed, or emptied where it lives in a run folder of autotrain's own): a
lock found free with a holder still named in it was left by a process that ended without releasing it
(SIGKILL, a crash, a machine or container that stopped); it is taken over, and `stale` says by whom it was
left, so the caller can say so.

`probe` tells, without taking anything, whether another process holds a lock: how a reader learns that the
process of a run it cannot see (another container, another machine on a shared disk) is still there.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

HELD, FREE, UNKNOWN = "held", "free", "unknown"


class OwnedLock:
    """An exclusive lock on `path`; `remove` takes the file away on release (else it is emptied)."""

    def __init__(self, path: Path, remove: bool = False):
        self.path = path
        self.remove = remove
        self.fd: int | None = None
        self.made = False  # this process created the file
        self.holder: dict | None = None  # who holds it, when `acquire` was refused
        self.stale: dict | None = None  # who left it held without releasing it, when taken over

    def acquire(self, wait: float = 1.0) -> bool:
        """Take the lock without blocking; refused for `wait` seconds before giving up (a reader's probe or
        a holder in the middle of its release holds it for a moment only). False: another process holds it."""
        import fcntl

        deadline = time.monotonic() + wait
        while True:
            made = not self.path.exists()
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() < deadline:
                    os.close(fd)
                    time.sleep(0.05)
                    continue
                self.holder = _read_holder(fd, settle=2.0)
                os.close(fd)
                return False
            if not _same_file(fd, self.path):  # removed by the holder's release after it was opened here
                os.close(fd)
                continue
            self._take(fd, made)
            return True

    def _take(self, fd: int, made: bool) -> None:
        from autotrain.training.lifetime import ALIVE, identity, state

        left = _read_holder(fd)
        if left is not None and left.get("pid") != os.getpid() and state(left) != ALIVE:
            self.stale = left
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(identity()) + "\n").encode(), 0)
        self.fd, self.made = fd, made

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            if self.remove:
                self.path.unlink()  # before the lock drops: whoever opens the path next makes a new file
            else:
                os.ftruncate(self.fd, 0)  # no holder named: the next one knows this one released it
        with contextlib.suppress(OSError):
            os.close(self.fd)  # closing the descriptor drops the lock
        self.fd = None


def _same_file(fd: int, path: Path) -> bool:
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _read_holder(fd: int, settle: float = 0.0) -> dict | None:
    """The holder named in the lock file: {"pid", "started", "host"}, {"pid"} from a file that holds only a
    pid (as earlier releases wrote), or None for an empty file. A holder writes its name just after taking
    the lock, so a process that lost the race by microseconds may find the file still empty: with `settle`,
    look again for that long."""
    deadline = time.monotonic() + settle
    while True:
        text = os.pread(fd, 256, 0).decode("ascii", "replace").strip()
        if text or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    return parse_holder(text)


def parse_holder(text: str) -> dict | None:
    if text.isdigit():
        return {"pid": int(text)}
    try:
        found = json.loads(text) if text else None
    except ValueError:
        return None
    return found if isinstance(found, dict) and isinstance(found.get("pid"), int) else None


def describe(holder: dict | None) -> str:
    """`pid 123` or `pid 123 on HOST`, for messages."""
    if not holder:
        return "pid unknown"
    import socket

    host = holder.get("host")
    return f"pid {holder['pid']}" + (f" on {host}" if host and host != socket.gethostname() else "")


def probe(path: Path, exclusive: bool = False) -> str:
    """HELD when another process holds `path` (exclusively; with `exclusive`, in any way), FREE when none
    does, UNKNOWN when it cannot be told (no such file, no flock here, not allowed). Takes the lock for an
    instant only when it is free, and never creates the file."""
    try:
        import fcntl
    except ImportError:
        return UNKNOWN
    try:
        fd = os.open(path, os.O_RDWR if exclusive else os.O_RDONLY)
    except OSError:
        if not exclusive:
            return UNKNOWN
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return UNKNOWN
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        return HELD
    except OSError:
        return UNKNOWN
    finally:
        os.close(fd)  # drops the probe's own lock at once
    return FREE
