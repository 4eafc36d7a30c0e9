"""`autotrain chat | predict | evaluate RUN_DIR`: try what you trained. The work is in autotrain.inference,
imported inside each command so `autotrain --help` stays light."""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from pathlib import Path

import typer

from autotrain.cli.common import fail
from autotrain.errors import debug_enabled, eprint

RunDirArgument = typer.Argument(
    ..., help="Project folder of a finished run (its project_name).", show_default=False, metavar="RUN_DIR"
)
InputOption = typer.Option(
    ...,
    "--input",
    "-i",
    help="A .jsonl, .csv, .json or .parquet file with the columns the run was trained on (image runs: also a "
    "folder of images, or one sub-folder per class).",
    show_default=False,
    metavar="FILE",
)
ForceOption = typer.Option(False, "--force", help="Replace an existing --output file.")
BatchSizeOption = typer.Option(
    None, "--batch-size", help="Rows per forward pass (default: the run's eval_batch_size or batch_size).", min=1
)
DeviceOption = typer.Option("auto", "--device", help="auto, cpu, cuda or mps.")
MaxNewTokensOption = typer.Option(256, "--max-new-tokens", help="LLMs: most tokens generated per answer.", min=1)
TemperatureOption = typer.Option(0.0, "--temperature", help="LLMs: 0 = greedy (reproducible); above 0 samples.")
TopPOption = typer.Option(1.0, "--top-p", help="LLMs, when sampling: nucleus sampling threshold.")


@contextlib.contextmanager
def reported() -> Iterator[None]:
    """Bad input (no finished run, a missing column, ...) as one `error:` line and exit code 2; SIGTERM ends
    the command as Ctrl-C does, through its clean-up (exit 143), instead of killing it where it stands."""
    from autotrain.errors import UserInputError

    try:
        from autotrain.training.quiet import quiet_libraries

        quiet_libraries()
        with _sigterm_unwinds():
            yield
    except UserInputError as exc:
        if debug_enabled():
            traceback.print_exc()
        raise fail(str(exc)) from None


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    import signal
    import threading

    from autotrain.errors import Terminated

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    except Terminated:  # typer would take it for Ctrl-C (exit 130)
        eprint("terminated")
        raise typer.Exit(Terminated.exit_code) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def _settings(max_new_tokens: int, temperature: float, top_p: float):
    from autotrain.inference.generate import GenerationSettings

    return GenerationSettings(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p)


def chat(
    run_dir: Path = RunDirArgument,
    message: list[str] = typer.Option(
        None, "--message", "-m", help="Send this message, print the reply and exit (repeatable: one turn each)."
    ),
    system: str = typer.Option(None, "--system", help="A system message that opens the conversation."),
    max_new_tokens: int = MaxNewTokensOption,
    temperature: float = TemperatureOption,
    top_p: float = TopPOption,
    device: str = DeviceOption,
    image: Path = typer.Option(None, "--image", help="vlm runs: the image the messages ask about.", show_default=False),
) -> None:
    """Chat with a fine-tuned LLM (/reset starts over, /exit ends); reads piped stdin too."""
    with reported():
        from autotrain.inference.chat import run_chat

        run_chat(run_dir, _settings(max_new_tokens, temperature, top_p), message, system, device, image=image)


def predict(
    run_dir: Path = RunDirArgument,
    input_path: Path = InputOption,
    output: Path = typer.Option(
        None, "--output", "-o", help="Write the JSON lines here (default: stdout).", show_default=False
    ),
    force: bool = ForceOption,
    batch_size: int = BatchSizeOption,
    max_new_tokens: int = MaxNewTokensOption,
    temperature: float = TemperatureOption,
    top_p: float = TopPOption,
    device: str = DeviceOption,
    draw: Path = typer.Option(
        None,
        "--draw",
        help="object-detection: save each image with its boxes drawn in this new folder.",
        show_default=False,
    ),
) -> None:
    """Predict every row of a file: one JSON line per row, in input order (classifiers: label and score;
    LLMs: the completion)."""
    with reported():
        from autotrain.inference.predict import run_predict

        settings = _settings(max_new_tokens, temperature, top_p)
        run_predict(run_dir, input_path, output, force, batch_size, settings, device, draw)


def evaluate(
    run_dir: Path = RunDirArgument,
    input_path: Path = typer.Option(
        None,
        "--input",
        "-i",
        help="A labelled .jsonl, .csv, .json or .parquet file with the columns the run was trained on (image "
        "runs: also a folder of images, or one sub-folder per class).",
        show_default=False,
        metavar="FILE",
    ),
    benchmark: list[str] = typer.Option(
        None,
        "--benchmark",
        "-b",
        help="LLMs: lm-evaluation-harness tasks instead of a file (names such as hellaswag,arc_easy, or task "
        "YAML files), on the trained and the base model side by side. Needs the benchmark extra (lm-eval).",
        show_default=False,
        metavar="TASKS",
    ),
    limit: float = typer.Option(
        None, "--limit", help="--benchmark: examples per task (a fraction below 1: of each task).", min=0
    ),
    num_fewshot: int = typer.Option(None, "--num-fewshot", help="--benchmark: few-shot examples.", min=0),
    chat_template: bool = typer.Option(
        False, "--chat-template", help="--benchmark: render the requests with the run's chat template."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON instead of a table."),
    output: Path = typer.Option(
        None, "--output", "-o", help="Also write the results as JSON here.", show_default=False
    ),
    force: bool = ForceOption,
    batch_size: int = BatchSizeOption,
    device: str = DeviceOption,
) -> None:
    """Metrics of a finished run on a labelled file (classifiers: loss, accuracy, macro F1 / precision /
    recall, confusion matrix; LLMs: token loss and perplexity), or benchmarks on it and its base model
    (--benchmark: written to RUN_DIR/benchmarks.json and the model card)."""
    with reported():
        if benchmark:
            _check_benchmark_usage(input_path, limit)
            from autotrain.inference.benchmark import BenchmarkSettings, run_benchmark, split_tasks

            settings = BenchmarkSettings(split_tasks(benchmark), limit, num_fewshot, batch_size or 8, chat_template)
            run_benchmark(run_dir, settings, device, output, force, as_json)
            return
        if input_path is None:
            raise fail("evaluate needs --input FILE (or --benchmark TASKS for an LLM run)")
        if limit is not None or num_fewshot is not None or chat_template:
            raise fail("--limit, --num-fewshot and --chat-template go with --benchmark")
        from autotrain.inference.evaluate import run_evaluate

        run_evaluate(run_dir, input_path, output, force, as_json, batch_size, device)


def _check_benchmark_usage(input_path: Path | None, limit: float | None) -> None:
    """Usage mistakes of `--benchmark`, before anything loads."""
    if input_path is not None:
        raise fail("give --input FILE or --benchmark TASKS, not both")
    if limit is not None and (limit <= 0 or (limit >= 1 and limit != int(limit))):
        raise fail(f"--limit: a whole count of examples, or a fraction below 1 (got {limit})")
