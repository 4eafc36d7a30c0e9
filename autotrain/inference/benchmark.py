"""`autotrain evaluate RUN --benchmark TASKS`: lm-evaluation-harness tasks on a finished LLM run and on the
base model it was trained from, with the same settings, side by side (autotrain.inference.benchmark_report
compares and writes them).

lm-evaluation-harness is an optional extra (`pip install 'autotrain[benchmark]'`). Tasks are its names (tasks,
groups, tags) or paths to task YAML files of your own, read as lm-eval reads them (a `data_files` path is
relative to the current folder). Both models are wrapped in lm-eval's own `HFLM`, with the run's tokenizer,
and their requests are sent in chunks so that a progress bar can say how far along it is.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from autotrain.config.benchmark import limit_argument
from autotrain.config.suggest import nearest
from autotrain.errors import UserInputError, debug_enabled
from autotrain.hints import install_hint
from autotrain.inference.load import FinishedRun

CHUNK_BATCHES = 8  # requests sent to the model per progress update: this many batches
LOCAL_SUFFIXES = (".yaml", ".yml")


@dataclass
class BenchmarkSettings:
    tasks: list[str]
    limit: float | None = None  # a count per task, or a fraction below 1
    num_fewshot: int | None = None
    batch_size: int = 8
    chat_template: bool = False
    extra: dict = field(default_factory=dict)  # recorded beside the results (lm-eval's version, the device)

    def asked(self) -> dict:
        """The tasks and settings as asked for."""
        return {
            "tasks": self.tasks,
            "limit": limit_argument(self.limit),
            "num_fewshot": self.num_fewshot,
            "batch_size": self.batch_size,
            "chat_template": self.chat_template,
        }

    def record(self) -> dict:
        """What each result row records of how it was made."""
        return {**{k: v for k, v in self.asked().items() if k != "tasks"}, **self.extra}


def require_harness() -> None:
    """The extra is installed, or one line saying how to install it (exit 2)."""
    try:
        import lm_eval  # noqa: F401 - light: its package imports no model code
    except ImportError as exc:
        raise UserInputError(
            f"benchmarks need lm-evaluation-harness, an optional extra: {install_hint(extra='benchmark')} ({exc})"
        ) from None


def split_tasks(values: list[str]) -> list[str]:
    """`--benchmark a,b --benchmark c` -> [a, b, c], each once, in order."""
    names = [part.strip() for value in values for part in value.split(",")]
    if not any(names) or not all(names):
        raise UserInputError("--benchmark: give task names (or task YAML files), separated by commas")
    return list(dict.fromkeys(names))


def task_manager(tasks: list[str]):
    """lm-eval's task index, with its own tasks only when a task is named (indexing them takes seconds), and
    every task checked: a name it does not know or a YAML file that is not there is one line (exit 2)."""
    quiet_harness()
    from lm_eval.tasks import TaskManager

    names = [t for t in tasks if not t.endswith(LOCAL_SUFFIXES)]
    for path in (Path(t).expanduser() for t in tasks if t.endswith(LOCAL_SUFFIXES)):
        if not path.is_file():
            raise UserInputError(f"benchmark task file `{path}` does not exist")
    manager = TaskManager(include_defaults=bool(names))
    known = set(manager.all_tasks)
    for name in names:
        if name not in known:
            match = nearest(name, known)
            hint = f" (did you mean `{match}`?)" if match else ""
            raise UserInputError(
                f"benchmark task `{name}` is not an lm-evaluation-harness task, group or tag{hint}; "
                "`lm-eval ls tasks` lists them, or give the path of a task YAML file"
            )
    return manager


def quiet_harness() -> None:
    """lm-eval's own log lines (one per task and setting) hide the progress bar; AUTOTRAIN_DEBUG=1 keeps them."""
    if not debug_enabled():
        logging.getLogger("lm_eval").setLevel(logging.ERROR)


def load_tasks(manager, tasks: list[str]) -> None:
    """Load every task (and its data) once before any model: a task whose data cannot be read (the hub out of
    reach, a bad YAML) fails here, in seconds, as one line."""
    try:
        manager.load(tasks)
    except Exception as exc:  # noqa: BLE001 - lm-eval and datasets raise many kinds; the message is what counts
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserInputError(f"cannot load the benchmark tasks {', '.join(tasks)}: {first}") from None


