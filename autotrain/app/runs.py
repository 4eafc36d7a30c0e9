"""Runs under the runs dir, and the training processes the app starts, stops and resumes.

A run is started exactly as `autotrain --config FILE` starts it: a child `python -m autotrain.cli.main
--config FILE [--resume [--accept-changes]]`, in a process group of its own (setsid: a Ctrl-C meant for the app
does not reach it, and it outlives an app that is killed), its output in `<project>/logs/app.log`. Stopping sends it
SIGTERM: the CLI finishes its step, saves a checkpoint, records `interrupted` and exits 143. The app stops its
runs that way when it is stopped itself (app/lifecycle.py).

A run outlives an app that is killed: the app started again finds it by the process that `run.json` (or,
before training starts, `logs/app.json`) records, a pid with its start time, shows it running, can stop it,
and takes it as its own (`logs/app.json` names the app that started or took it). A run whose process is gone
without recording an end reads as `died`, and the app started again writes that into its run.json
(training/folder.py: `settle`).
"""

from __future__ import annotations

import contextlib
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
_SETTLING = threading.Lock()  # one settle of a record at a time in this app (its requests run on threads)


@dataclass
class Runs:
    root: Path  # --runs-dir
    workdir: Path  # the child's working directory: relative paths in configs are read from here
    children: dict[str, subprocess.Popen] = field(default_factory=dict)
    exports: dict[str, subprocess.Popen] = field(default_factory=dict)  # app/export_api.py's children
    secrets: set[str] = field(default_factory=set)  # of the configs started here: redacted from responses
    # Held from the checks on a run's folder to its child's start: two requests never start one run twice.
    lock: threading.RLock = field(default_factory=threading.RLock)
    closing: bool = False  # the app is stopping: no new run starts

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
            if manifest is not None:  # what the app knows (its exit code) goes into the record it left
                how = f"its process ended ({_exit_text(code)}) without recording how the run ended"
                settle_gone(folder, status=ended_as(code), how=how)
            return {"status": ended_as(code), "exit_code": code, "pid": None}
        if manifest == "died" and child is None:  # a process of a run found running has gone: say so on disk
            record = settle_gone(folder) or record
        found = self._found_process(folder, record)
        if child is None and found is not None:  # started before this app did, and still running
            return {"status": "running", "exit_code": None, "pid": found["pid"]}
        out = {"status": manifest or "new", "exit_code": record.get("exit_code", code), "pid": None}
        return {**out, "how": record["how"]} if record.get("how") and manifest != "completed" else out

    def owned(self) -> dict[str, dict]:
        """The live runs this app answers for, each with its process: those it started, and those it took
        over after a restart (`logs/app.json` names this app). A run started from the command line, or by
        another app still running, is not among them."""
        out = {}
        for name in sorted(set(self.children) | set(self.names())):
            found = self.process_of(name)
            if found is None:
                continue
            app = runinfo.read_json(run_folder(self.root, name) / runinfo.APP_STATE).get("app")
            if name in self.children or (isinstance(app, dict) and app.get("pid") == os.getpid()):
                out[name] = found
        return out

    def process_of(self, name: str) -> dict | None:
        """The live process of run `name` this app can signal ({"pid", ...}), or None."""
        if self.alive(name):
            from autotrain.training.lifetime import identity

            return identity(self.children[name].pid)
        folder = run_folder(self.root, name)
        return self._found_process(folder, runinfo.manifest(folder))

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

    def start(self, name: str, config: Path, resume: bool = False, accept_changes: bool = False) -> dict:
        """Start training run `name` from `config` (a file inside the runs dir)."""
        with self.lock:
            if self.closing:
                raise RunConflict("the app is stopping: no run starts now; start it again once the app is back")
            if self.running(name):
                raise RunConflict(f"run `{name}` is already running")
            return self._spawn(name, config, resume, accept_changes)

    def _spawn(self, name: str, config: Path, resume: bool, accept_changes: bool = False) -> dict:
        from autotrain.training.lifetime import identity

        folder = run_folder(self.root, name)
        command = [sys.executable, "-m", "autotrain.cli.main", "--config", str(config)]
        command += (["--resume"] + (["--accept-changes"] if accept_changes else [])) if resume else []
        (folder / "logs").mkdir(parents=True, exist_ok=True)
        rel = config.relative_to(self.root.resolve()).as_posix()
        # `app`: the app that started the run (or took it over after a restart); stopping that app stops it.
        state = {"config": rel, "command": command[1:], "started": time.time(), "app": identity()}
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
        state["process"] = identity(child.pid)  # how the app knows its child again after a restart
        (folder / runinfo.APP_STATE).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
        out = {"name": name, "pid": child.pid, "config": rel, "resume": resume}
        return {**out, "accept_changes": accept_changes} if resume else out

    def stop(self, name: str) -> dict:
        """SIGTERM to the run's process: it saves a checkpoint and exits 143. A run found running after a
        restart is signalled by its recorded pid, once its start time shows it is still that process."""
        from autotrain.training.lifetime import send

        found = self.process_of(name)
        if found is None or not send(found, signal.SIGTERM):
            raise RunConflict(self._not_running(name))
        note_stop(run_folder(self.root, name), found)
        return {"name": name, "pid": found["pid"], "signal": "SIGTERM"}

    def _not_running(self, name: str) -> str:
        shown = self.status(name)
        if shown["status"] == "running":  # its process is alive somewhere this app cannot signal
            return f"run `{name}` runs in a process this app cannot reach (another container or machine): stop it there"
        how = f": {shown['how']}" if shown.get("how") else ""
        return f"run `{name}` is not running (status: {shown['status']}{how}); nothing to stop"

    def resume(self, name: str, accept_changes: bool = False) -> dict:
        """`--resume` from the newest complete checkpoint; `accept_changes`: go on with a config that differs
        from the run's record (`--accept-changes`), else such a resume stops listing the differences."""
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
        return self.start(name, config_file(self.root, config), resume=True, accept_changes=accept_changes)


