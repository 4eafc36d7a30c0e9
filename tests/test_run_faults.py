"""Every way a run can die, and what it leaves: no rank outlives its launcher, the folder's lock is never free
while a rank lives, run.json says how the run really ended, a resume knows what it resumes, a full disk is
one line, and the final save can be repeated."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ASSETS = Path(__file__).parent / "assets"
LINUX = sys.platform.startswith("linux")


def llm_config(tmp_path: Path, name: str = "run", distributed: dict | None = None, **training) -> Path:
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(ASSETS / "tiny-llama"),
        "project_name": str(tmp_path / name),
        "data": {"path": str(ASSETS / "data" / "text.jsonl")},
        "training_args": {
            "max_steps": 6,
            "batch_size": 2,
            "lr": 1e-3,
            "max_length": 48,
            "logging_steps": 1,
            "mixed_precision": "no",
            "save_steps": 1000,
            **training,
        },
    }
    if distributed:
        config["distributed"] = distributed
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(config))
    return path


# Loaded by the processes `spawn(..., slow=...)` starts: each `module:Class.method=seconds` (or
# `module:function=seconds`) prints `slow NAME` (rank 0 only) and waits that long before it runs, so that a
# signal, a kill or a second process can land while it is under way.
SLOW = """
import os
if os.environ.get("TEST_SLOW"):
    import importlib, signal, time
    # The test signals this process: a SIGINT or SIGTERM blocked in the thread that started it (a mask is
    # inherited across exec), or a SIGINT that process ignored, would never arrive. Said when it happens, and
    # cleared: the process's own handling of the signal is what is tested.
    _blocked = {signal.SIGINT, signal.SIGTERM} & signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if _blocked:
        print(f"test harness: {sorted(s.name for s in _blocked)} blocked at start, unblocked", flush=True)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _blocked)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # ignored by the process that started this one
        print("test harness: SIGINT ignored at start, given Python's own handler", flush=True)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    def _slowed(target, seconds):
        module, _, path = target.partition(":")
        owner = importlib.import_module(module)
        *parents, name = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        real = getattr(owner, name)
        def slowed(*args, **kwargs):
            if os.environ.get("RANK", "0") == "0":
                print(f"slow {name}", flush=True)
                time.sleep(seconds)
            return real(*args, **kwargs)
        setattr(owner, name, slowed)
    for item in os.environ["TEST_SLOW"].split(","):
        target, seconds = item.split("=")
        _slowed(target, float(seconds))
