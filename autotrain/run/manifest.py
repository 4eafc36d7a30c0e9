"""`project_name/run.json`: what ran, on what, from which data, and how it ended."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from autotrain.config.interpolate import redact
from autotrain.config.load import LoadedConfig
from autotrain.training.plan import RunPlan

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


DATA_SUFFIXES = {".jsonl", ".json", ".csv", ".parquet", ".arrow", ".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp"}
MAX_FILES = 64
MAX_ENTRIES = 10_000


def data_files(path: Path) -> tuple[list[Path], bool]:
    """The data files under `path` worth fingerprinting, and whether the list was cut short.

    Only files a dataset is made of (by suffix), at most MAX_FILES, looking at no more than MAX_ENTRIES
    entries and never following links out of the folder: a misnamed `data.path` costs nothing.
    """
    if path.is_file():
        return ([path] if path.suffix.lower() in DATA_SUFFIXES else []), False
    found: list[Path] = []
    seen = 0
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            seen += 1
            if Path(name).suffix.lower() in DATA_SUFFIXES:
                found.append(Path(root) / name)
            if len(found) >= MAX_FILES or seen >= MAX_ENTRIES:
                return found, True
        seen += len(dirs)
    return found, False


def fingerprint(path: Path) -> dict:
    """Size and SHA-256 of a local dataset's files (see `data_files` for which)."""
    files, truncated = data_files(path)
    out = {}
    for file in files:
        digest = hashlib.sha256()
        with open(file, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        out[str(file)] = {"bytes": file.stat().st_size, "sha256": digest.hexdigest()}
    if truncated:
        out["..."] = f"only the first {len(files)} data files are listed"
    return out


class RunManifest:
    def __init__(self, loaded: LoadedConfig, plan: RunPlan, folder: Path, argv: list[str]):
        self.path = folder / "run.json"
        self.secrets = loaded.secrets
        config = loaded.redacted()
        data_path = Path(loaded.config.data.path).expanduser()
        self.data = {
            "status": "running",
            "command": argv,
            "config_sha256": hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest(),
            "plan": plan.record(),
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
        # Paths, the command line and fingerprints may hold a secret (`${HF_TOKEN}` in a path, `--set`).
        tmp.write_text(json.dumps(redact(self.data, self.secrets), indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.path)

    def finish(self, status: str, exit_code: int, last_checkpoint: str | None) -> None:
        self.data.update(status=status, exit_code=exit_code, ended=_now(), last_checkpoint=last_checkpoint)
        self.write()
