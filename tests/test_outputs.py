"""Project-folder outputs that need no training: the hub upload and the model card."""

from __future__ import annotations

from pathlib import Path

import yaml

from autotrain.config.load import load_config
from autotrain.run import outputs


def loaded_config(tmp_path: Path, **hub):
    path = tmp_path / "c.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "task": "llm",
                "base_model": "tiny",
                "project_name": str(tmp_path / "run"),
                "data": {"path": "d.jsonl"},
                "hub": {"push_to_hub": True, "repo_id": "me/model", "token": "${HF_TOKEN}", **hub},
            }
        )
    )
    return load_config(path, environ={"HF_TOKEN": "hf_secret_for_test"})


def test_push_uploads_the_project_without_checkpoints(tmp_path, monkeypatch):
    calls = {}

    class FakeApi:
        def __init__(self, token=None):
            calls["token"] = token

        def create_repo(self, repo_id, private, exist_ok):
            calls["create"] = (repo_id, private, exist_ok)
            return f"https://hub.example/{repo_id}"

        def upload_folder(self, folder_path, repo_id, ignore_patterns, commit_message):
            calls["upload"] = (folder_path, repo_id, ignore_patterns)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    loaded = loaded_config(tmp_path)
    assert outputs.push_to_hub(loaded) == "https://hub.example/me/model"
    assert calls["token"] == "hf_secret_for_test"
    assert calls["create"] == ("me/model", True, True)
    folder, repo, ignored = calls["upload"]
    assert folder == str(tmp_path / "run") and repo == "me/model"
    assert "checkpoint-*" in ignored and "logs/**" in ignored and "run.json" in ignored


def test_model_card_and_saved_config_hide_the_token(tmp_path):
    loaded = loaded_config(tmp_path)
    folder = tmp_path / "run"
    folder.mkdir()
    outputs.save_config(loaded, folder)
    outputs.write_model_card(loaded, folder, {"train_loss": 1.25})
    for name in ("autotrain.yaml", "README.md"):
        assert "hf_secret_for_test" not in (folder / name).read_text()
    assert "token: '***'" in (folder / "autotrain.yaml").read_text()
    assert "| train_loss | 1.25 |" in (folder / "README.md").read_text()
