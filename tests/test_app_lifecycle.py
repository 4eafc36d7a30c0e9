"""The app's own start and end, and what they do to its runs: stopped (SIGTERM, Ctrl-C), it stops them the way
`autotrain` stops a run and waits; killed, it leaves them training; started again, it takes them over and
settles the record of each run whose process is gone, after which Stop and Resume answer for what is true.
Resume can accept a changed config, as `--resume --accept-changes` does.

The slow tests run a real `autotrain app` process and real training of the tiny model."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason='the app needs its extra: pip install -e ".[app]"')

from fastapi.testclient import TestClient  # noqa: E402

from autotrain.app.server import create_app  # noqa: E402
from autotrain.app.yaml_edit import set_value  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = REPO_ROOT / "configs" / "llm" / "quickstart.yml"


def dead_process() -> dict:
    from autotrain.training.lifetime import identity

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    record = identity(child.pid)
    child.kill()
    child.wait()
    return record


def left_running(runs: Path, name: str, process: dict, steps=(2, 4)) -> Path:
    """A run the app started whose record says `running`: checkpoint-2 complete, checkpoint-4 cut short."""
    folder = runs / name
    (folder / "logs").mkdir(parents=True)
    (runs / f"{name}.yml").write_text(QUICKSTART.read_text())
    state = {"config": f"{name}.yml", "command": ["-m", "autotrain.cli.main", "--config", "x"], "process": process}
    (folder / "logs" / "app.json").write_text(json.dumps(state))
    for step in steps:
        (folder / f"checkpoint-{step}").mkdir()
        (folder / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (folder / f"checkpoint-{steps[0]}" / ".autotrain-complete").write_text("")
    (folder / "run.json").write_text(json.dumps({"status": "running", "process": process}))
    (folder / ".autotrain.lock").write_text(json.dumps(process) + "\n")  # as a killed run leaves it
    return folder


@pytest.fixture
def started(monkeypatch) -> list[list[str]]:
    """The command lines of the runs the app starts; each child is a process that exits at once."""
    import autotrain.app.runs as runs_module

    commands = []
    real = subprocess.Popen

    def popen(command, **kwargs):
        commands.append(command)
        return real([sys.executable, "-c", "pass"], **kwargs)

    monkeypatch.setattr(runs_module.subprocess, "Popen", popen)
    return commands


def test_resume_can_accept_a_changed_config_as_the_command_line_does(tmp_path, started):
    runs = tmp_path / "runs"
    folder = left_running(runs, "r", dead_process())
    (folder / "run.json").write_text(json.dumps({"status": "interrupted", "exit_code": 143}))
    client = TestClient(create_app(runs, REPO_ROOT), base_url="http://127.0.0.1")
    assert client.post("/api/runs/r/resume", json={"accept_changes": "yes"}).status_code == 400
    accepted = client.post("/api/runs/r/resume", json={"accept_changes": True})
    assert accepted.status_code == 200 and accepted.json()["accept_changes"] is True, accepted.text
    assert started[-1][-3:] == [str(runs.resolve() / "r.yml"), "--resume", "--accept-changes"]
    client.app.state.runs.children["r"].wait()
    assert client.post("/api/runs/r/resume").json()["accept_changes"] is False  # no body: as before
    assert started[-1][-2:] == [str(runs.resolve() / "r.yml"), "--resume"]
    page = (REPO_ROOT / "autotrain" / "app" / "static" / "index.html").read_text()
    assert 'type="checkbox" id="accept-changes"' in page and "accept config changes</label>" in page


@pytest.mark.parametrize("where", ["this machine", "another container"])
def test_a_run_whose_process_is_gone_is_settled_and_resumes(tmp_path, started, where):
    """Killed with its container and read from a new one (another host name: its pid says nothing here), or
    killed on this machine: the run reads `died`, the app started again writes that into run.json with the
    last complete checkpoint and its step, Stop says there is nothing to stop and Resume starts."""
    from autotrain.app.lifecycle import take_over

    process = dead_process() if where == "this machine" else {"pid": 7, "started": 1.0, "host": "3f2a9c1d0e4b"}
    runs = tmp_path / "runs"
    folder = left_running(runs, "r", process)
    from autotrain.training.folder import run_status

    assert run_status(folder) == "died"  # as read, before anything is written
    client = TestClient(create_app(runs, REPO_ROOT), base_url="http://127.0.0.1")
    told = []
    take_over(client.app.state.runs, told.append)
    record = json.loads((folder / "run.json").read_text())
    assert record["status"] == "died" and record["last_checkpoint_step"] == 2, record
    assert record["last_checkpoint"] == str(folder / "checkpoint-2") and f"pid {process['pid']}" in record["how"]
    assert told == ["run `r` was left `running` by a process that is gone; recorded as `died`; Resume continues "
                    "from checkpoint-2 (step 2)"]  # fmt: skip
    assert client.get("/api/runs/r").json()["status"] == "died"
    stop = client.post("/api/runs/r/stop")
    assert stop.status_code == 409 and "is not running (status: died: its process" in stop.json()["error"]
    assert client.post("/api/runs/r/resume").status_code == 200
    assert started[-1][-1] == "--resume"


def test_a_run_the_app_told_to_stop_and_that_was_killed_saving_is_settled_interrupted(tmp_path):
    from autotrain.app.lifecycle import take_over
    from autotrain.app.runs import Runs

    process = dead_process()
    folder = left_running(tmp_path / "runs", "r", process)
    state = json.loads((folder / "logs" / "app.json").read_text())
    (folder / "logs" / "app.json").write_text(json.dumps({**state, "stop_requested": {"pid": process["pid"]}}))
    take_over(Runs(tmp_path / "runs", tmp_path), lambda line: None)
    record = json.loads((folder / "run.json").read_text())
    assert record["status"] == "interrupted" and "the app told it to stop (SIGTERM)" in record["how"]


def test_a_run_still_held_elsewhere_is_neither_settled_nor_resumed(tmp_path):
    """Its process is in another container (pid unknown here) but holds the folder's lock: it runs."""
    from autotrain.app.lifecycle import take_over

    runs = tmp_path / "runs"
    folder = left_running(runs, "r", {"pid": 7, "started": 1.0, "host": "3f2a9c1d0e4b"})
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
         "print('held', flush=True); sys.stdin.read()", str(folder / ".autotrain.lock")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        client = TestClient(create_app(runs, REPO_ROOT), base_url="http://127.0.0.1")
        take_over(client.app.state.runs, lambda line: None)
        assert json.loads((folder / "run.json").read_text())["status"] == "running"
        assert client.get("/api/runs/r").json()["status"] == "running"
        assert client.post("/api/runs/r/resume").status_code == 409
        stop = client.post("/api/runs/r/stop")
        assert stop.status_code == 409 and "a process this app cannot reach" in stop.json()["error"]
    finally:
        holder.communicate("")