"""


def spawn(*args, env: dict | None = None, slow: str | None = None, tmp_path: Path | None = None) -> subprocess.Popen:
    clean = {k: v for k, v in os.environ.items() if k not in ("AUTOTRAIN_LAUNCHED", "AUTOTRAIN_PARENT", "RANK")}
    env = dict(env or {})
    if slow:
        inject = tmp_path / "inject"
        inject.mkdir(exist_ok=True)
        (inject / "sitecustomize.py").write_text(SLOW)
        env["PYTHONPATH"] = os.pathsep.join([str(inject), *filter(None, [os.environ.get("PYTHONPATH")])])
        env["TEST_SLOW"] = slow
    return subprocess.Popen(
        [sys.executable, "-m", "autotrain.cli.main", *map(str, args)],
        env={**clean, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: killed whole if the test gives up
    )


def wait_for_line(process: subprocess.Popen, prefix: str, timeout: float = 300) -> list[str]:
    lines, deadline = [], time.monotonic() + timeout
    for line in process.stdout:
        lines.append(line)
        if line.startswith(prefix):
            return lines
        if time.monotonic() > deadline:
            break
    os.killpg(process.pid, signal.SIGKILL)
    raise AssertionError(f"no line starting {prefix!r}:\n{''.join(lines)}")


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; it only waits for its parent to read its status


# --- no orphan ever ----------------------------------------------------------------------------------------


def test_a_claim_is_refused_while_a_rank_of_an_earlier_run_holds_the_folder(tmp_path):
    from autotrain.errors import UserInputError
    from autotrain.run.project import ProjectFolder

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".autotrain-run").write_text("")
    (folder / "run.json").write_text('{"status": "running"}')
    rank = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from autotrain.run.project import hold_for_rank;"
         f"hold_for_rank(Path({str(folder)!r})); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert rank.stdout.readline().strip() == "held"
        with pytest.raises(UserInputError, match="still written to by the processes of an earlier run"):
            ProjectFolder(folder).claim("latest", overwrite=False)
    finally:
        rank.communicate("")
    ProjectFolder(folder).claim("latest", overwrite=False).release()  # the rank has ended: free again


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="finds the ranks through /proc")
def test_sigkill_of_the_launcher_stops_every_rank_and_the_folder_stays_locked_until_they_end(tmp_path):
    from autotrain.errors import UserInputError
    from autotrain.run.project import ProjectFolder

    config = llm_config(tmp_path, max_steps=100000, distributed={"num_processes": 2})
    launcher = spawn("llm", "--config", config)
    try:
        wait_for_line(launcher, "step 2/")
        ranks = children(launcher.pid)
        assert len(ranks) == 2, ranks
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=30)
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in ranks) and time.monotonic() < deadline:
            with pytest.raises(UserInputError):  # the lock is never free while a rank lives
                ProjectFolder(tmp_path / "run").claim("latest", overwrite=False)
            time.sleep(0.05)
        assert not any(alive(pid) for pid in ranks), "a rank outlived its launcher by 10 s"
        from autotrain.training.folder import run_status

        assert run_status(tmp_path / "run") == "died"
    finally:
        for pid in [launcher.pid, *locals().get("ranks", [])]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


# --- run.json tells the truth ---------------------------------------------------------------------------


def dead_process() -> dict:
    """The identity record of a process that has ended."""
    from autotrain.training.lifetime import identity

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    record = identity(child.pid)
    child.kill()
    child.wait()
    return record


def test_a_running_record_whose_process_is_gone_reads_as_died(tmp_path):
    from autotrain.training.folder import run_record, run_status

    folder = tmp_path / "run"
    folder.mkdir()
    process = dead_process()
    (folder / "run.json").write_text(json.dumps({"status": "running", "process": process}))
    assert run_status(folder) == "died"
    assert f"pid {process['pid']}" in run_record(folder)["how"]
    from autotrain.training.lifetime import identity

    (folder / "run.json").write_text(json.dumps({"status": "running", "process": identity()}))
    assert run_status(folder) == "running"  # this process is alive


def test_a_failed_resume_of_a_finished_run_leaves_it_completed(cli, tmp_path, monkeypatch):
    config = llm_config(tmp_path, max_steps=2, save_steps=2)
    assert cli("llm", "--config", config).exit_code == 0
    import transformers

    def broken(self, *args, **kwargs):
        raise RuntimeError("the machine broke")

    monkeypatch.setattr(transformers.Trainer, "training_step", broken)
    config.write_text(config.read_text().replace("max_steps: 2", "max_steps: 4"))
    result = cli("llm", "--config", config, "--resume", "latest")
    assert result.exit_code == 1, result.output
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["status"] == "completed", record
    assert record["failed_resumes"][0]["status"] == "failed"
    assert "the machine broke" in record["failed_resumes"][0]["error"]
    from autotrain.export.source import check_run

    assert check_run(tmp_path / "run").task == "llm"  # export still takes the intact model


def test_metrics_after_a_resume_repeat_no_step(cli, tmp_path):
    config = llm_config(tmp_path, max_steps=4, save_steps=2)
    assert cli("llm", "--config", config).exit_code == 0
    run = tmp_path / "run"
    # as if the process died after logging step 4, before checkpoint-4 was complete
    (run / "checkpoint-4" / ".autotrain-complete").unlink()
    (run / "run.json").write_text(json.dumps({"status": "running", "process": dead_process()}))
    result = cli("llm", "--config", config, "--resume", "latest")
    assert result.exit_code == 0, result.output
    assert "resuming from" in result.output and "checkpoint-2" in result.output
    lines = [json.loads(line) for line in (run / "logs" / "metrics.jsonl").read_text().splitlines()]
    steps = [line["step"] for line in lines if "loss" in line]
    assert steps == [1, 2, 3, 4], steps


def test_the_app_stops_a_run_it_finds_running_after_a_restart(tmp_path):
    from fastapi.testclient import TestClient

    from autotrain.app.server import create_app
    from autotrain.training.lifetime import identity

    runs = tmp_path / "runs"
    (runs / "found" / "logs").mkdir(parents=True)
    training = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = {"status": "running", "process": identity(training.pid)}
        (runs / "found" / "run.json").write_text(json.dumps(record))
        client = TestClient(create_app(runs, tmp_path), base_url="http://127.0.0.1")
        shown = client.get("/api/runs/found").json()
        assert shown["status"] == "running" and shown["pid"] == training.pid
        stopped = client.post("/api/runs/found/stop")
        assert stopped.status_code == 200, stopped.text
        assert training.wait(timeout=30) == -signal.SIGTERM
        shown = client.get("/api/runs/found").json()
        assert shown["status"] == "died" and f"pid {training.pid}" in shown["how"]
        assert client.post("/api/runs/found/stop").status_code == 409
    finally:
        training.kill()


def rank_pid(launcher: int, rank: int) -> int:
    for pid in children(launcher):
        if f"RANK={rank}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            return pid
    raise LookupError(f"no rank {rank} among the launcher's children")


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="finds the ranks through /proc")
def test_a_killed_rank_0_leaves_a_record_of_how_the_run_ended(tmp_path):
    config = llm_config(tmp_path, max_steps=100000, distributed={"num_processes": 2})
    launcher = spawn("llm", "--config", config)
    try:
        wait_for_line(launcher, "step 2/")
        os.kill(rank_pid(launcher.pid, 0), signal.SIGKILL)
        out = launcher.communicate(timeout=120)[0]
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode == 1, out
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["status"] == "failed" and record["exit_code"] == 1, record
    assert record["how"].startswith("rank ") and record["ended"], record


@pytest.mark.slow
def test_a_second_sigterm_exits_at_once_and_says_so_in_run_json(tmp_path):
    config = llm_config(tmp_path, max_steps=100000)
    process = spawn("llm", "--config", config, slow="transformers:Trainer._save_checkpoint=20", tmp_path=tmp_path)
    try:
        wait_for_line(process, "step 2/")
        process.send_signal(signal.SIGTERM)
        wait_for_line(process, "slow _save_checkpoint")  # the first SIGTERM's save is under way
        process.send_signal(signal.SIGTERM)
        out = process.communicate(timeout=60)[0]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 143, out
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["status"] == "interrupted" and record["exit_code"] == 143, record
    assert record["how"] == "a second SIGTERM ended it at once, without saving"
    assert not any((p / ".autotrain-complete").exists() for p in (tmp_path / "run").glob("checkpoint-*"))


@pytest.mark.slow
def test_a_sigkilled_run_reads_as_died_and_resumes(tmp_path):
    from autotrain.training.folder import run_record

    config = llm_config(tmp_path, max_steps=8, save_steps=2)
    process = spawn("llm", "--config", config)
    try:
        wait_for_line(process, "step 5/")
        process.kill()
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert run_record(tmp_path / "run")["status"] == "died"
    resumed = spawn("llm", "--config", config, "--resume")
    out = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, out
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["status"] == "completed" and record["attempts"][-1]["status"] == "died", record


# --- a resume knows what it resumes ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> tuple[Path, Path]:
    """A 2-step run with one checkpoint (config, folder); the tests below only read it."""
    from typer.testing import CliRunner

    from autotrain.cli.main import app

    tmp_path = tmp_path_factory.mktemp("finished")
    config = llm_config(tmp_path, max_steps=2, save_steps=2)
    result = CliRunner().invoke(app, ["llm", "--config", str(config)])
    assert result.exit_code == 0, result.output
    return config, tmp_path / "run"


def changed_copy(config: Path, tmp_path: Path, change) -> Path:
    data = yaml.safe_load(config.read_text())
    data["training_args"]["max_steps"] = 4  # longer: a change a resume takes without being told
    change(data, tmp_path)
    path = tmp_path / "changed.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def other_data(data: dict, tmp_path: Path) -> None:
    rows = (ASSETS / "data" / "text.jsonl").read_text().splitlines()
    (tmp_path / "text.jsonl").write_text("\n".join(rows[1:]) + "\n")
    data["data"]["path"] = str(tmp_path / "text.jsonl")


def copied_base_model(data: dict, tmp_path: Path) -> None:
    import shutil

    shutil.copytree(ASSETS / "tiny-llama", tmp_path / "same-shape")
    data["base_model"] = str(tmp_path / "same-shape")


CHANGES = {
    "training_args.lr: 0.001 -> 0.0005": lambda d, _: d["training_args"].update(lr=5e-4),
    "training_args.max_length: 48 -> 32": lambda d, _: d["training_args"].update(max_length=32),
    "training_args.batch_size: 2 -> 4": lambda d, _: d["training_args"].update(batch_size=4),
    "trainer: sft -> clm": lambda d, _: d.update(trainer="clm"),
    "base_model.name: ": copied_base_model,
    "data: text.jsonl (sha256 ": other_data,
}


@pytest.mark.parametrize("listed", list(CHANGES))
def test_a_resume_with_a_changed_config_is_refused_listing_the_change(cli, finished_run, tmp_path, listed):
    config, run = finished_run
    before = (run / "run.json").read_text()
    result = cli("llm", "--config", changed_copy(config, tmp_path, CHANGES[listed]), "--resume", "latest")
    assert result.exit_code == 2, result.output
    assert "the config differs from the run" in result.stderr and listed in result.stderr, result.stderr
    assert "--accept-changes" in result.stderr
    assert "note: training_args.max_steps: 2 -> 4" in result.stderr  # listed, not refused
    assert (run / "run.json").read_text() == before


@pytest.mark.parametrize("path", sorted((ASSETS.parents[1] / "configs").rglob("*.yml")), ids=lambda p: p.name)
def test_a_fingerprint_read_back_from_run_json_equals_the_configs(path):
    """No false difference: what run.json holds (JSON) compares equal to the same config loaded again."""
    from autotrain.config.load import load_config
    from autotrain.run.fingerprint import differences, fingerprint

    loaded = load_config(path, [])
    recorded = json.loads(json.dumps(fingerprint(loaded)))
    assert differences(recorded, None, fingerprint(load_config(path, [])), None) == []


def test_a_setting_added_since_the_run_was_recorded_is_no_difference_at_its_default(tmp_path):
    """A run recorded before a setting existed resumes under the autotrain that has it, where the config leaves
    it at its default (the run's own behaviour); a config that sets it is listed as a change."""
    from autotrain.config.load import load_config
    from autotrain.run.fingerprint import differences, fingerprint

    config = ASSETS.parents[1] / "configs" / "llm" / "quickstart.yml"
    lora = ["peft.enabled=true"]
    recorded = json.loads(json.dumps(fingerprint(load_config(config, lora))))
    recorded.pop("defaulted")
    del recorded["settings"]["peft.use_dora"]  # as an autotrain without DoRA recorded it
    assert differences(recorded, None, fingerprint(load_config(config, lora)), None) == []
    set_now = fingerprint(load_config(config, [*lora, "peft.use_dora=true"]))
    assert [d.line() for d in differences(recorded, None, set_now, None)] == ["peft.use_dora: (not set) -> True"]


def test_an_accepted_new_lr_applies_from_the_resumed_step_and_is_recorded(cli, tmp_path):
    config = llm_config(tmp_path, max_steps=2, save_steps=2, warmup_ratio=0.0)
    assert cli("llm", "--config", config).exit_code == 0
    changed = yaml.safe_load(config.read_text())
    changed["training_args"].update(max_steps=4, lr=5e-4)
    config.write_text(yaml.safe_dump(changed))
    result = cli("llm", "--config", config, "--resume", "latest", "--accept-changes")
    assert result.exit_code == 0, result.output
    assert "training_args.lr: 0.001 -> 0.0005" in result.stderr
    assert "learning rate: 0.001 -> 0.0005 from step 2 on" in result.stderr
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert {"key": "training_args.lr", "old": 0.001, "new": 0.0005} in record["changes"]
    # the steps after the resume follow the schedule a run at the new rate has at those steps
    changed["project_name"] = str(tmp_path / "fresh")
    fresh = tmp_path / "fresh.yml"
    fresh.write_text(yaml.safe_dump(changed))
    assert cli("llm", "--config", fresh).exit_code == 0

    def rates(folder: str) -> dict:
        state = json.loads((tmp_path / folder / "trainer_state.json").read_text())
        return {e["step"]: e["learning_rate"] for e in state["log_history"] if "learning_rate" in e}

    resumed, expected = rates("run"), rates("fresh")
    assert {s: resumed[s] for s in (3, 4)} == pytest.approx({s: expected[s] for s in (3, 4)}, rel=1e-9)


@pytest.mark.parametrize("lr", [1e-3, 5e-4])
def test_a_resumed_schedule_has_the_rates_of_a_run_with_the_new_config(lr):
    """The Trainer loads the checkpoint's scheduler state over the schedule the config now defines; the
    rates from the resumed step on are those of a fresh run with the new lr and length, warm-up included."""
    from types import SimpleNamespace

    import torch
    from transformers import get_scheduler

    from autotrain.training.checkpoints import ResumedSchedule

    def schedule(rate: float, steps: int, done: int):
        params = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))]
        optimizer = torch.optim.AdamW([{"params": params[:1]}, {"params": params[1:], "lr": rate / 2}], rate)
        scheduler = get_scheduler("linear", optimizer, num_warmup_steps=3, num_training_steps=steps)
        for _ in range(done):
            optimizer.step()
            scheduler.step()
        return optimizer, scheduler

    _, old = schedule(1e-3, 8, 4)  # the run that saved a checkpoint at step 4 of 8
    optimizer, resumed = schedule(lr, 16, 0)  # resumed with max_steps 16 and `lr`
    resumed.load_state_dict(old.state_dict())
    for group, saved in zip(optimizer.param_groups, old.optimizer.param_groups, strict=True):
        group.update(lr=saved["lr"], initial_lr=saved["initial_lr"])  # as the optimizer's state brings them
    ResumedSchedule(lr, say=lambda line: None).on_train_begin(
        None, SimpleNamespace(global_step=4), None, optimizer=optimizer, lr_scheduler=resumed
    )
    _, fresh = schedule(lr, 16, 4)
    for _ in range(3):
        assert resumed.get_last_lr() == pytest.approx(fresh.get_last_lr(), rel=1e-12)
        assert [g["lr"] for g in optimizer.param_groups] == pytest.approx(fresh.get_last_lr(), rel=1e-12)
        optimizer.step()
        resumed.step()
        fresh.step()


