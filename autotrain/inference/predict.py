"""`autotrain predict`: batch inference with a finished run, one JSON line per input row, in input order.

Classifiers give the label and its probability; LLMs the generated completion. Rows are processed in
chunks: inside a chunk they are sorted by length so each batch pads little, and written back in order.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from autotrain.errors import UserInputError
from autotrain.hints import cannot_write_hint
from autotrain.inference.generate import GenerationSettings
from autotrain.inference.inputs import Rows, prompt_of
from autotrain.inference.tasks import task_module

CHUNK = 2048  # rows sorted by length together; results are written after each chunk


def check_output(output: Path | None, force: bool) -> None:
    """Refuse to replace a file unless asked (before anything is loaded)."""
    if output is None:
        return
    if output.is_dir():
        raise UserInputError(f"--output `{output}` is a folder; give a file name")
    if output.exists() and not force:
        raise UserInputError(f"--output `{output}` already exists; add --force to replace it")
    if not output.parent.is_dir():
        raise UserInputError(f"--output `{output}`: the folder `{output.parent}` does not exist")
    if not os.access(output.parent, os.W_OK | os.X_OK):
        remedy = cannot_write_hint(output.parent, "choose another --output")
        raise UserInputError(f"--output `{output}`: the folder `{output.parent}` is not writable; {remedy}")


@contextlib.contextmanager
def jsonl_writer(output: Path | None, force: bool = False, rows: int | None = None) -> Iterator[Callable[[dict], None]]:
    """Write to stdout, or to `output` through a temporary file of its own, renamed when every row is written.

    The temporary file gets a fresh name, created exclusively (`O_EXCL`) beside `output`, so no file that
    autotrain did not create is ever written to or deleted; without `force`, an `output` that appeared
    while predicting is not replaced either. The temporary files of a predict that was killed (their names
    hold its pid) are removed first. A full device is one line, with the space the `rows` need."""
    if output is None:
        yield lambda row: sys.stdout.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        sys.stdout.flush()
        return
    _clear_killed(output)
    partial, fd = _exclusive_partial(output)
    written = [0, 0]  # rows, bytes

    def write(row: dict) -> None:
        line = json.dumps(row, ensure_ascii=False, default=str) + "\n"
        handle.write(line)
        written[0], written[1] = written[0] + 1, written[1] + len(line.encode("utf-8"))

    try:
        with open(fd, "w", encoding="utf-8") as handle:
            yield write
        _publish(partial, output, force)
    except OSError as exc:
        from autotrain.training.disk import is_disk_full, no_space

        if not is_disk_full(exc):
            raise
        needed = int(written[1] / written[0] * rows) if written[0] and rows else None
        raise no_space(
            output.parent, f"`{output.name}`", needed, "free some space or choose another --output"
        ) from None
    finally:
        partial.unlink(missing_ok=True)


def _clear_killed(output: Path) -> None:
    """Remove `.NAME.PID-RANDOM.partial` files beside `output` whose predict (PID) is no longer running."""
    import re

    from autotrain.training.lifetime import pid_alive

    ours = re.compile(rf"^\.{re.escape(output.name)}\.(\d+)-[0-9a-f]{{8}}\.partial$")
    for path in output.parent.glob(f".{output.name}.*.partial"):
        found = ours.match(path.name)
        if found and int(found.group(1)) != os.getpid() and not pid_alive(int(found.group(1))):
            path.unlink(missing_ok=True)


def _exclusive_partial(output: Path) -> tuple[Path, int]:
    """A new file `.NAME.PID-RANDOM.partial` beside `output`, created here and nowhere else."""
    import secrets

    while True:
        partial = output.with_name(f".{output.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")
        try:
            return partial, os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        except OSError as exc:
            raise UserInputError(f"--output `{output}`: cannot write in `{output.parent}` ({exc.strerror})") from None


def _publish(partial: Path, output: Path, force: bool) -> None:
    if force:
        partial.replace(output)
        return
    appeared = UserInputError(f"--output `{output}` was created while predicting; add --force to replace it")
    try:
        os.link(partial, output)  # fails, rather than replaces, if `output` exists by now
    except FileExistsError:
        raise appeared from None
    except OSError:  # a file system without hard links: the check before predicting stands
        if output.exists():
            raise appeared from None
        partial.replace(output)


@contextlib.contextmanager
def progress_bar(total: int, description: str) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr (shown on a terminal, gone when done); yields `advance(rows)`."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    console = Console(stderr=True)
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task(description, total=total)
        yield lambda rows: progress.advance(task, rows)


def chunks(total: int, size: int = CHUNK) -> Iterator[range]:
    for start in range(0, total, size):
        yield range(start, min(start + size, total))


def batch_size_of(run, requested: int | None) -> int:
    if requested is not None:
        if requested < 1:
            raise UserInputError(f"--batch-size must be at least 1 (got {requested})")
        return requested
    args = run.config.training_args
    return args.eval_batch_size or args.batch_size


def predict_rows(
    run,
    rows: Rows,
    write: Callable[[dict], None],
    batch_size: int,
    settings: GenerationSettings | None = None,
    draw: Path | None = None,
) -> None:
    """Predict every row and `write` one dict per row, in input order (`draw`: a folder for the images with
    their predictions drawn, for the tasks whose inference module draws)."""
    with progress_bar(len(rows), "predicting") as advance:
        for part in chunks(len(rows)):
            values = [rows.values[i] for i in part]
            handler = task_module(run.task)
            if handler is not None:
                outputs = handler.predict(run, values, batch_size, advance)
                if draw is not None:
                    handler.draw(values, outputs, part, draw)
            elif run.task == "llm":
                outputs = _completions(run, values, rows.kind, batch_size, settings or GenerationSettings(), advance)
            else:
                outputs = _labels(run, values, batch_size, advance)
            for i, value, output in zip(part, values, outputs, strict=True):
                write({"row": i, **_echo(rows.kind, value), **output})


def check_draw(draw: Path | None, task: str) -> None:
    """`--draw FOLDER`: a task whose inference module draws, and a folder that does not exist yet (made here,
    so nothing in it was there before)."""
    if draw is None:
        return
    handler = task_module(task)
    if handler is None or not hasattr(handler, "draw"):
        raise UserInputError(f"--draw: runs of `task: {task}` have nothing to draw (object-detection runs do)")
    if draw.exists():
        raise UserInputError(f"--draw `{draw}` already exists; give a new folder")
    try:
        draw.mkdir(parents=True)
    except OSError as exc:
        raise UserInputError(f"--draw `{draw}`: cannot create it ({exc.strerror})") from None


def _echo(kind: str, value) -> dict:
    """The input beside its prediction: the text, the image path, or the LLM row as read."""
    if isinstance(value, dict):
        return {key: v for key, v in value.items() if key != "completion"}
    return {kind: value} if isinstance(value, str) else {}


def _labels(run, values: list, batch_size: int, advance: Callable[[int], None]) -> list[dict]:
    from autotrain.inference.classify import classifier_logits, softmax

    probabilities = softmax(classifier_logits(run, values, batch_size, advance))
    names = run.labels
    best = probabilities.argmax(axis=1)
    return [{"label": names[k], "score": float(p[k])} for k, p in zip(best, probabilities, strict=True)]


def _completions(run, values: list[dict], kind: str, batch_size: int, settings, advance) -> list[dict]:
    from autotrain.inference.generate import generate, generation_config, prompt_ids

    tokenizer = run.processor
    config = generation_config(settings, tokenizer, run.model)
    prompts = [prompt_ids(tokenizer, prompt_of(value, kind), run.max_tokens) for value in values]
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    completions: list[str] = [""] * len(prompts)
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        for i, text in zip(batch, generate(run, [prompts[i] for i in batch], config), strict=True):
            completions[i] = text
        advance(len(batch))
    return [{"completion": text} for text in completions]


def run_predict(
    run_dir: Path,
    input_path: Path,
    output: Path | None = None,
    force: bool = False,
    batch_size: int | None = None,
    settings: GenerationSettings | None = None,
    device: str = "auto",
    draw: Path | None = None,
) -> int:
    """The command: check, read the rows, load the run, predict, report; returns the number of rows."""
    from autotrain.inference.inputs import read_rows
    from autotrain.inference.load import load_run, read_config

    check_output(output, force)
    cfg = read_config(run_dir)
    check_draw(draw, cfg.task)
    rows = read_rows(cfg, input_path)
    run = load_run(run_dir, device, cfg)
    size = batch_size_of(run, batch_size)
    start = time.perf_counter()
    with jsonl_writer(output, force, len(rows)) as write:
        predict_rows(run, rows, write, size, settings, draw)
    elapsed = time.perf_counter() - start
    where = f" to {output}" if output else ""
    print(f"predicted {len(rows)} rows{where} in {elapsed:.1f} s ({len(rows) / elapsed:.1f} rows/s)", file=sys.stderr)
    return len(rows)
