"""The app's start and end, and what each does to the runs it started.

Stopped (SIGTERM: `docker stop`, `kill`; SIGINT: Ctrl-C), the app stops its runs the way `autotrain` stops a
run: each gets SIGTERM at once, finishes its step, saves a complete checkpoint, records `interrupted` with
the command that resumes it, and exits 143. The app stops answering requests, waits for them (at most
`--stop-wait` seconds, saying on stderr which runs it waits for and how each ended), then exits 143 (130
after Ctrl-C). A second signal sends each run still saving a second SIGTERM (it ends at once without saving,
and records that) and ends the wait. The app's runs are those it started and those it took over after a
restart; a run started from the command line, or by another app that still runs, is left alone. Exports
the app started get SIGTERM too: each removes its lock and its half-written output and exits.

Killed itself (SIGKILL, a crash), the app takes nothing with it: each run is in a process group of its own and
trains on. Started again, the app takes over each run still training whose app is gone, and settles the
record of each run whose process is gone without recording its end (killed with its container, say):
`died`, or `interrupted` when the app had told it to stop (killed while it saved: docker stop's grace period
ran out), with its last complete checkpoint and that checkpoint's step; Resume continues from there.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from autotrain.app import runinfo
from autotrain.app.paths import run_folder
from autotrain.app.runs import Runs, settle_gone

# After a second signal, how long the runs get to write their record and exit.
AFTER_SECOND_SIGNAL = 30.0


def say(message: str) -> None:
    print(f"autotrain app: {message}", file=sys.stderr, flush=True)


def take_over(runs: Runs, tell: Callable[[str], None] = say) -> None:
    """At start-up: settle the record of each run whose process is gone without recording its end, and take
    over each run still training whose app is gone (stopping this app then stops it)."""
    from autotrain.training.lifetime import ALIVE, identity, state

    for name in runs.names():
        folder = run_folder(runs.root, name)
        app_state = runinfo.read_json(folder / runinfo.APP_STATE)
        settled = settle_gone(folder)
        if settled is not None:
            tell(f"run `{name}` was left `running` by a process that is gone; recorded as {_outcome(settled)}")
            continue
        found = runs.process_of(name)
        if found is None or not isinstance(app_state.get("command"), list) or state(app_state.get("app")) == ALIVE:
            continue  # not running, not started by an app, or its app still runs
        app_state["app"] = identity()
        with contextlib.suppress(OSError):
            (folder / runinfo.APP_STATE).write_text(json.dumps(app_state, indent=2) + "\n", encoding="utf-8")
        tell(f"run `{name}` is still training (pid {found['pid']}); its app is gone: this one takes it over")


def _outcome(record: dict) -> str:
    last = record.get("last_checkpoint")
    if not last:
        return f"`{record.get('status')}` (no complete checkpoint to resume from)"
    step = record.get("last_checkpoint_step")
    return f"`{record.get('status')}`; Resume continues from {Path(last).name} (step {step})"


class Stopping:
    """The app's signals: the first stops the HTTP server and the app's runs, a second one forces them."""

    def __init__(self, runs: Runs, wait: float, server, tell: Callable[[str], None] = say):
        self.runs, self.wait, self.server, self.tell = runs, wait, server, tell
        self.signals: list[int] = []
        self.acted = 0
        self.targets: dict[str, Callable[[], bool]] = {}  # what it waits for -> whether it still runs
        self.pids: dict[str, int] = {}
        self.deadline: float | None = None

    def handler(self, signum, frame) -> None:
        self.signals.append(signum)  # the work is done in the main loop (`act`), not inside the handler
        self.server.should_exit = True

    @property
    def exit_code(self) -> int:
        return 130 if self.signals and self.signals[0] == signal.SIGINT else 143

    def act(self) -> None:
        while self.acted < len(self.signals):
            name = signal.Signals(self.signals[self.acted]).name
            (self._first if self.acted == 0 else self._again)(name)
            self.acted += 1

    def _first(self, name: str) -> None:
        from autotrain.app.runs import note_stop
        from autotrain.training.lifetime import ALIVE, send, state

        with self.runs.lock:  # no run starts from here on
            self.runs.closing = True
            owned = self.runs.owned()
        for run, process in owned.items():
            if send(process, signal.SIGTERM):
                note_stop(run_folder(self.runs.root, run), process)
                child = self.runs.children.get(run)
                if child is not None and child.pid == process["pid"]:  # its exit status, not /proc: a zombie
                    self.targets[f"run `{run}`"] = lambda c=child: c.poll() is None  # shows ended before it has
                else:
                    self.targets[f"run `{run}`"] = lambda p=process: state(p) == ALIVE
                self.pids[f"run `{run}`"] = process["pid"]
        for run, child in self.runs.exports.items():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
                self.targets[f"export of `{run}`"] = lambda c=child: c.poll() is None
                self.pids[f"export of `{run}`"] = child.pid
        self.deadline = time.monotonic() + self.wait
        if not self.targets:
            self.tell(f"{name}: stopping (none of its runs is training)")
            return
        listed = ", ".join(f"{what} (pid {self.pids[what]})" for what in self.targets)
        self.tell(
            f"{name}: stopping; SIGTERM sent to {listed}. Waiting up to {self.wait:g} s for each to finish its "
            f"step and save a checkpoint ({name} again stops them at once, without saving)"
        )

    def _again(self, name: str) -> None:
        left = [what for what, alive in self.targets.items() if alive()]
        if not left:
            return
        from autotrain.training.lifetime import identity, send

        for what in left:
            send(identity(self.pids[what]), signal.SIGTERM)
        self.tell(f"{name} again: a second SIGTERM sent to {', '.join(left)}: each ends at once, without saving")
        self.deadline = min(self.deadline or 0.0, time.monotonic() + AFTER_SECOND_SIGNAL)

    def wait_for_runs(self) -> None:
        """Until each run it stopped has ended (saying how), the deadline passed, or a second signal's grace."""
        left = dict(self.targets)
        while left:
            self.act()
            for what in [w for w, alive in left.items() if not alive()]:
                del left[what]
                self.tell(self._ended(what))
            if left and time.monotonic() >= (self.deadline or 0.0):
                for what in left:
                    self.tell(
                        f"{what} (pid {self.pids[what]}) has not ended in the time given; the app exits without it "
                        "(it keeps going in its own process group; an app started again finds it)"
                    )
                return
            time.sleep(0.2)

    def _ended(self, what: str) -> str:
        if not what.startswith("run `"):
            return f"{what} ended"
        name = what[len("run `") : -1]
        shown = self.runs.status(name)
        record = runinfo.manifest(run_folder(self.runs.root, name))
        code = f" (exit {shown['exit_code']})" if shown.get("exit_code") is not None else ""
        last = record.get("last_checkpoint")
        saved = f"; its last complete checkpoint is {Path(last).name}" if last else "; no complete checkpoint"
        return f"{what} ended: {shown['status']}{code}{saved}"


def serve_until_stopped(server, sock, runs: Runs, wait: float) -> int:
    """Run `server` (uvicorn) on `sock` in a thread until SIGTERM or SIGINT, then stop the app's runs and wait
    for them; returns the exit code (143, or 130 after Ctrl-C; 1 when the server ended by itself). The
    signals are this function's: uvicorn only listens for them from the main thread, and it runs in another."""
    stopping = Stopping(runs, wait, server)
    previous = {signum: signal.signal(signum, stopping.handler) for signum in (signal.SIGINT, signal.SIGTERM)}
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="autotrain-app-http", daemon=True)
    try:
        thread.start()
        while thread.is_alive():
            thread.join(0.2)
            stopping.act()
        if not stopping.signals:
            return 1
        stopping.wait_for_runs()
        return stopping.exit_code
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
