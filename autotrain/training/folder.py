"""What a project folder holds: whether it is a run, how that run ended, its checkpoints (no torch).

A record left `running` is checked against its process: by pid and start time where the process is on this
machine (training/lifetime.py), else by the folder's locks, which the run's processes hold while it lasts
(training/locks.py): another container on this machine, or another machine on a shared disk. A run whose
process is gone reads as `died`; `settle` writes that into run.json with what is known (the last complete
checkpoint and its step), so nothing reports it `running` again.
"""

from __future__ import annotations

import json
import os
import re
import time
from datetime import datetime, timezone
from pathlib import Path

# What a finished or interrupted run leaves; a folder holding any of them is not silently reused.
RUN_FILES = ("autotrain.yaml", "run.json", "trainer_state.json")
# How a run that ended before it could write its record ended, by its exit code (the documented codes).
EXIT_STATUS = {0: "completed", 1: "failed", 2: "bad input", 3: "diverged", 130: "interrupted", 143: "interrupted"}
# The run's parent holds LOCK exclusively from its claim of the folder to its end; each rank a launcher starts
# holds RANKS_LOCK shared while it lives (run/project.py).
LOCK = ".autotrain.lock"
RANKS_LOCK = ".autotrain-ranks.lock"


def holds_run(folder: Path) -> bool:
    if not folder.is_dir():
        return False
    return any((folder / name).exists() for name in RUN_FILES) or any(folder.glob("checkpoint-*"))


def run_record(folder: Path) -> dict:
    """The folder's run.json as it stands ({} without one), with a `running` run whose process is gone shown
    as `died` (and `how`): the record of a process killed before it could write its end."""
    record = _read_record(folder)
    if record.get("status") == "running" and run_process(folder, record) == "gone":
        record.update(status="died", how=_died_how(record.get("process")))
    return record


def _read_record(folder: Path) -> dict:
    try:
        record = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _died_how(process: object) -> str:
    pid = f" (pid {process['pid']})" if isinstance(process, dict) and isinstance(process.get("pid"), int) else ""
    return (
        f"its process{pid} ended without recording how the run ended: it was killed (SIGKILL, out of memory), "
        "or its machine or container stopped"
    )


def run_process(folder: Path, record: dict) -> str:
    """Whether the process of a `running` record still runs: "alive", "gone" or "unknown". Its pid and start
    time tell on this machine; else (a process of another container or machine) the folder's locks do: held,
    some process of the run is there; free, none is. A process that reads this while holding the folder's
    lock itself (a --resume) settles the record first (`settle`)."""
    from autotrain.training.lifetime import ALIVE, GONE, UNKNOWN, state
    from autotrain.training.locks import FREE, HELD, probe

    found = state(record.get("process"))
    if found != UNKNOWN:
        return found
    main, ranks = probe(folder / LOCK), probe(folder / RANKS_LOCK, exclusive=True)
    if HELD in (main, ranks):
        return ALIVE
    return GONE if main == FREE else UNKNOWN


def settle(folder: Path, claimed: bool = False, status: str = "died", how: str | None = None) -> dict | None:
    """Write how a run ended into a run.json left `running` by a process that is gone: `status` (died, or
    interrupted when it had been told to stop), `how`, its last complete checkpoint and that checkpoint's
    step. The folder's lock is taken for the write (nobody claims the folder meanwhile) unless this process
    holds it already (`claimed`). Returns the settled record, or None when there was nothing to settle (no
    record, not `running`, its process still there, or the lock held by another process)."""
    from autotrain.training.lifetime import ALIVE, state
    from autotrain.training.locks import OwnedLock

    record = _read_record(folder)
    if record.get("status") != "running" or state(record.get("process")) == ALIVE:
        return None
    lock = None
    if not claimed:
        lock = OwnedLock(folder / LOCK)
        try:
            # a process killed a moment ago may still hold it while the kernel closes its files: a second
            if not (folder / LOCK).exists() or not lock.acquire(wait=1.0):
                return None  # no lock to take (no run of this version made it) or another process holds it
        except OSError:
            return None  # a folder this process may not write to: shown as read, not settled
    if _ranks_held(folder):  # a rank of the run is still there
        if lock is not None:
            lock.release()
        return None
    try:
        record = _read_record(folder)  # again, under the lock
        if record.get("status") != "running" or state(record.get("process")) == ALIVE:
            return None
        write_record(folder / "run.json", _settled(folder, record, status, how))
        return _read_record(folder)
    finally:
        if lock is not None:
            lock.release()


def _ranks_held(folder: Path, wait: float = 1.0) -> bool:
    """A rank of the run holds the ranks' lock (a rank killed a moment ago lets go of it within `wait`)."""
    from autotrain.training.locks import HELD, probe

    deadline = time.monotonic() + wait
    while probe(folder / RANKS_LOCK, exclusive=True) == HELD:
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.05)
    return False


def _settled(folder: Path, record: dict, status: str, how: str | None) -> dict:
    complete = [p for p in list_checkpoints(folder) if is_complete(p)]
    step = None
    if complete:
        try:
            step = json.loads((complete[-1] / "trainer_state.json").read_text(encoding="utf-8")).get("global_step")
        except (OSError, ValueError, AttributeError):
            step = None
    return {
        **record,
        "status": status,
        "exit_code": None,
        "how": how or _died_how(record.get("process")),
        "settled": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "last_checkpoint": str(complete[-1]) if complete else None,
        "last_checkpoint_step": step,
    }


def write_record(path: Path, data: dict) -> None:
    """`data` as `path`, atomically: a reader sees the old record or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(data, indent=2) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


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
    mode = 0o666 & ~_umask()
    for path in folder.rglob("*.safetensors"):
        try:
            info = path.lstat()
        except OSError:
            continue
        if path.is_file() and not path.is_symlink() and info.st_mode & 0o777 == 0o600 and info.st_uid == os.getuid():
            path.chmod(mode)
