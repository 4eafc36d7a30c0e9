"""The app's Export action: the API that starts `autotrain export` on a finished run in the background and
lists the run's exports with their parity figures."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason='the app needs its extra: pip install -e ".[app]"')

from fastapi.testclient import TestClient  # noqa: E402
from test_export import make_run  # noqa: E402

from autotrain.app.server import create_app  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def runs(tmp_path) -> Path:
    folder = tmp_path / "runs"
    make_run(folder / "tiny")
    make_run(folder / "halfway", status="interrupted")
    return folder


@pytest.fixture
def client(runs) -> TestClient:
    return TestClient(create_app(runs, REPO_ROOT), base_url="http://127.0.0.1")


def test_bad_export_requests_are_refused_with_the_reason(client):
    assert client.get("/api/export/options").json()["merged_dtypes"] == ["f32", "f16", "bf16"]
    answer = client.post("/api/runs/tiny/export", json={"format": "onnx"})
    assert answer.status_code == 400 and answer.json()["error"].startswith("unknown format `onnx`")
    answer = client.post("/api/runs/tiny/export", json={"format": "gguf", "quant": "q2_k"})
    assert answer.status_code == 400 and "unknown quant `q2_k`" in answer.json()["error"]
    answer = client.post("/api/runs/halfway/export", json={"format": "gguf"})
    assert answer.status_code == 409 and "not finished (status: interrupted)" in answer.json()["error"]
    assert client.post("/api/runs/nothing/export", json={}).status_code == 404
    assert client.post("/api/runs/..%2F..%2Fetc/export", json={}).status_code in (400, 404)


def test_an_export_lists_its_parity_figures(client, runs):
    from autotrain.export.pipeline import ExportRequest, export_run

    export_run(ExportRequest(runs / "tiny", "gguf", "q8_0"), say=lambda message: None)
    state = client.get("/api/runs/tiny/export").json()
    assert state["running"] is False and len(state["exports"]) == 1
    export = state["exports"][0]
    assert (export["folder"], export["format"], export["quant"], export["passed"]) == (
        "export-gguf-q8_0",
        "gguf",
        "q8_0",
        True,
    )
    figures = export["readers"]["transformers"]
    assert figures["vs_trained"]["prompts_agreeing"] == figures["vs_trained"]["prompts"] == 8
    assert figures["vs_written_weights"]["max_logit_diff"] < 1e-3


@pytest.mark.slow
def test_the_export_runs_in_the_background_and_is_listed_when_done(client):
    started = client.post("/api/runs/tiny/export", json={"format": "ollama", "quant": "f16"})
    assert started.status_code == 200, started.text
    again = client.post("/api/runs/tiny/export", json={"format": "gguf"})
    assert again.status_code == 409 and "already running" in again.json()["error"]
    deadline = time.monotonic() + 300
    while (state := client.get("/api/runs/tiny/export").json())["running"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert state["exit_code"] == 0, state["log"]
    assert "ollama create tiny -f" in state["log"]
    assert [e["folder"] for e in state["exports"]] == ["export-ollama-f16"] and state["exports"][0]["passed"]


def test_a_run_of_another_task_is_offered_merged_only(client, runs):
    (runs / "ner").mkdir()
    (runs / "ner" / "autotrain.yaml").write_text("task: token-classification\nbase_model: b\n")
    (runs / "ner" / "run.json").write_text('{"status": "completed"}')
    assert client.get("/api/runs/ner/export").json()["formats"] == ["merged"]
    assert client.get("/api/runs/tiny/export").json()["formats"] == ["merged", "gguf", "ollama"]
    answer = client.post("/api/runs/ner/export", json={"format": "gguf"})
    assert answer.status_code == 400
    assert answer.json()["error"] == "run `ner` holds a token-classification model: it exports as `merged` only"