def evaluate_model(run: FinishedRun, manager, settings: BenchmarkSettings, label: str) -> dict:
    """lm-eval's results for one model (`results`, `samples`, `n-samples`, `higher_is_better`, `configs`)."""
    import lm_eval

    model = _lm_class()(pretrained=run.model, tokenizer=run.processor, batch_size=settings.batch_size, max_length=None)
    model.progress_label = label
    try:
        return lm_eval.simple_evaluate(
            model=model,
            tasks=settings.tasks,
            task_manager=manager,
            limit=limit_argument(settings.limit),
            num_fewshot=settings.num_fewshot,
            apply_chat_template=settings.chat_template,
            log_samples=True,  # the per-example scores pair the two models' results
            bootstrap_iters=1000,
        )
    except Exception as exc:  # noqa: BLE001 - a task the model cannot run (a context longer than it takes, ...)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserInputError(f"benchmark on the {label}: lm-evaluation-harness failed: {first}") from None


def _lm_class():
    """lm-eval's HFLM whose requests go to the model in chunks, each advancing a progress bar with an ETA."""
    from lm_eval.models.huggingface import HFLM

    from autotrain.inference.predict import progress_bar

    class ProgressLM(HFLM):
        progress_label = "model"

        def loglikelihood(self, requests, disable_tqdm: bool = False):
            return self._chunked(super().loglikelihood, requests, "scoring answers")

        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
            return self._chunked(super().loglikelihood_rolling, requests, "scoring texts")

        def generate_until(self, requests, disable_tqdm: bool = False):
            return self._chunked(super().generate_until, requests, "generating")

        def _chunked(self, method, requests, what: str) -> list:
            size = max(1, int(self.batch_size) * CHUNK_BATCHES)
            out: list = []
            with progress_bar(len(requests), f"{self.progress_label}: {what}") as advance:
                for start in range(0, len(requests), size):
                    part = requests[start : start + size]
                    out += method(part, disable_tqdm=True)
                    advance(len(part))
            return out

    return ProgressLM


def run_benchmark(
    run_dir: Path,
    settings: BenchmarkSettings,
    device: str = "auto",
    output: Path | None = None,
    force: bool = False,
    as_json: bool = False,
) -> dict:
    """The command: check everything cheap (the run, the extra, the task names, their data), then evaluate the
    base model and the trained one, compare, write `benchmarks.json` and the model card's section, print."""
    import gc
    import json
    import sys

    from autotrain.inference import benchmark_report as report
    from autotrain.inference.load import load_base, load_run, pick_device, read_config
    from autotrain.inference.predict import check_output

    check_output(output, force)
    cfg = read_config(run_dir)
    if cfg.task != "llm":
        raise UserInputError(f"--benchmark takes LLM runs; `{run_dir}` holds a {cfg.task} run")
    require_harness()
    manager = task_manager(settings.tasks)
    load_tasks(manager, settings.tasks)
    import lm_eval

    device = pick_device(device)
    settings.extra = {"lm_eval": getattr(lm_eval, "__version__", "unknown"), "device": device}
    results = {}
    for label, load in (("base", load_base), ("trained", load_run)):
        run = load(run_dir, device)
        results[label] = evaluate_model(run, manager, settings, f"{label} model")
        del run
        gc.collect()  # one model in memory at a time
    rows = report.compare(results["base"], results["trained"], settings.record())
    data = report.merge(run_dir, rows, cfg.base_model, settings.asked())
    report.add_to_card(run_dir, data)
    text = json.dumps({"base_model": cfg.base_model, "rows": rows}, indent=2) + "\n"
    if output is not None:
        output.write_text(text, encoding="utf-8")
    if as_json:
        sys.stdout.write(text)
    else:
        report.print_table(rows, f"{run_dir}: base model -> trained ({report.BENCHMARKS_FILE})")
    return data


# Asked for by the config (`benchmark:`), when training ends --------------------------------------------------


def settings_of(cfg) -> BenchmarkSettings:
    spec = cfg.benchmark
    return BenchmarkSettings(list(spec.tasks), spec.limit, spec.num_fewshot, spec.batch_size, spec.chat_template)


def check_config(cfg) -> None:
    """Before training: the extra is there and every task is known, so a run does not train for hours to
    fail at its last step."""
    require_harness()
    task_manager(settings_of(cfg).tasks)


def benchmark_after_training(folder: Path, cfg, say) -> int:
    """The config's benchmarks on the run just saved: the exit code (0, or 2 with the reason said). A run that
    was already finished (`--resume` found nothing to do) and benchmarked since is not evaluated again."""
    from autotrain.errors import EXIT_BAD_INPUT
    from autotrain.inference.benchmark_report import asked_already

    settings = settings_of(cfg)
    if asked_already(folder, settings.asked()):
        say(f"benchmarks: {folder}/benchmarks.json already holds them for this model")
        return 0
    say(f"benchmarks: {', '.join(settings.tasks)} on the base model, then on the trained one")
    try:
        run_benchmark(folder, settings)
    except UserInputError as exc:
        say(f"error: benchmark: {exc}")
        return EXIT_BAD_INPUT
    return 0