STUBBORN = """
import signal, sys, time
seen = []
def handle(*_):
    if seen:
        sys.exit(143)
    seen.append(1)
    print("saving", flush=True)
signal.signal(signal.SIGTERM, handle)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""  # a run that takes the first SIGTERM (as a run saving its checkpoint) and ends at the second


@pytest.mark.parametrize("second_signal", [False, True])
def test_the_app_waits_for_its_runs_for_so_long_and_a_second_signal_ends_them(tmp_path, second_signal):
    from autotrain.app.lifecycle import Stopping
    from autotrain.app.runs import Runs

    runs = Runs(tmp_path / "runs", tmp_path)
    (runs.root / "r").mkdir(parents=True)
    child = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True)
    told, server = [], type("Server", (), {"should_exit": False})()
    try:
        assert child.stdout.readline().strip() == "ready"
        runs.children["r"] = child
        stopping = Stopping(runs, wait=2, server=server, tell=told.append)
        stopping.handler(signal.SIGTERM, None)
        stopping.act()
        assert child.stdout.readline().strip() == "saving"  # the first SIGTERM is in (signals do not queue)
        if second_signal:
            stopping.handler(signal.SIGINT, None)
        stopping.wait_for_runs()
    finally:
        child.kill()
        child.wait()
    assert server.should_exit and stopping.exit_code == 143 and runs.closing
    assert told[0].startswith(f"SIGTERM: stopping; SIGTERM sent to run `r` (pid {child.pid}). Waiting up to 2 s ")
    if second_signal:
        assert told[1:] == ["SIGINT again: a second SIGTERM sent to run `r`: each ends at once, without saving",
                            "run `r` ended: interrupted (exit 143); no complete checkpoint"]  # fmt: skip
    else:
        assert told[1:] == [f"run `r` (pid {child.pid}) has not ended in the time given; the app exits without it "
                            "(it keeps going in its own process group; an app started again finds it)"]  # fmt: skip


# --- a real app process and real training ---------------------------------------------------------------


class App:
    """`autotrain app` in a subprocess on a free port, its stderr in a file."""

    def __init__(self, runs: Path, tmp_path: Path, *args: str):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp_path / f"app-{self.port}.log"
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
        command = [sys.executable, "-m", "autotrain.cli.main", "app", "--port", str(self.port), "--runs-dir", str(runs)]
        with open(self.log, "w") as log:
            self.process = subprocess.Popen([*command, *args], cwd=REPO_ROOT, env=env, stdout=log, stderr=log)
        self.until(lambda: self.call("GET", "/api/runs") is not None, 120, "the app answers")

    def call(self, method: str, path: str, body: dict | None = None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data, {"Content-Type": "application/json"}, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            return {"http_status": exc.code, **json.load(exc)}
        except OSError:
            return None

    def run(self, name: str) -> dict:
        return self.call("GET", f"/api/runs/{name}") or {}

    def until(self, done, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None and what != "the app exits":
                raise AssertionError(f"the app exited ({self.process.returncode}):\n{self.log.read_text()}")
            found = done()
            if found:
                return found
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting for {what}:\n{self.log.read_text()[-3000:]}")

    def stop(self, signum=signal.SIGTERM, timeout: float = 180) -> int:
        self.process.send_signal(signum)
        self.until(lambda: self.process.poll() is not None, timeout, "the app exits")
        return self.process.returncode

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def apps(tmp_path):
    """`apps(runs, *args)` starts an app; each is killed afterwards, and so is every run left training."""
    started: list[App] = []

    def start(runs: Path, *args: str) -> App:
        started.append(App(runs, tmp_path, *args))
        return started[-1]

    yield start
    from autotrain.training.lifetime import send

    for app in started:
        app.kill()
    for state in tmp_path.glob("runs/*/logs/app.json"):  # a run a failed test left training
        send(json.loads(state.read_text()).get("process"), signal.SIGKILL)


def quickstart(runs: Path, name: str, **training) -> str:
    text = set_value(QUICKSTART.read_text(), ["project_name"], str(runs / name))
    for key, value in training.items():
        text = set_value(text, ["training_args", key], value)
    return text


def trained_steps(folder: Path) -> list[int]:
    lines = (folder / "logs" / "metrics.jsonl").read_text().splitlines()
    return [record["step"] for record in map(json.loads, lines) if "loss" in record]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stopping_the_app_stops_its_run_with_a_checkpoint_and_resume_continues_it(tmp_path, apps, signum):
    runs = tmp_path / "runs"
    app = apps(runs)
    text = quickstart(runs, "life", max_steps=100000, logging_steps=1, save_steps=100000)
    assert app.call("POST", "/api/runs", {"yaml": text})["name"] == "life"
    app.until(lambda: app.run("life").get("progress", {}).get("step", 0) >= 3, 300, "step 3")
    pid = app.run("life")["pid"]

    assert app.stop(signum) == (143 if signum == signal.SIGTERM else 130)
    said = app.log.read_text()
    name = signal.Signals(signum).name
    assert f"autotrain app: {name}: stopping; SIGTERM sent to run `life` (pid {pid})" in said
    assert "Waiting up to 240 s for each to finish its step and save a checkpoint" in said
    assert "run `life` ended: interrupted (exit 143); its last complete checkpoint is checkpoint-" in said
    folder = runs / "life"
    record = json.loads((folder / "run.json").read_text())
    assert (record["status"], record["exit_code"]) == ("interrupted", 143), record
    stopped_at = trained_steps(folder)[-1]
    assert record["last_checkpoint"].endswith(f"checkpoint-{stopped_at}")  # saved at the step it stopped
    assert (folder / f"checkpoint-{stopped_at}" / ".autotrain-complete").is_file()
    assert "finishing this step and saving a checkpoint" in (folder / "logs" / "app.log").read_text()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    if signum == signal.SIGINT:
        return  # the same stop; the resume is the SIGTERM case's

    app = apps(runs)
    assert app.run("life")["status"] == "interrupted"
    config = runs / "life.yml"
    text = set_value(config.read_text(), ["training_args", "lr"], 0.004)
    config.write_text(set_value(text, ["training_args", "max_steps"], stopped_at + 3))
    assert app.call("POST", "/api/runs/life/resume")["resume"] is True
    refused = app.until(lambda: (r := app.run("life")).get("status") != "running" and r, 300, "the refused resume")
    assert "--accept-changes" in refused["log"] and "training_args.lr: 0.005 -> 0.004" in refused["log"], refused
    assert app.call("POST", "/api/runs/life/resume", {"accept_changes": True})["accept_changes"] is True
    done = app.until(lambda: (r := app.run("life")).get("status") not in ("running", "interrupted") and r, 300, "done")
    assert (done["status"], done["exit_code"]) == ("completed", 0), done["log"]
    assert trained_steps(folder)[-3:] == [stopped_at + 1, stopped_at + 2, stopped_at + 3]
    record = json.loads((folder / "run.json").read_text())
    assert record["resumed_from"].endswith(f"checkpoint-{stopped_at}") and record["changes"], record
    assert app.stop() == 143 and "none of its runs is training" in app.log.read_text()


@pytest.mark.slow
def test_a_killed_app_leaves_its_run_training_and_the_app_started_again_takes_it_over_and_settles_it(tmp_path, apps):
    """On a host, SIGKILL of the app alone: the run trains on (its own process group), the app started again takes
    it over (stopping that app would stop it). The run's process killed too (as its container's end would):
    it reads `died`, the record is settled with its last complete checkpoint, and Resume continues from it."""
    runs = tmp_path / "runs"
    app = apps(runs)
    text = quickstart(runs, "kept", max_steps=100000, logging_steps=1, save_steps=3)
    app.call("POST", "/api/runs", {"yaml": text})
    app.until(lambda: app.run("kept").get("progress", {}).get("step", 0) >= 4, 300, "step 4")
    pid = app.run("kept")["pid"]
    app.kill()
    folder = runs / "kept"
    step = trained_steps(folder)[-1]
    deadline = time.monotonic() + 120
    while trained_steps(folder)[-1] <= step:  # it trains on without its app
        assert time.monotonic() < deadline, f"no step past {step} within 120 s of the app's SIGKILL"
        time.sleep(0.3)

    app = apps(runs)
    shown = app.run("kept")
    assert (shown["status"], shown["pid"]) == ("running", pid)
    assert f"run `kept` is still training (pid {pid}); its app is gone: this one takes it over" in app.log.read_text()
    os.kill(pid, signal.SIGKILL)
    died = app.until(lambda: (r := app.run("kept")).get("status") == "died" and r, 60, "died")
    assert f"pid {pid}" in died["how"]
    record = json.loads((folder / "run.json").read_text())  # settled on disk, not only shown
    assert record["status"] == "died" and record["last_checkpoint_step"] % 3 == 0, record
    last = record["last_checkpoint_step"]
    stop = app.call("POST", "/api/runs/kept/stop")
    assert stop["http_status"] == 409 and "is not running (status: died" in stop["error"]

    config = runs / "kept.yml"
    config.write_text(set_value(config.read_text(), ["training_args", "max_steps"], last + 2))
    assert app.call("POST", "/api/runs/kept/resume")["resume"] is True
    done = app.until(lambda: (r := app.run("kept")).get("status") not in ("running", "died") and r, 300, "done")
    assert done["status"] == "completed", done["log"]
    assert trained_steps(folder)[-2:] == [last + 1, last + 2]
    assert json.loads((folder / "run.json").read_text())["attempts"][-1]["status"] == "died"