def ended_as(code: int | None) -> str:
    """The status of a run whose process exited with `code` before recording its end (a negative code: the
    signal that killed it; SIGTERM or SIGINT before training started count as interrupted)."""
    if code is not None and code < 0:
        return "interrupted" if -code in (signal.SIGTERM, signal.SIGINT) else "died"
    return EXIT_STATUS.get(code, "failed")


def settle_gone(folder: Path, **how) -> dict | None:
    """Write into run.json how a run whose process is gone ended (training/folder.py: `settle`): as given,
    else `interrupted` when the app had told that process to stop, else `died`. None if nothing to settle."""
    from autotrain.training.folder import settle

    try:
        with _SETTLING:  # a request answered meanwhile waits for the record on disk, not a view of it
            return settle(folder, **(how or _how_it_ended(folder)))
    except OSError:  # a folder the app may not write to: shown as read
        return None


def _how_it_ended(folder: Path) -> dict:
    """`interrupted` when the app told the run's process to stop before it was lost, else `died`."""
    asked = runinfo.read_json(folder / runinfo.APP_STATE).get("stop_requested")
    process = runinfo.read_json(folder / "run.json").get("process")
    if isinstance(asked, dict) and isinstance(process, dict) and asked.get("pid") == process.get("pid"):
        how = (
            f"the app told it to stop (SIGTERM), and its process (pid {process.get('pid')}) ended before it "
            "recorded its end: killed while it saved (docker stop's grace period ran out, or a second signal)"
        )
        return {"status": "interrupted", "how": how}
    return {}


def _exit_text(code: int) -> str:
    if code < 0 and -code in signal.valid_signals():
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def note_stop(folder: Path, process: dict) -> None:
    """Record in `logs/app.json` that the app told the run's process to stop: if that process is then killed
    before it records its end (docker stop's grace period ran out), the record is settled as interrupted."""
    path = folder / runinfo.APP_STATE
    state = runinfo.read_json(path)
    if not _started_here(folder):
        return  # not a run the app started: its app.json (if any) is not ours to write
    state["stop_requested"] = {"at": time.time(), "pid": process.get("pid")}
    with contextlib.suppress(OSError):
        path.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")


def _files(folder: Path, limit: int = 50) -> set[str]:
    """Up to `limit` files under `folder` (relative paths); a big folder of one's own is not walked whole."""
    if not folder.is_dir():
        return set()
    return {p.relative_to(folder).as_posix() for p in itertools.islice(folder.rglob("*"), limit) if not p.is_dir()}


def _started_here(folder: Path) -> bool:
    """`logs/app.json` is the state an earlier start from the app wrote (not a file of the same name)."""
    command = runinfo.read_json(folder / runinfo.APP_STATE).get("command")
    return isinstance(command, list) and command[:2] == ["-m", "autotrain.cli.main"]
