"""The app's memory estimate and Data tab: the same answers as the dry run and `--preview`, never a 500."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason='the app needs its extra: pip install -e ".[app]"')

from fastapi.testclient import TestClient  # noqa: E402

from autotrain.app.server import create_app  # noqa: E402

ROOT = Path(__file__).resolve().parent
CONFIG = f"""task: llm
trainer: sft
base_model: {ROOT / "assets" / "tiny-llama"}
project_name: {{runs}}/fit
log: none
data:
  path: {ROOT / "assets" / "data" / "chat.jsonl"}
training_args:
  batch_size: 4
  max_length: 64
  mixed_precision: "no"
"""


@pytest.fixture
def client(tmp_path) -> TestClient:
    return TestClient(create_app(tmp_path / "runs", ROOT.parent), base_url="http://127.0.0.1")


def test_estimate_beside_the_config(client, tmp_path):
    response = client.post("/api/estimate", content=CONFIG.format(runs=tmp_path))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["memory"]["bytes_per_device"] > 0 and body["memory"]["parts"]["optimizer state"] > 0
    assert body["lines"][0].startswith("memory estimate: ")


def test_data_tab_preview(client, tmp_path):
    response = client.post("/api/preview?count=2", content=CONFIG.format(runs=tmp_path))
    assert response.status_code == 200, response.text
    record = response.json()
    assert record["kind"] == "tokens" and len(record["examples"]) == 2
    assert "what color is the grape?" in "".join(text for text, _ in record["examples"][0]["segments"])
    assert record["summary"]["rows"] == 128


@pytest.mark.parametrize(
    ("text", "status"),
    [("task: llm\nbase_model: [", 400), (CONFIG.replace("chat.jsonl", "missing.jsonl"), 400)],
    ids=["bad-yaml", "missing-data"],
)
def test_bad_input_is_a_clear_error(client, tmp_path, text, status):
    response = client.post("/api/preview", content=text.format(runs=tmp_path))
    assert response.status_code == status and "error" in response.json()
