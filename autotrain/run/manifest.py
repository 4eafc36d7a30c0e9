"""`project_name/run.json`: what ran, on what, from which data, by which process, and how it ended.

Written atomically (a temporary file renamed over it). The rank that trains writes it when training starts
and when it ends; the parent that launched the ranks settles a record they left `running` (a rank killed);
a record still `running` whose process is gone reads as `died` (training/folder.py). A resume that fails
before it trained a step further leaves the record it found, noting the failed attempt.
"""

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
from autotrain.run.fingerprint import data_fingerprint, differences, fingerprint
from autotrain.training.folder import write_record
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


# A resume ending so, without a step trained past the checkpoint it resumed, keeps the record it found.
FAILED = ("failed", "bad input", "diverged")
_SUMMARY = ("status", "started", "ended", "exit_code", "how", "error", "last_checkpoint")


def settle(folder: Path, exit_code: int, how: str | None) -> bool:
    """After the ranks ended: the record they left `running` (this process launched them) gets how the run
    ended; True if it needed it."""
    from autotrain.training.folder import EXIT_STATUS

    path = folder / "run.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    process = data.get("process") if isinstance(data, dict) else None
    if data.get("status") != "running" or not isinstance(process, dict) or process.get("pid") != os.getpid():
        return False
    data.update(status=EXIT_STATUS.get(exit_code, "failed"), exit_code=exit_code, ended=_now())
    data["how"] = how or f"a training process ended before recording the end of the run (exit code {exit_code})"
    write_record(path, data)
    return True


class RunManifest:
    def __init__(
        self,
        loaded: LoadedConfig,
        plan: RunPlan,
        folder: Path,
        argv: list[str],
        resumed_from: str | None = None,
        process: dict | None = None,
    ):
        from autotrain.training.folder import run_record
        from autotrain.training.lifetime import identity

        self.path = folder / "run.json"
        self.secrets = loaded.secrets
        config = loaded.redacted()
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
            "data": data_fingerprint(loaded.config),
            "fingerprint": fingerprint(loaded),  # with `data`: what --resume compares (run/fingerprint.py)
            "process": process or identity(),  # the run's own: the launcher of its ranks, or the one that trains
            "started": _now(),
            "ended": None,
            "exit_code": None,
            "last_checkpoint": None,
        }
        self.resumed_from = resumed_from
        self.previous = (run_record(folder) or None) if resumed_from else None
        if resumed_from:
            self.data["resumed_from"] = resumed_from
            earlier = self.previous or {}
            self.data["attempts"] = [*earlier.get("attempts", []), {k: earlier.get(k) for k in _SUMMARY}]
            if earlier.get("fingerprint"):  # what the resume took on that differs (--accept-changes)
                changed = differences(
                    earlier["fingerprint"], earlier.get("data"), self.data["fingerprint"], self.data["data"]
                )
                self.data["changes"] = [d.record() for d in changed]

    def write(self) -> None:
        # Paths, the command line and fingerprints may hold a secret (`${HF_TOKEN}` in a path, `--set`).
        write_record(self.path, redact(self.data, self.secrets))

    def finish(
        self, status: str, exit_code: int, last_checkpoint: str | None, how: str | None = None, error: str | None = None
    ) -> None:
        ended = {"status": status, "exit_code": exit_code, "ended": _now()}
        ended.update({k: v for k, v in (("how", how), ("error", error)) if v})
        if self._keeps_previous(status, last_checkpoint):
            failed = {"started": self.data["started"], **ended}
            self.data = {**self.previous, "failed_resumes": [*self.previous.get("failed_resumes", []), failed]}
        else:
            self.data.update(ended, last_checkpoint=last_checkpoint)
        self.write()

    def _keeps_previous(self, status: str, last_checkpoint: str | None) -> bool:
        """A resume that failed before it saved a checkpoint past the one it resumed from changed nothing."""
        if self.previous is None or status not in FAILED:
            return False
        return last_checkpoint is None or Path(last_checkpoint).resolve() == Path(self.resumed_from).resolve()