def test_a_checkpoint_of_another_shape_is_bad_input_naming_it_and_the_tensor(cli, finished_run, tmp_path):
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    config, run = finished_run
    shape = LlamaConfig.from_pretrained(ASSETS / "tiny-llama")
    shape.hidden_size, shape.head_dim, shape.intermediate_size = 32, 8, 64
    LlamaForCausalLM(shape).save_pretrained(tmp_path / "narrow")
    AutoTokenizer.from_pretrained(ASSETS / "tiny-llama").save_pretrained(tmp_path / "narrow")
    other = changed_copy(config, tmp_path, lambda d, t: d.update(base_model=str(t / "narrow")))
    result = cli("llm", "--config", other, "--resume", "latest", "--accept-changes")
    assert result.exit_code == 2, result.output
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and f"checkpoint `{run / 'checkpoint-2'}` does not fit" in error[0], result.stderr
    assert "tensor `model.embed_tokens.weight` is [320, 64] in the checkpoint and [320, 32] in the model" in error[0]
    assert "Traceback" not in result.output and "Error(s) in loading" not in result.output


# --- the final save and max_steps -------------------------------------------------------------------------


def test_a_finished_schedule_is_loaded_without_a_step_or_a_callback(tmp_path):
    """A checkpoint at the end of the schedule (a run killed during its final save) is loaded as
    `train(resume_from_checkpoint=...)` loads it, and not one step is trained from it, nor any callback
    told that training begins (a logger would open a run for it)."""
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from autotrain.training.checkpoints import load_finished_schedule

    class Line(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(2))

        def forward(self, x, labels):
            return {"loss": ((x @ self.weight - labels) ** 2).mean()}

    class Told(TrainerCallback):
        def __init__(self):
            self.events = []

        def on_train_begin(self, args, state, control, **kwargs):
            self.events.append("begin")

        def on_step_begin(self, args, state, control, **kwargs):
            self.events.append("step")

    rows = [{"x": torch.tensor([1.0, float(i)]), "labels": torch.tensor(float(i))} for i in range(8)]
    args = dict(output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=2, learning_rate=0.1,
                save_steps=4, logging_steps=1, report_to=[], use_cpu=True, disable_tqdm=True)  # fmt: skip
    Trainer(Line(), TrainingArguments(**args), train_dataset=rows).train()
    told = Told()
    trainer = Trainer(Line(), TrainingArguments(**args), train_dataset=rows, callbacks=[told])
    load_finished_schedule(trainer, str(tmp_path / "checkpoint-4"))
    from safetensors.torch import load_file

    saved = load_file(tmp_path / "checkpoint-4" / "model.safetensors")["weight"]
    assert torch.equal(trainer.model.weight.detach(), saved) and not torch.equal(saved, torch.zeros(2))
    assert trainer.state.global_step == 4 and trainer.state.log_history  # the checkpoint's state
    assert told.events == []
    assert told in trainer.callback_handler.callbacks and len(trainer.callback_handler.callbacks) == 3


