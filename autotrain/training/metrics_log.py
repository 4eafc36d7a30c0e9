"""`project_name/logs/metrics.jsonl`: one JSON line per Trainer log, for live charts (`autotrain app`).

A line is written as soon as the Trainer logs, so a reader polling the file sees the run move without
waiting for a checkpoint's `trainer_state.json`. Each line carries the step, the wall time it was written
and what the progress display shows (tokens/s, seconds left); non-finite numbers become null (valid JSON).
A resumed run first drops the lines of the steps after its checkpoint (the run that logged them died before
saving them, and they are trained again), so no step appears twice.
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


def _step_of(line: str) -> float:
    """The step a line was logged at (a line cut short by a crash counts as after every step)."""
    try:
        step = json.loads(line).get("step")
    except (ValueError, AttributeError):
        return math.inf
    return step if isinstance(step, (int, float)) else math.inf


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
        if state.is_world_process_zero and state.global_step > 0:
            self._forget_after(state.global_step)

    def _forget_after(self, step: int) -> None:
        """Keep the lines of steps up to `step` (the resumed checkpoint's); rewritten atomically."""
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines(keepends=True)
        except OSError:
            return
        kept = [line for line in lines if _step_of(line) <= step]
        if len(kept) == len(lines):
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(kept), encoding="utf-8")
        tmp.replace(self.path)

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
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record, default=str) + "\n")
        except OSError as exc:
            from autotrain.training.disk import is_disk_full, no_space

            if is_disk_full(exc):
                raise no_space(self.path.parent, self.path.name, None) from exc
            raise
