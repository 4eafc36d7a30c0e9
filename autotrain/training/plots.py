"""Pictures of a finished run: `plots/loss.png` (train/eval loss and the lr schedule per step) and, for
classifiers, `plots/metrics.png` (eval metrics per evaluation).

matplotlib is a dependency, imported here, inside the function, so the CLI stays fast. An environment that
lacks it all the same (installed with --no-deps) skips the plots with one notice line rather than failing
the finished run.
"""

from __future__ import annotations

from pathlib import Path

# Keys of an eval log that are not quality metrics.
_NOT_METRICS = {"eval_loss", "eval_runtime", "eval_samples_per_second", "eval_steps_per_second", "epoch", "step"}


def series(log_history: list[dict], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of every log entry that has a number under `key`."""
    points = [(e["step"], e[key]) for e in log_history if isinstance(e.get(key), (int, float)) and "step" in e]
    return [p[0] for p in points], [p[1] for p in points]


def eval_metric_names(log_history: list[dict]) -> list[str]:
    names = {k for e in log_history for k, v in e.items() if k.startswith("eval_") and isinstance(v, (int, float))}
    return sorted(names - _NOT_METRICS)


def write_plots(folder: str | Path, log_history: list[dict], task: str) -> list[Path]:
    """Write the run's plots into `folder/plots/`; return the files written (none without matplotlib)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        from autotrain.errors import eprint
        from autotrain.hints import install_hint

        hint = install_hint("matplotlib")
        eprint(f"note: plots skipped: matplotlib is not installed (a dependency of autotrain: {hint})")
        return []
    out = Path(folder) / "plots"
    written = []
    figure = _loss_figure(Figure, log_history)
    if figure is not None:
        written.append(_save(FigureCanvasAgg, figure, out / "loss.png"))
    if task != "llm":
        figure = _metrics_figure(Figure, log_history)
        if figure is not None:
            written.append(_save(FigureCanvasAgg, figure, out / "metrics.png"))
    return written


def _save(canvas_class, figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    canvas_class(figure).print_png(str(path))
    return path


def _loss_figure(figure_class, log_history: list[dict]):
    train, evals = series(log_history, "loss"), series(log_history, "eval_loss")
    lr = series(log_history, "learning_rate")
    if not train[0] and not evals[0]:
        return None
    figure = figure_class(figsize=(10, 4), dpi=100)
    loss_ax, lr_ax = figure.subplots(1, 2)
    if train[0]:
        loss_ax.plot(*train, label="train loss", color="#1f77b4")
    if evals[0]:
        loss_ax.plot(*evals, label="eval loss", color="#d62728", marker="o")
    loss_ax.set(title="loss", xlabel="step", ylabel="loss")
    loss_ax.legend()
    loss_ax.grid(alpha=0.3)
    lr_ax.plot(*lr, color="#2ca02c")
    lr_ax.set(title="learning rate", xlabel="step", ylabel="lr")
    lr_ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    lr_ax.grid(alpha=0.3)
    return figure


def _metrics_figure(figure_class, log_history: list[dict]):
    names = eval_metric_names(log_history)
    if not names:
        return None
    figure = figure_class(figsize=(6, 4), dpi=100)
    ax = figure.subplots()
    for name in names:
        ax.plot(*series(log_history, name), label=name[5:], marker="o")
    ax.set(title="eval metrics", xlabel="step", ylabel="value")
    ax.legend()
    ax.grid(alpha=0.3)
    return figure