@pytest.mark.slow
def test_a_run_killed_during_its_final_save_resumes_to_exactly_max_steps(tmp_path):
    config = llm_config(tmp_path, max_steps=4, save_steps=2)
    process = spawn("llm", "--config", config, slow="transformers:Trainer.save_metrics=30", tmp_path=tmp_path)
    try:
        wait_for_line(process, "slow save_metrics")  # the final save: the model is written, the rest is not
        process.kill()
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    run = tmp_path / "run"
    resumed = spawn("llm", "--config", config, "--resume")
    out = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, out
    assert "is at step 4, the end of the schedule: no step left to train" in out, out
    assert json.loads((run / "trainer_state.json").read_text())["global_step"] == 4
    assert max(int(p.name.split("-")[1]) for p in run.glob("checkpoint-*")) == 4  # no checkpoint-5
    assert json.loads((run / "run.json").read_text())["status"] == "completed"
    from safetensors.torch import load_file

    [weights] = [p.name for p in run.glob("*.safetensors")]
    final, checkpoint = load_file(run / weights), load_file(run / "checkpoint-4" / weights)
    assert final.keys() == checkpoint.keys() and all(final[k].equal(checkpoint[k]) for k in final)


@pytest.mark.slow
def test_sigterm_during_the_final_save_lets_it_finish(tmp_path):
    config = llm_config(tmp_path, max_steps=4, save_steps=2)
    process = spawn("llm", "--config", config, slow="transformers:Trainer.save_metrics=5", tmp_path=tmp_path)
    try:
        lines = wait_for_line(process, "slow save_metrics")
        process.send_signal(signal.SIGTERM)
        out = "".join(lines) + process.communicate(timeout=120)[0]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, out
    assert "SIGTERM: saving the final model first" in out and "nothing to save" not in out, out
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "completed"
    assert json.loads((tmp_path / "run" / "trainer_state.json").read_text())["global_step"] == 4


