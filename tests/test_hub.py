"""A config naming hub repositories when the hub cannot be reached: one clear line after one attempt, before
anything downloads (transformers' and datasets' downloads retry for most of a minute), for a run and for
`--dry-run`; the local cache instead under HF_HUB_OFFLINE=1."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from autotrain.training.hub import hub_id

REPO = Path(__file__).resolve().parents[1]
SFT = REPO / "configs" / "llm" / "sft.yml"  # Qwen/Qwen2.5-0.5B-Instruct on HuggingFaceH4/no_robots
CPU = ["--set", "log=none", "--set", "peft.quantization=null"]
UNREACHABLE = "http://127.0.0.1:9"  # the discard port: refused at once, as a hub behind no network


def autotrain(*args, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """`autotrain ARGS` in a fresh process (the hub endpoint is read at import)."""
    full_env = {k: v for k, v in os.environ.items() if k != "AUTOTRAIN_SKIP_HUB_CHECK"}
    full_env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", **env)
    return subprocess.run(
        [sys.executable, "-m", "autotrain.cli.main", *map(str, args)],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,  # a guard against a hang: the answer comes after one refused connection
    )


@pytest.fixture
def dead_hub():
    """A hub address that reads each request and closes the connection unanswered (as a hub behind a broken
    proxy would): (url, the paths asked, in order)."""
    server = socket.create_server(("127.0.0.1", 0))
    asked: list[str] = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed: the test is over
                return
            with conn:
                conn.settimeout(10)
                with contextlib.suppress(OSError, IndexError):
                    asked.append(conn.recv(65536).decode("latin-1").split(" ")[1])  # GET /path HTTP/1.1

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", asked
    server.close()


def test_what_counts_as_a_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local-model").mkdir()
    assert hub_id("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert hub_id("gpt2") == "gpt2"
    for local in ("local-model", "./x", "/abs/path", "~/m", "data/train.jsonl", "model.gguf", "a/b/c", None):
        assert hub_id(local) is None, local


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_an_unreachable_hub_is_one_clear_line_after_one_attempt(tmp_path, dry_run, dead_hub):
    url, asked = dead_hub
    args = ["llm", "--config", SFT, *CPU, "--set", f"project_name={tmp_path / 'run'}"]
    done = autotrain(*args, *(["--dry-run"] if dry_run else []), env={"HF_ENDPOINT": url}, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    # a CUDA build of torch on a machine without a GPU adds its note first; nothing else may come
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith("note: no GPU is visible")]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: cannot reach the Hugging Face Hub for base_model `Qwen/Qwen2.5-0.5B-Instruct`")
    assert "data.path `HuggingFaceH4/no_robots`" in lines[0] and "HF_HUB_OFFLINE=1" in lines[0]
    assert "local path" in lines[0]
    # the hub asked once, about the first repository: nothing downloaded (nor retried)
    repositories = [path for path in asked if "Qwen" in path or "no_robots" in path]
    assert len(repositories) == 1 and repositories[0].startswith("/api/models/Qwen/Qwen2.5-0.5B-Instruct"), asked
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # two dry runs in fresh processes (~10 s on two cores)
def test_offline_mode_looks_in_the_cache(tmp_path):
    """With HF_HUB_OFFLINE=1 nothing is asked of the network: what is not cached is named, what is passes."""
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": UNREACHABLE}
    done = autotrain("llm", "--config", SFT, *CPU, "--dry-run", env=env, cwd=tmp_path)
    assert done.returncode == 2
    errors = done.stderr.strip().splitlines()
    assert len(errors) == 2 and all("is not in the local cache and HF_HUB_OFFLINE=1" in e for e in errors), errors
    # A cached model (as huggingface_hub lays it out) and a dataset `datasets` prepared before.
    snapshot = tmp_path / "hf" / "hub" / "models--Qwen--Qwen2.5-0.5B-Instruct" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("abc")
    (tmp_path / "hf" / "datasets" / "HuggingFaceH4___no_robots").mkdir(parents=True)
    done = autotrain("llm", "--config", SFT, *CPU, "--dry-run", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr


class _FakeHub(http.server.BaseHTTPRequestHandler):
    """Answers /api/models/ID like the hub: 404 RepoNotFound for `me/missing`, the repository otherwise."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        repo = self.path.split("?")[0].removeprefix("/api/models/").removeprefix("/api/datasets/")
        if repo.startswith("me/missing"):
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound")
            self.send_header("Content-Type", "application/json")
            body = b'{"error": "Repository not found"}'
        else:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            body = json.dumps({"id": repo, "sha": "abc", "siblings": []}).encode()
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_hub():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.slow  # two dry runs in fresh processes (~10 s on two cores)
def test_a_repository_the_hub_does_not_have_is_named(tmp_path, fake_hub):
    env = {"HF_ENDPOINT": fake_hub, "HF_HOME": str(tmp_path / "hf")}
    base = ["llm", "--config", SFT, *CPU, "--dry-run"]
    done = autotrain(*base, "--set", "base_model=me/missing-model", env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "error: base_model `me/missing-model`: no such model on the Hugging Face Hub (check the name; a private "
        "one needs `hub.token` or `hf auth login`)"
    )
    done = autotrain(*base, env=env, cwd=tmp_path)  # both there
    assert done.returncode == 0, done.stderr
