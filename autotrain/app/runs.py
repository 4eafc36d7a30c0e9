"""Runs under the runs dir, and the training processes the app starts, stops and resumes.

A run is started exactly as `autotrain --config FILE` starts it: a child `python -m autotrain.cli.main
--config FILE [--resume]`, in its own process group (so Ctrl-C on the app does not reach it), its output in
`<project>/logs/app.log`. Stopping sends it SIGTERM: the CLI saves a checkpoint and exits 143.

A run outlives the app: after a restart the app finds it by the process that `run.json` (or, before training
starts, `logs/app.json`) records, a pid with its start time, so it shows it running and can still stop it;
a run whose process is gone without recording an end is shown as `died`.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from autotrain.app import runinfo
from autotrain.app.paths import PathRejected, config_file, run_folder
from autotrain.training.folder import EXIT_STATUS  # how a child that wrote no final run.json ended


class RunConflict(Exception):
    """The run is not in a state for what was asked (running already, nothing to resume, ...)."""


# What the CLI leaves in a folder of a run refused before training, besides `logs/`.
CLI_FILES = {".autotrain-run", ".autotrain.lock", ".autotrain-ranks.lock"}


@dataclass
class Runs:
    root: Path  # --runs-dir
    workdir: Path  # the child's working directory: relative paths in configs are read from here
    children: dict[str, subprocess.Popen] = field(default_factory=dict)
    secrets: set[str] = field(default_factory=set)  # of the configs started here: redacted from responses
    # Held from the checks on a run's folder to its child's start: two requests never start one run twice.
    lock: threading.RLock = field(default_factory=threading.RLock)

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        found = []
        for path in sorted(self.root.iterdir()):
            try:
                folder = run_folder(self.root, path.name)
            except PathRejected:
                continue  # hidden, oddly named, or a link out
            if folder.is_dir() and (path.name in self.children or runinfo.is_run(folder)):
                found.append(path.name)
        return found

    def alive(self, name: str) -> bool:
        child = self.children.get(name)
        return child is not None and child.poll() is None

    def status(self, name: str) -> dict:
        child = self.children.get(name)
        code = None if child is None else child.poll()
        if child is not None and code is None:
            return {"status": "running", "exit_code": None, "pid": child.pid}
        folder = run_folder(self.root, name)
        record = runinfo.manifest(folder)
        manifest = record.get("status")
        if child is not None and (manifest in (None, "running", "died")):
            # ended before writing its final run.json (bad input found before training, killed, ...)
            return {"status": EXIT_STATUS.get(code, "failed"), "exit_code": code, "pid": None}
        found = self._found_process(folder, record)
        if child is None and found is not None:  # started before this app did, and still running
            return {"status": "running", "exit_code": None, "pid": found["pid"]}
        out = {"status": manifest or "new", "exit_code": record.get("exit_code", code), "pid": None}
        return {**out, "how": record["how"]} if record.get("how") and manifest != "completed" else out

    def _found_process(self, folder: Path, record: dict) -> dict | None:
        """The live process of a run this app did not start (or started before a restart): the one run.json
        records while it says `running`, else the child an earlier app started (logs/app.json)."""
        from autotrain.training.lifetime import ALIVE, state

        candidates = [record.get("process")] if record.get("status") == "running" else []
        if record.get("status") in (None, "running"):
            candidates.append(runinfo.read_json(folder / runinfo.APP_STATE).get("process"))
        return next((p for p in candidates if state(p) == ALIVE), None)

    def summary(self, name: str) -> dict:
        folder = run_folder(self.root, name)
        return {"name": name, **self.status(name), "progress": runinfo.progress(runinfo.records(folder))}

    def detail(self, name: str, since: int = 0) -> dict:
        folder = run_folder(self.root, name)
        if not folder.is_dir():
            raise FileNotFoundError(name)
        history = runinfo.records(folder)
        return {
            "name": name,
            **self.status(name),
            "progress": runinfo.progress(history),
            "count": len(history),
            "records": history[since:],
            "log": runinfo.log_tail(folder),
            "files": runinfo.files(folder),
            "config": self.config_of(name),
            "task": runinfo.task(folder),
            "benchmarks": runinfo.benchmarks(folder),
        }

    def config_of(self, name: str) -> str | None:
        """The config file the app started this run from (relative to the runs dir), if known."""
        saved = runinfo.read_json(run_folder(self.root, name) / runinfo.APP_STATE).get("config")
        if not isinstance(saved, str):
            return None
        try:
            return saved if config_file(self.root, saved).is_file() else None
        except PathRejected:
            return None

    def running(self, name: str) -> bool:
        """Running, whether this app started it or found it running (after a restart)."""
        return self.status(name)["status"] == "running"

    def claim(self, folder: Path) -> None:
        """Refuse a new run in `folder` unless it is new, empty, or holds only what an earlier start from
        this app wrote (a start refused before training). Call with `lock` held, then `start`."""
        from autotrain.training.folder import holds_run

        if self.running(folder.name):
            raise RunConflict(f"run `{folder.name}` is already running")
        if holds_run(folder):
            raise RunConflict(f"`{folder.name}` already holds a run: resume it, or change project_name")
        if folder.exists() and not folder.is_dir():
            raise RunConflict(f"`{folder.name}` is a file in the runs dir; change project_name")
        found = _files(folder) - CLI_FILES
        if _started_here(folder):  # an earlier start from here, refused before training: its logs only
            found = {f for f in found if not f.startswith("logs/")}
        foreign = sorted(found)
        if foreign:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise RunConflict(
                f"`{folder.name}` holds files autotrain did not write ({shown}); nothing was run. "
                "Choose a new project_name (a new or empty folder)"
            )

    def start(self, name: str, config: Path, resume: bool = False) -> dict:
        """Start training run `name` from `config` (a file inside the runs dir)."""
        with self.lock:
            if self.running(name):
                raise RunConflict(f"run `{name}` is already running")
            return self._spawn(name, config, resume)

    def _spawn(self, name: str, config: Path, resume: bool) -> dict:
        folder = run_folder(self.root, name)
        command = [sys.executable, "-m", "autotrain.cli.main", "--config", str(config)]
        command += ["--resume"] if resume else []
        (folder / "logs").mkdir(parents=True, exist_ok=True)
        rel = config.relative_to(self.root.resolve()).as_posix()
        state = {"config": rel, "command": command[1:], "started": time.time()}
        (folder / runinfo.APP_STATE).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(folder / runinfo.APP_LOG, "a", encoding="utf-8") as log:
            log.write(f"==> {time.strftime('%Y-%m-%d %H:%M:%S')} autotrain {' '.join(command[3:])}\n")
            log.flush()
            child = subprocess.Popen(
                command,
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.children[name] = child
        from autotrain.training.lifetime import identity

        state["process"] = identity(child.pid)  # how the app knows its child again after a restart
        (folder / runinfo.APP_STATE).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
        return {"name": name, "pid": child.pid, "config": rel, "resume": resume}

    def stop(self, name: str) -> dict:
        """SIGTERM to the run's process: it saves a checkpoint and exits 143. A run found running after a
        restart is signalled by its recorded pid, once its start time shows it is still that process."""
        from autotrain.training.lifetime import send

        if self.alive(name):
            child = self.children[name]
            os.kill(child.pid, signal.SIGTERM)
            return {"name": name, "pid": child.pid, "signal": "SIGTERM"}
        folder = run_folder(self.root, name)
        found = self._found_process(folder, runinfo.manifest(folder))
        if found is None or not send(found, signal.SIGTERM):
            raise RunConflict(f"run `{name}` is not running")
        return {"name": name, "pid": found["pid"], "signal": "SIGTERM"}

    def resume(self, name: str) -> dict:
        from autotrain.training.folder import is_complete, list_checkpoints

        folder = run_folder(self.root, name)
        if self.running(name):
            raise RunConflict(f"run `{name}` is already running")
        if runinfo.manifest_status(folder) == "completed":
            raise RunConflict(f"run `{name}` completed: there is nothing to resume")
        if not any(is_complete(p) for p in list_checkpoints(folder)):
            raise RunConflict(f"run `{name}` has no complete checkpoint to resume from")
        config = self.config_of(name)
        if config is None:
            raise RunConflict(f"the config of run `{name}` is not known to the app; start it from its YAML")
        return self.start(name, config_file(self.root, config), resume=True)


def _files(folder: Path, limit: int = 50) -> set[str]:
    """Up to `limit` files under `folder` (relative paths); a big folder of one's own is not walked whole."""
    if not folder.is_dir():
        return set()
    return {p.relative_to(folder).as_posix() for p in itertools.islice(folder.rglob("*"), limit) if not p.is_dir()}


def _started_here(folder: Path) -> bool:
    """`logs/app.json` is the state an earlier start from the app wrote (not a file of the same name)."""
    command = runinfo.read_json(folder / runinfo.APP_STATE).get("command")
    return isinstance(command, list) and command[:2] == ["-m", "autotrain.cli.main"]