# --- full disks and bad files ---------------------------------------------------------------------------


def test_a_full_disk_during_a_checkpoint_is_one_line_and_keeps_the_last_complete_one(cli, tmp_path, monkeypatch):
    import torch

    real = torch.save

    def full_at_the_second(obj, f, *args, **kwargs):
        if str(f).endswith(os.path.join("checkpoint-4", "optimizer.pt")):  # torch's writer on a full device
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4160 vs 4054")
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_at_the_second)
    result = cli("llm", "--config", llm_config(tmp_path, max_steps=6, save_steps=2))
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.stderr
    run = tmp_path / "run"
    assert errors[0].startswith(f"error: no space left on the device writing checkpoint `checkpoint-4` in `{run}`: ")
    assert (
        "it needs about " in errors[0] and f"the last complete checkpoint, {run / 'checkpoint-2'}, is kept" in errors[0]
    )
    assert "--resume" in result.stderr
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-2"]  # the cut one is gone
    assert (run / "checkpoint-2" / ".autotrain-complete").is_file()
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "failed" and record["exit_code"] == 2 and "no space left" in record["error"]


def finished_copy(folder: Path) -> Path:
    """The tiny model as a finished run's folder (model, its config, a completed run.json)."""
    import shutil

    shutil.copytree(ASSETS / "tiny-llama", folder)
    config = yaml.safe_load(llm_config(folder.parent, "unused").read_text())
    (folder / "autotrain.yaml").write_text(yaml.safe_dump({**config, "project_name": "runs/tiny"}))
    (folder / "run.json").write_text(json.dumps({"status": "completed"}))
    return folder


