"""The prepared data, kept between runs: one entry per split and everything that shapes its tokens.

Where: `$AUTOTRAIN_DATA_CACHE`, else `autotrain/` in datasets' cache folder (`$HF_DATASETS_CACHE`, by default
`~/.cache/huggingface/datasets`). Under it, one folder per split of a source (its path or hub id, split and
subset), and in it one entry per preparation of it: the key covers the source's identity (a local file's
size and modification time, a hub dataset's revision), the tokenizer (its vocabulary, special tokens and
chat template), the column mapping and every setting that changes the tokens (max_length, packing,
train_on_inputs, the trainer's format). An entry holds the prepared Arrow files and `done.json` (rows read,
kept, left out), written last: an entry without it is not used.

One process prepares an entry, however many wait for it: the first to create its `claim` file (only the
first process of each machine tries: on a shared disk one machine prepares for all, on disks of their own
each machine prepares its own copy). The others read its progress and wait on the files, with no collective
in flight that a watchdog could end. A claim whose process is gone (on this machine) or whose progress has
not moved for STALE seconds is taken over.

Cleaning: once an entry is complete, the other entries of the same source split (made for inputs that have
since changed: the file was edited, another max_length, another tokenizer) are removed, and so are the
folders of local files that no longer exist. Only folders that hold autotrain's marker are removed, and
never one that a running process holds (a shared lock on its marker while it trains from it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from autotrain.errors import UserInputError

CACHE_ENV = "AUTOTRAIN_DATA_CACHE"
MARKER = ".autotrain-data"  # in every folder autotrain made here; nothing without it is removed
DONE, CLAIM, PROGRESS, FAILED, SOURCE = "done.json", "claim", "progress.json", "failed.json", "source.json"
STALE = 600.0  # seconds without progress after which another process takes over a claim
POLL = 0.5
_HELD: dict[str, int] = {}  # entry folder -> the descriptor holding its marker's shared lock


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    import datasets

    return Path(datasets.config.HF_DATASETS_CACHE) / "autotrain"


def digest(record: Any) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:20]


class Entry:
    """One prepared split in the cache (see the module's docstring)."""

    def __init__(self, source: dict, inputs: dict, root: Path | None = None):
        self.source = source
        self.root = root or cache_root()
        self.parent = self.root / digest(source)
        self.folder = self.parent / digest({"source": source, "inputs": inputs})

    def file(self, name: str) -> Path:
        return self.folder / name

    def record(self) -> dict | None:
        """done.json of a complete entry, else None."""
        try:
            return json.loads(self.file(DONE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def claim(self) -> bool:
        """Take the preparation: True when this process is to prepare the entry."""
        _make(self.parent, {"source": {"file": self.source["file"]}} if "file" in self.source else {})
        _make(self.folder, None)
        mine = {"host": socket.gethostname(), "pid": os.getpid(), "started": _started(os.getpid())}
        try:
            fd = os.open(self.file(CLAIM), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if not self._stale():
                return False
            with contextlib.suppress(OSError):  # one process wins the rename; it claims again, afresh
                os.rename(self.file(CLAIM), self.file(f"{CLAIM}.stale.{os.getpid()}"))
                os.unlink(self.file(f"{CLAIM}.stale.{os.getpid()}"))
            return self.claim()
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(mine, handle)
        if self.file(DONE).exists():  # completed by another process between its look and this claim
            os.unlink(self.file(CLAIM))
            return False
        for leftover in self.folder.iterdir():  # a preparation that died half way
            if leftover.name not in (MARKER, CLAIM):
                _remove(leftover)
        self.progress(0, None)
        return True

    def progress(self, done: int, total: int | None) -> None:
        _write_json(self.file(PROGRESS), {"done": done, "total": total, "updated": time.time()})

    def read_progress(self) -> dict:
        try:
            return json.loads(self.file(PROGRESS).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def publish(self, record: dict) -> None:
        """The entry is complete: done.json, then the claim is let go and older entries are removed."""
        _write_json(self.file(DONE), record)
        with contextlib.suppress(OSError):
            os.unlink(self.file(CLAIM))
        clean(self.parent, keep=self.folder)
        sweep(self.root)

    def fail(self, message: str) -> None:
        """The preparation stopped on bad input: the processes waiting for it raise the same error."""
        _write_json(self.file(FAILED), {"error": message})
        with contextlib.suppress(OSError):
            os.unlink(self.file(CLAIM))

    def failure(self) -> str | None:
        try:
            return json.loads(self.file(FAILED).read_text(encoding="utf-8"))["error"]
        except (OSError, ValueError, KeyError):
            return None

    def hold(self) -> None:
        """A shared lock on the entry while this process lives: no other run's cleaning removes it."""
        key = str(self.folder)
        if key in _HELD:
            return
        with contextlib.suppress(OSError, ImportError):  # no flock (Windows, some network disks): not held
            import fcntl

            fd = os.open(self.file(MARKER), os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_SH)
            _HELD[key] = fd

    def _stale(self) -> bool:
        """The claim's process is gone (on this machine), or its progress has not moved for STALE seconds."""
        try:
            owner = json.loads(self.file(CLAIM).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return (time.time() - _mtime(self.file(CLAIM))) > STALE  # being written, or unreadable
        if owner.get("host") == socket.gethostname() and _started(owner.get("pid", -1)) != owner.get("started"):
            return True
        return time.time() - max(self.read_progress().get("updated", 0), _mtime(self.file(CLAIM))) > STALE


def release_all() -> None:
    """Let go of every entry this process holds (a process that is done with its data)."""
    while _HELD:
        os.close(_HELD.popitem()[1])


def wait_for(entry: Entry, may_claim: bool, say) -> bool:
    """Wait until `entry` is complete (True) or this process has claimed it (False: prepare it). A
    preparation that failed since this process began waiting raises its error here too (an older failure
    is retried by the next process that claims the entry). `say(done, total)` as the preparer's progress
    moves."""
    began = time.time()
    while True:
        if entry.record() is not None:
            return True
        if may_claim and entry.claim():
            return False
        failure = entry.failure()
        if failure is not None and _mtime(entry.file(FAILED)) >= began - 5:
            raise UserInputError(failure)
        seen = entry.read_progress()
        say(seen.get("done", 0), seen.get("total"))
        time.sleep(POLL)


def clean(parent: Path, keep: Path) -> None:
    """Remove the entries of `parent` other than `keep` that autotrain made and no process holds or prepares."""
    for entry in parent.iterdir() if parent.is_dir() else ():
        if entry != keep and entry.is_dir():
            _remove_unused(entry)


def sweep(root: Path) -> None:
    """Remove the folders of local files that no longer exist (their entries can never be used again)."""
    for parent in root.iterdir() if root.is_dir() else ():
        try:
            source = json.loads((parent / SOURCE).read_text(encoding="utf-8"))["source"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        local = source.get("file")
        if local and not Path(local).exists() and (parent / MARKER).is_file():
            for entry in [e for e in parent.iterdir() if e.is_dir()]:
                _remove_unused(entry)
            if not any(e.is_dir() for e in parent.iterdir()):
                shutil.rmtree(parent, ignore_errors=True)


def size_of(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _remove_unused(entry: Path) -> None:
    marker = entry / MARKER
    preparing = (entry / CLAIM).exists() and time.time() - max(_mtime(entry / CLAIM), _mtime(entry / PROGRESS)) < STALE
    if not marker.is_file() or preparing:
        return  # not autotrain's, or being prepared
    try:
        import fcntl

        fd = os.open(marker, os.O_RDONLY)
    except (OSError, ImportError):  # no flock here: whether a run holds it cannot be told, so it stays
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by a running process: left alone
    except OSError:
        os.close(fd)
        return
    try:
        shutil.rmtree(entry, ignore_errors=True)
    finally:
        os.close(fd)


def _make(folder: Path, source: dict | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).touch()
    if source is not None and not (folder / SOURCE).is_file():
        _write_json(folder / SOURCE, source)


def _write_json(path: Path, value: dict) -> None:
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    staging.write_text(json.dumps(value, default=str), encoding="utf-8")
    os.replace(staging, path)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _started(pid: int) -> str | None:
    """A process's start time (Linux /proc), to tell it from a later one with the same id; None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        with contextlib.suppress(OSError):
            os.kill(pid, 0)
            return "alive"
        return None
