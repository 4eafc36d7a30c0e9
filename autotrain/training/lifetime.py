"""Which process a record names, whether it still runs, and ending with one's parent (no torch).

A pid alone is not enough to tell: pids are reused, so a record holds the pid with the process's start time
and the host it runs on. `run.json` records the run's process this way; whoever reads it later (the app
after a restart, a `--resume`) can tell a live run from one whose process was killed, and signal only the
process that really is the run's.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys

ALIVE, GONE, UNKNOWN = "alive", "gone", "unknown"
# Start times are read back from the kernel's tick count: the same process reads the same to well within this.
_SAME_START = 0.5
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def identity(pid: int | None = None) -> dict:
    """{"pid", "started", "host"} of process `pid` (this process by default)."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "started": _start_time(pid), "host": socket.gethostname()}


def _start_time(pid: int) -> float | None:
    """When process `pid` started; None when there is none, or only a zombie (it has ended, and waits for
    its parent, or an init that does not reap, to read its exit status)."""
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return round(process.create_time(), 2)
    except (psutil.Error, OSError, ValueError):
        return None


def state(record: object) -> str:
    """ALIVE, GONE, or UNKNOWN (no usable record, or a process of another machine)."""
    if not isinstance(record, dict) or not isinstance(record.get("pid"), int) or record["pid"] <= 0:
        return UNKNOWN
    if record.get("host") != socket.gethostname():
        return UNKNOWN
    started = _start_time(record["pid"])
    if started is None:
        return GONE
    recorded = record.get("started")
    if not isinstance(recorded, (int, float)):
        return ALIVE  # the pid is in use; without a start time, a reused pid cannot be told apart
    return ALIVE if abs(started - recorded) < _SAME_START else GONE


def send(record: object, signum: int) -> bool:
    """Send `signum` to the recorded process if it is still that process; True if sent."""
    if state(record) != ALIVE:
        return False
    try:
        os.kill(record["pid"], signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists (a reused pid counts: callers only leave its files alone then)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def to_env(record: dict) -> str:
    return json.dumps(record, separators=(",", ":"))


def from_env(value: str | None) -> dict | None:
    """A record passed in the environment (`to_env`), or None."""
    try:
        record = json.loads(value) if value else None
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("pid"), int) else None


def die_with(parent: dict | None) -> None:
    """End this process when `parent` (the process that started it) ends, however it ends, SIGKILL included:
    on Linux the kernel sends SIGKILL the moment the parent exits (PR_SET_PDEATHSIG); elsewhere a thread looks
    every second. A parent already gone ends this process here."""
    if parent is None:
        return
    watch = True
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        with contextlib.suppress(OSError, AttributeError):
            watch = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0
    if state(parent) == GONE:  # it ended before the line above took effect
        _orphaned(parent)
    if watch:
        import threading

        threading.Thread(target=_watch, args=(parent,), daemon=True, name="autotrain-parent").start()


def _watch(parent: dict) -> None:
    import time

    while state(parent) != GONE:
        time.sleep(1.0)
    _orphaned(parent)


def _orphaned(parent: dict) -> None:
    print(f"error: the process that started this one (pid {parent['pid']}) has ended; stopping", file=sys.stderr)
    sys.stderr.flush()
    os._exit(1)