@pytest.mark.parametrize("command", ["export", "predict"])
def test_a_truncated_weights_file_is_bad_input_naming_it(cli, tmp_path, command):
    run = finished_copy(tmp_path / "run")
    weights = run / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"text": "hello"}\n')
    args = ["-o", tmp_path / "out"] if command == "export" else ["-i", rows, "-o", tmp_path / "out.jsonl"]
    result = cli(command, run, *args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"{weights} is cut short or damaged" in errors[0], result.stderr
    assert "Traceback" not in result.output and "SafetensorError" not in result.output


def hold(code: str) -> subprocess.Popen:
    """A process that runs `code` (which takes a lock), prints `held`, and waits until its stdin closes."""
    process = subprocess.Popen(
        [sys.executable, "-c", f"import sys\n{code}\nprint('held', flush=True)\nsys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_export_to_the_same_output_is_refused(cli, tmp_path):
    run = finished_copy(tmp_path / "run")
    out = tmp_path / "out"
    take = "from pathlib import Path\nfrom autotrain.export.output import locked\n"
    other = hold(take + f"held = locked(Path({str(out)!r}))\nheld.__enter__()")
    try:
        result = cli("export", run, "-o", out)
    finally:
        other.communicate("")
    assert result.exit_code == 2, result.output
    assert f"error: another export to `{out}` is under way (pid {other.pid})" in result.stderr
    assert not out.exists()


def test_a_killed_predicts_partial_file_is_removed_by_the_next(tmp_path):
    from autotrain.inference.predict import jsonl_writer

    out = tmp_path / "out.jsonl"
    dead = dead_process()["pid"]
    stale = tmp_path / f".out.jsonl.{dead}-0123abcd.partial"
    stale.write_text('{"row": 0}\n')
    mine = tmp_path / ".out.jsonl.notours.partial"  # not a name predict makes: left alone
    mine.write_text("the user's\n")
    with jsonl_writer(out, rows=1) as write:
        write({"row": 0, "label": "a"})
    assert not stale.exists() and mine.read_text() == "the user's\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.jsonl.notours.partial", "out.jsonl"]


def test_predictions_on_a_full_disk_are_one_line_with_the_space_needed(tmp_path, monkeypatch):
    import builtins
    import errno

    from autotrain.errors import UserInputError
    from autotrain.inference.predict import jsonl_writer

    out = tmp_path / "out.jsonl"
    real_open = builtins.open

    class Full:
        def __init__(self, handle):
            self.handle, self.lines = handle, 0

        def write(self, text):
            self.lines += 1
            if self.lines > 2:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.handle.write(text)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    monkeypatch.setattr(
        builtins,
        "open",
        lambda f, *a, **k: Full(real_open(f, *a, **k)) if isinstance(f, int) else real_open(f, *a, **k),
    )
    with pytest.raises(UserInputError) as refused, jsonl_writer(out, rows=1000) as write:
        for row in range(1000):
            write({"row": row, "label": "positive", "score": 0.5})
    assert str(refused.value).startswith(f"no space left on the device writing `out.jsonl` in `{tmp_path}`: ")
    assert "it needs about 4" in str(refused.value)  # 1000 rows of about 45 bytes
    assert list(tmp_path.iterdir()) == []  # nothing half written is left


@pytest.fixture
def small_disk(tmp_path):
    """`small_disk(size)`: a folder on a tmpfs of `size` (e.g. "2m"), unmounted afterwards; skipped where
    mounting is not allowed (it needs root)."""
    mounted = []

    def make(size: str) -> Path:
        folder = tmp_path / f"disk-{len(mounted)}"
        folder.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip() or done.returncode}")
        mounted.append(folder)
        return folder

    yield make
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="mounts a tmpfs")
def test_a_device_that_fills_during_training_is_one_line_and_keeps_the_last_checkpoint(tmp_path, small_disk):
    disk = small_disk("2m")  # room for one checkpoint of the tiny model (1.2 MB), not two
    config = llm_config(disk, max_steps=4, save_steps=1)
    process = spawn("llm", "--config", config)
    out = process.communicate(timeout=300)[0]
    assert process.returncode == 2, out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in out, out
    assert errors[0].startswith(
        f"error: no space left on the device writing checkpoint `checkpoint-2` in `{disk / 'run'}`"
    )
    assert f"the last complete checkpoint, {disk / 'run' / 'checkpoint-1'}, is kept" in errors[0]
    assert sorted(p.name for p in (disk / "run").glob("checkpoint-*")) == ["checkpoint-1"]
    record = json.loads((disk / "run" / "run.json").read_text())
    assert record["status"] == "failed" and record["exit_code"] == 2 and "no space left" in record["error"]


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="mounts a tmpfs")
def test_an_export_onto_a_full_device_is_one_line_and_leaves_nothing(cli, tmp_path, small_disk):
    run = finished_copy(tmp_path / "run")
    disk = small_disk("64k")  # the f16 file of the tiny model takes about 190 KB
    result = cli("export", run, "-o", disk / "out")
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    assert errors[0].startswith(f"error: no space left on the device writing `out` in `{disk}`: it needs about ")
    assert [p.name for p in disk.iterdir()] == []  # no staging folder, nothing under `out`, no lock


