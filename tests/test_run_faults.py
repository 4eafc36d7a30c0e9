"""Every way a run can die, and what it leaves: no rank outlives its launcher, the folder's lock is never free
while a rank lives, run.json says how the run really ended, a resume knows what it resumes, a full disk is
one line, and the final save can be repeated."""

from __future__ import annotations

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


def spawn(*args, env: dict | None = None) -> subprocess.Popen:
    clean = {k: v for k, v in os.environ.items() if k not in ("AUTOTRAIN_LAUNCHED", "AUTOTRAIN_PARENT", "RANK")}
    return subprocess.Popen(
        [sys.executable, "-m", "autotrain.cli.main", *map(str, args)],
        env={**clean, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", **(env or {})},
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
    finally:
        for pid in [launcher.pid, *locals().get("ranks", [])]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
