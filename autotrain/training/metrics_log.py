"""`project_name/logs/metrics.jsonl`: one JSON line per Trainer log, for live charts (`autotrain app`).

A line is written as soon as the Trainer logs, so a reader polling the file sees the run move without
waiting for a checkpoint's `trainer_state.json`. Each line carries the step, the wall time it was written
and what the progress display shows (tokens/s, seconds left); non-finite numbers become null (valid JSON).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from transformers import TrainerCallback

METRICS_FILE = Path("logs") / "metrics.jsonl"


def _finite(value):
    return None if isinstance(value, float) and not math.isfinite(value) else value


class MetricsLog(TrainerCallback):
    """Appends each `on_log` dict (with step, max_steps and time) to `folder/logs/metrics.jsonl`, main process only."""

    def __init__(self, folder: str | Path, trainer=None):
        self.path = Path(folder) / METRICS_FILE
        self.trainer = trainer  # its `tokens_seen` (counted by the loss hooks) gives tokens/s
        self.start = 0.0
        self.first_step = 0
        self.first_tokens = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.time()
        self.first_step = state.global_step
        self.first_tokens = int(getattr(self.trainer, "tokens_seen", 0))

    def _rates(self, state) -> dict:
        elapsed = max(time.time() - self.start, 1e-9)
        done = state.global_step - self.first_step
        rates = {"eta_seconds": (state.max_steps - state.global_step) * elapsed / done if done else None}
        tokens = int(getattr(self.trainer, "tokens_seen", 0)) - self.first_tokens
        if tokens:
            rates["tokens_per_second"] = tokens / elapsed
        return rates

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        record = {"step": state.global_step, "max_steps": state.max_steps, **logs, **self._rates(state)}
        record = {k: _finite(v) for k, v in record.items()}
        record["time"] = time.time()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, default=str) + "\n")
