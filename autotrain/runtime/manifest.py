"""`project_name/run.json`: what ran, on what, from which data, and how it ended."""

from __future__ import annotations

import contextlib
import hashlib
import json
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from autotrain.config.load import LoadedConfig

PACKAGES = ("autotrain", "torch", "transformers", "trl", "peft", "accelerate", "datasets", "bitsandbytes")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    return out


def _hardware() -> dict:
    import torch

    info = {"cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(), "gpus": []}
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def _git_commit() -> str | None:
    """The commit of the checkout autotrain runs from, when it runs from one."""
    try:
        root = Path(__file__).resolve().parents[2]
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def fingerprint(path: Path) -> dict:
    """Size and SHA-256 of a local data file (files of a folder, up to 64 of them)."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())[:64]
    out = {}
    for file in files:
        digest = hashlib.sha256()
        with open(file, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        out[str(file)] = {"bytes": file.stat().st_size, "sha256": digest.hexdigest()}
    return out


class RunManifest:
    def __init__(self, loaded: LoadedConfig, folder: Path, argv: list[str]):
        self.path = folder / "run.json"
        config = loaded.redacted()
        data_path = Path(loaded.config.data.path)
        self.data = {
            "status": "running",
            "command": argv,
            "config_sha256": hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest(),
            "versions": _versions(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "hardware": _hardware(),
            "git_commit": _git_commit(),
            "data": fingerprint(data_path) if data_path.exists() else {"hub": loaded.config.data.path},
            "started": _now(),
            "ended": None,
            "exit_code": None,
            "last_checkpoint": None,
        }

    def write(self) -> None:
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.path)

    def finish(self, status: str, exit_code: int, last_checkpoint: str | None) -> None:
        self.data.update(status=status, exit_code=exit_code, ended=_now(), last_checkpoint=last_checkpoint)
        self.write()