@pytest.mark.slow
def test_an_export_started_while_another_writes_the_same_output_is_refused(tmp_path):
    run = finished_copy(tmp_path / "run")
    out = tmp_path / "out"
    first = spawn("export", run, "-o", out, slow="autotrain.export.output:publish=15", tmp_path=tmp_path)
    try:
        wait_for_line(first, "slow publish")  # written, checked, about to be renamed into place
        second = spawn("export", run, "-o", out)
        refused = second.communicate(timeout=120)[0]
        out_first = first.communicate(timeout=120)[0]
    finally:
        for process in (first, locals().get("second")):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert second.returncode == 2, refused
    assert f"error: another export to `{out}` is under way (pid {first.pid})" in refused
    assert first.returncode == 0, out_first
    assert len(list(out.glob("*.gguf"))) == 1
    assert not (tmp_path / ".out.lock").exists()  # the refused one left the lock alone, the first removed it


# --- SIGKILL at seeded random moments ---------------------------------------------------------------------

KILLED_STEPS = 8


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory) -> dict:
    """The weights of the run the killed ones are compared with, trained without a break."""
    from safetensors.torch import load_file

    tmp_path = tmp_path_factory.mktemp("unbroken")
    process = spawn("llm", "--config", llm_config(tmp_path, max_steps=KILLED_STEPS, save_steps=1))
    out = process.communicate(timeout=300)[0]
    assert process.returncode == 0, out
    return load_file(tmp_path / "run" / "model.safetensors")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_run_sigkilled_at_a_random_moment_resumes_to_the_unbroken_runs_weights(tmp_path, unbroken, seed):
    """Killed somewhere in steps 2 to 8 (a checkpoint every step, so often while one is written), then
    resumed: exactly max_steps trained, one line per step in metrics.jsonl, the weights of the unbroken run."""
    import random

    from safetensors.torch import load_file

    config = llm_config(tmp_path, max_steps=KILLED_STEPS, save_steps=1)
    process = spawn("llm", "--config", config)
    try:
        lines = wait_for_line(process, "step 2/")
        time.sleep(random.Random(seed).uniform(0.0, 3.0))
        process.kill()
        lines += process.communicate(timeout=30)[0].splitlines(keepends=True)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    run = tmp_path / "run"
    resumed = spawn("llm", "--config", config, "--resume")
    out = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, "".join(lines) + out
    assert json.loads((run / "trainer_state.json").read_text())["global_step"] == KILLED_STEPS
    assert max(int(p.name.split("-")[1]) for p in run.glob("checkpoint-*")) == KILLED_STEPS
    assert json.loads((run / "run.json").read_text())["status"] == "completed"
    logged = [json.loads(line) for line in (run / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in logged if "loss" in e] == list(range(1, KILLED_STEPS + 1))
    got = load_file(run / "model.safetensors")
    for name, tensor in unbroken.items():
        scale = tensor.abs().max().clamp_min(1e-12)
        assert ((got[name] - tensor).abs().max() / scale) <= 1e-5, name
