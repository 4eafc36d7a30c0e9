"""What a run folder says about its run: status, metrics, progress, log tail and files (read only)."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

# Written by autotrain.training.metrics_log (not imported here: it pulls in transformers).
METRICS_FILE = Path("logs") / "metrics.jsonl"
APP_LOG = Path("logs") / "app.log"
APP_STATE = Path("logs") / "app.json"
# Written by `autotrain evaluate --benchmark` (autotrain.inference.benchmark_report).
BENCHMARKS_FILE = "benchmarks.json"
BENCHMARK_FIELDS = ("task", "metric", "base", "base_stderr", "trained", "trained_stderr", "difference")
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
MAX_FILES = 500


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def manifest(folder: Path) -> dict:
    """`run.json` as it stands, a `running` run whose process is gone shown as `died` (with `how`)."""
    from autotrain.training.folder import run_record

    return run_record(folder)


def manifest_status(folder: Path) -> str | None:
    """`run.json`'s status (running, completed, interrupted, failed, diverged, bad input, died)."""
    status = manifest(folder).get("status")
    return status if isinstance(status, str) else None


def task(folder: Path) -> str | None:
    """The task of a finished run, from the `task:` line of the config it saved (no YAML parse needed)."""
    try:
        with open(folder / "autotrain.yaml", encoding="utf-8") as handle:
            for line in itertools.islice(handle, 200):
                if line.startswith("task:"):
                    return line.split(":", 1)[1].split("#")[0].strip().strip("'\"") or None
    except OSError:
        pass
    return None


def is_run(folder: Path) -> bool:
    markers = ("run.json", "autotrain.yaml", "trainer_state.json", str(APP_LOG), str(METRICS_FILE))
    return any((folder / m).exists() for m in markers) or any(folder.glob("checkpoint-*"))


def _state_history(folder: Path) -> list[dict]:
    """log_history of the final trainer_state.json, else of the newest checkpoint's."""
    candidates = [folder / "trainer_state.json"]
    checkpoints = [p for p in folder.glob("checkpoint-*") if _CHECKPOINT.match(p.name)]
    checkpoints.sort(key=lambda p: int(_CHECKPOINT.match(p.name).group(1)), reverse=True)
    candidates += [p / "trainer_state.json" for p in checkpoints]
    for path in candidates:
        history = read_json(path).get("log_history")
        if isinstance(history, list):
            return [e for e in history if isinstance(e, dict)]
    return []


def records(folder: Path) -> list[dict]:
    """Every logged metrics dict with its step: the live JSONL log, else trainer_state.json's history."""
    path = folder / METRICS_FILE
    if not path.is_file():
        return _state_history(folder)
    out = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line being written right now
            if isinstance(record, dict):
                out.append(record)
    return out


def progress(history: list[dict]) -> dict:
    """step, max_steps, loss, lr, tokens/s and seconds left, from the newest records that have them."""
    out: dict = {"step": 0, "max_steps": None, "loss": None, "lr": None, "tokens_per_second": None, "eta_seconds": None}
    keys = {"loss": "loss", "lr": "learning_rate", "tokens_per_second": "tokens_per_second"}
    for record in history:
        out["step"] = record.get("step", out["step"])
        out["max_steps"] = record.get("max_steps", out["max_steps"])
        out["eta_seconds"] = record.get("eta_seconds", out["eta_seconds"])
        for name, key in keys.items():
            if isinstance(record.get(key), (int, float)):
                out[name] = record[key]
    return out


def log_tail(folder: Path, lines: int = 40, max_bytes: int = 64 * 1024) -> str:
    """The last lines of `logs/app.log` (what the run printed)."""
    path = folder / APP_LOG
    if not path.is_file():
        return ""
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - max_bytes))
        text = handle.read().decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def files(folder: Path) -> list[dict]:
    """The run's files (relative path and size), checkpoints' contents summarised by their folder."""
    out = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if len(out) >= MAX_FILES or rel.parts[0] == ".staging" or path.is_symlink():
            continue
        if _CHECKPOINT.match(rel.parts[0]) and len(rel.parts) > 1:
            continue
        if path.is_dir() and not _CHECKPOINT.match(rel.parts[0]):
            continue
        size = path.stat().st_size if path.is_file() else None
        out.append({"path": rel.as_posix(), "size": size, "folder": path.is_dir()})
    return out


def benchmarks(folder: Path) -> dict | None:
    """The run's benchmark table (base model, trained model, difference), or None before any."""
    data = read_json(folder / BENCHMARKS_FILE)
    rows = data.get("rows")
    if not isinstance(rows, list) or not rows:
        return None
    shown = [
        {key: row.get(key) for key in (*BENCHMARK_FIELDS, "difference_stderr")} for row in rows if isinstance(row, dict)
    ]
    return {"base_model": data.get("base_model"), "rows": shown}
