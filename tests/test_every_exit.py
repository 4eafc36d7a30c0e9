"""Every lock and record is settled on every way out. An export's lock (`.OUT.lock` beside its output) goes
with it however it ends: a full disk, damaged weights, a refusal, SIGINT, SIGTERM; one left by a SIGKILLed
export names it, and the next export takes it over, says so, and removes it in turn. A run whose process is
gone is never reported `running`: not by export or predict, not by a --resume, and not by a reader in another
container, which cannot see the process but can see that the folder's lock is free."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_run_faults import dead_process, finished_copy, llm_config, spawn, wait_for_line

pytest.importorskip("gguf", reason='GGUF export needs its extra: pip install -e ".[export]"')

# A process of another container: its host name is not this one's, so its pid says nothing here.
ELSEWHERE = {"pid": 7, "started": 1.0, "host": "3f2a9c1d0e4b"}


def left_beside(out: Path) -> list[str]:
    """What an export to `out` left in its folder besides the run: lock, staging folder, output."""
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith((out.name, f".{out.name}")))


def damaged(run: Path, monkeypatch) -> None:
    weights = run / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])


def full_disk(run: Path, monkeypatch) -> None:
    from autotrain.export import gguf_file

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(gguf_file, "write_gguf", full)


@pytest.mark.parametrize(
    "fault, message",
    [(damaged, "is cut short or damaged"), pytest.param(full_disk, "no space left", marks=pytest.mark.slow)],
)
def test_an_export_that_fails_leaves_no_lock(cli, tmp_path, monkeypatch, fault, message):
    run = finished_copy(tmp_path / "run")
    fault(run, monkeypatch)
    result = cli("export", run, "-o", tmp_path / "out")
    assert result.exit_code == 2 and message in result.stderr, result.output
    assert left_beside(tmp_path / "out") == []


def test_a_lock_left_by_a_killed_export_is_taken_over_with_a_note(cli, tmp_path, monkeypatch):
    run = finished_copy(tmp_path / "run")
    killed = dead_process()
    (tmp_path / ".out.lock").write_text(json.dumps(killed) + "\n")
    damaged(run, monkeypatch)  # the export then fails at once: what matters is the lock on the way in and out
    result = cli("export", run, "-o", tmp_path / "out")
    assert result.exit_code == 2, result.output
    assert (
        f"note: `.out.lock` was left by an export that ended without removing it (pid {killed['pid']}, killed); "
        "taken over"
    ) in result.stderr
    assert left_beside(tmp_path / "out") == []


def test_export_and_predict_of_a_killed_run_say_it_died(cli, tmp_path):
    run = finished_copy(tmp_path / "run")
    (run / "run.json").write_text(json.dumps({"status": "running", "process": dead_process()}))
    result = cli("export", run, "-o", tmp_path / "out")
    assert result.exit_code == 2 and "holds no finished run (status: died: its process (pid " in result.stderr
    unfinished = tmp_path / "unfinished"  # a run killed before it saved a model
    unfinished.mkdir()
    (unfinished / "run.json").write_text(json.dumps({"status": "running", "process": ELSEWHERE}))
    (unfinished / ".autotrain.lock").write_text(json.dumps(ELSEWHERE))
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"text": "hello"}\n')
    result = cli("predict", unfinished, "-i", rows, "-o", tmp_path / "p.jsonl")
    assert result.exit_code == 2 and "did not finish (status: died: its process (pid 7)" in result.stderr


def test_a_run_of_another_container_reads_by_its_folders_lock(tmp_path):
    """The process that run.json names is in a container that is gone (another host name): the folder's
    lock, which the run's process held while it lived, is free, so the run died; while a process holds the
    lock (the run in a container still running), it reads `running`."""
    from autotrain.training.folder import run_record, run_status, settle

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps({"status": "running", "process": ELSEWHERE}))
    assert run_status(folder) == "running"  # no lock file: nothing tells (a run of an earlier release)
    (folder / ".autotrain.lock").write_text(json.dumps(ELSEWHERE))
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
         "print('held', flush=True); sys.stdin.read()", str(folder / ".autotrain.lock")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        assert run_status(folder) == "running" and settle(folder) is None
    finally:
        holder.communicate("")
    assert run_status(folder) == "died" and "pid 7" in run_record(folder)["how"]
    assert settle(folder)["status"] == "died"
    assert json.loads((folder / "run.json").read_text())["status"] == "died"  # written, not only shown


@pytest.mark.slow
def test_a_resume_settles_the_record_its_killed_run_left(tmp_path):
    config = llm_config(tmp_path, max_steps=4, save_steps=2)
    first = spawn("llm", "--config", config)
    said = first.communicate(timeout=300)[0]
    assert first.returncode == 0, said
    run = tmp_path / "run"
    record = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**record, "status": "running", "process": ELSEWHERE}))
    (run / ".autotrain.lock").write_text(json.dumps(ELSEWHERE))
    resumed = spawn("llm", "--config", config, "--resume")
    out = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, out
    assert "note: the lock of" in out and "named pid 7 on 3f2a9c1d0e4b, which ended without releasing it" in out
    assert "note: run.json said `running`, but its process (pid 7) ended without recording" in out
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "completed" and record["attempts"][-1]["status"] == "died", record


# --- signals and SIGKILL, to real export processes ----------------------------------------------------------

SLOW_WRITE = "autotrain.export.gguf_file:write_gguf=60"  # the signal lands while the file is written


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_export_stopped_by_a_signal_leaves_nothing(tmp_path, signum, code):
    run = finished_copy(tmp_path / "run")
    out = tmp_path / "out"
    export = spawn("export", run, "-o", out, slow=SLOW_WRITE, tmp_path=tmp_path)
    try:
        before = wait_for_line(export, "slow write_gguf")
        assert (tmp_path / ".out.lock").is_file()
        status = Path(f"/proc/{export.pid}/status")
        masks = [line for line in status.read_text().splitlines() if line.startswith("Sig")] if status.exists() else []
        export.send_signal(signum)
        said = export.communicate(timeout=120)[0]
    finally:
        if export.poll() is None:
            os.killpg(export.pid, signal.SIGKILL)
    assert export.returncode == code, (
        "".join(before) + said + f"\nsignal masks: {masks}; this process's SIGINT: {signal.getsignal(signal.SIGINT)}"
    )
    assert "Traceback" not in said and left_beside(out) == []


@pytest.mark.slow
def test_the_export_after_a_killed_one_takes_its_lock_over_and_leaves_nothing(cli, tmp_path):
    run = finished_copy(tmp_path / "run")
    out = tmp_path / "out"
    export = spawn("export", run, "-o", out, slow=SLOW_WRITE, tmp_path=tmp_path)
    try:
        wait_for_line(export, "slow write_gguf")
    finally:
        os.killpg(export.pid, signal.SIGKILL)
        export.wait()
    assert json.loads((tmp_path / ".out.lock").read_text())["pid"] == export.pid
    assert left_beside(out) == [".out.lock", f".out.partial-{export.pid}"]
    result = cli("export", run, "-o", out)
    assert result.exit_code == 0, result.output
    assert f"`.out.lock` was left by an export that ended without removing it (pid {export.pid}, killed)" in (
        result.stderr
    )
    assert left_beside(out) == ["out"] and len(list(out.glob("*.gguf"))) == 1
