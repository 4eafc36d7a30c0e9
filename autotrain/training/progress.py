"""Progress display: a rich bar (step, loss, lr, tokens/s, ETA) on a terminal; plain log lines otherwise."""

from __future__ import annotations

import math
import sys
import time

from transformers import TrainerCallback


def _fmt_eta(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressCallback(TrainerCallback):
    """Draws progress on the main process only."""

    def __init__(self, stream=None, rich: bool | None = None):
        self.stream = stream or sys.stdout
        self.rich = self.stream.isatty() if rich is None else rich
        self.progress = None
        self.task = None
        self.start = 0.0
        self.first_step = 0
        self.first_tokens = 0
        self.first_samples = 0
        self.last = {"loss": float("nan"), "lr": float("nan")}
        self.trainer = None  # set by the runner; its `tokens_seen` feeds tokens/s
        self.ended = False  # after training, results are shown by whoever asks for them (a table), not here

    def _rate(self, state) -> tuple[str, float]:
        """Throughput as text (tokens/s, or samples/s for inputs without tokens) and seconds left."""
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        tokens = int(getattr(self.trainer, "tokens_seen", 0) - self.first_tokens)
        samples = getattr(self.trainer, "samples_seen", 0) - self.first_samples
        done = state.global_step - self.first_step
        eta = (state.max_steps - state.global_step) * elapsed / done if done else float("nan")
        rate = f"tokens/s {tokens / elapsed:,.0f}" if tokens else f"samples/s {samples / elapsed:,.1f}"
        return rate, eta

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        self.start = time.perf_counter()
        self.first_step = state.global_step
        self.first_tokens = int(getattr(self.trainer, "tokens_seen", 0))
        self.first_samples = getattr(self.trainer, "samples_seen", 0)
        if self.rich:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}{task.fields[reward]}  lr {task.fields[lr]}  {task.fields[rate]}"),
                TimeRemainingColumn(),
                transient=False,
            )
            self.progress.start()
            self.task = self.progress.add_task(
                "train", total=state.max_steps, completed=state.global_step, loss="-", lr="-", rate="-", reward=""
            )
        else:
            print(f"training: {state.max_steps} steps", file=self.stream, flush=True)

    def on_step_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or self.ended:
            return
        if "loss" in logs:
            self.last["loss"] = logs["loss"]
        if "learning_rate" in logs:
            self.last["lr"] = logs["learning_rate"]
        if "reward" in logs:  # GRPO: the mean reward of the step's completions says more than its loss
            self.last["reward"] = logs["reward"]
        rate, eta = self._rate(state)
        loss, lr = self.last["loss"], self.last["lr"]
        reward = f"  reward {_number(self.last['reward'], '.3f')}" if "reward" in self.last else ""
        if self.progress is not None:
            self.progress.update(
                self.task, completed=state.global_step, loss=f"{loss:.4f}", lr=f"{lr:.2e}", rate=rate, reward=reward
            )
            evals = {k: v for k, v in logs.items() if k.startswith("eval_") and isinstance(v, (int, float))}
            if evals:
                self.progress.console.print("eval " + "  ".join(f"{k[5:]} {v:.4g}" for k, v in evals.items()))
            return
        if "loss" in logs:
            print(
                f"step {state.global_step}/{state.max_steps}  loss {loss:.4f}{reward}  lr {lr:.3e}  "
                f"{rate}  eta {_fmt_eta(eta)}",
                file=self.stream,
                flush=True,
            )
        evals = {k: v for k, v in logs.items() if k.startswith("eval_") and isinstance(v, (int, float))}
        if evals:
            print(
                f"eval step {state.global_step}  " + "  ".join(f"{k[5:]} {v:.4g}" for k, v in evals.items()),
                file=self.stream,
                flush=True,
            )

    def on_train_end(self, args, state, control, **kwargs):
        self.ended = True
        self.close()

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def _number(value, spec: str) -> str:
    """A logged value as text; a mean over nothing is logged as None (or NaN), shown as `n/a`."""
    return format(value, spec) if isinstance(value, (int, float)) and math.isfinite(value) else "n/a"
