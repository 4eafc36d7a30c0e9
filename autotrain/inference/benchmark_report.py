"""Benchmark results of a base model and the model trained from it, side by side: the difference of each
metric with its standard error, printed, kept in the run folder (`benchmarks.json`) and in the model card.

The standard error of a difference comes from the per-example scores of both models where the metric is
their mean (accuracy, exact match, ...): the same examples, paired, so their shared difficulty cancels.
Where it is not (a corpus-level F1 or BLEU, a group's aggregate), the two standard errors are combined as
if independent, which overstates it; each row says which (`paired`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

BENCHMARKS_FILE = "benchmarks.json"
CARD_HEADING = "## Benchmarks"
CARD_END = "The full resolved config is in"  # the model card's last line (autotrain.run.outputs)


def compare(base: dict, trained: dict, settings: dict) -> list[dict]:
    """One row per task and metric, in lm-eval's order: both values, their standard errors, the difference."""
    rows = []
    for task, scores in trained["results"].items():
        for key, value in scores.items():
            if "," not in key or "_stderr," in key or not isinstance(value, (int, float)):
                continue
            metric, filter_name = key.split(",", 1)
            before = base["results"].get(task, {}).get(key)
            if not isinstance(before, (int, float)):
                continue
            row = {
                "task": task,
                "metric": metric if filter_name == "none" else f"{metric} ({filter_name})",
                "base": before,
                "base_stderr": _number(base["results"][task].get(f"{metric}_stderr,{filter_name}")),
                "trained": value,
                "trained_stderr": _number(scores.get(f"{metric}_stderr,{filter_name}")),
                "difference": value - before,
                "higher_is_better": trained.get("higher_is_better", {}).get(task, {}).get(metric),
                "examples": trained.get("n-samples", {}).get(task, {}).get("effective"),
                **settings,
            }
            row.update(_difference_stderr(base, trained, task, metric, filter_name, row))
            rows.append(row)
    return rows


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _difference_stderr(base: dict, trained: dict, task: str, metric: str, filter_name: str, row: dict) -> dict:
    paired = _paired(base, trained, task, metric, filter_name, row)
    if paired is not None:
        return {"difference_stderr": paired, "paired": True}
    both = (row["base_stderr"], row["trained_stderr"])
    combined = math.sqrt(both[0] ** 2 + both[1] ** 2) if None not in both else None
    return {"difference_stderr": combined, "paired": False}


def _paired(base: dict, trained: dict, task: str, metric: str, filter_name: str, row: dict) -> float | None:
    """The standard error of the mean per-example difference, when both values are those means."""

    def scores(result: dict) -> dict:
        out = {}
        for sample in result.get("samples", {}).get(task, []):
            value = sample.get(metric)
            if sample.get("filter", "none") == filter_name and isinstance(value, (int, float, bool)):
                out[sample["doc_id"]] = float(value)
        return out

    before, after = scores(base), scores(trained)
    if len(before) < 2 or before.keys() != after.keys():
        return None
    if not all(
        math.isclose(sum(s.values()) / len(s), value, rel_tol=1e-6, abs_tol=1e-9)
        for s, value in ((before, row["base"]), (after, row["trained"]))
    ):
        return None  # not a mean of the per-example scores
    differences = [after[doc] - before[doc] for doc in before]
    mean = sum(differences) / len(differences)
    variance = sum((d - mean) ** 2 for d in differences) / (len(differences) - 1)
    return math.sqrt(variance / len(differences))


def _read(folder: Path) -> dict:
    try:
        data = json.loads((folder / BENCHMARKS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def merge(folder: Path, rows: list[dict], base_model: str, asked: dict) -> dict:
    """`benchmarks.json` with these rows: rows of other tasks from an earlier evaluation stay (each row keeps
    its own settings); those of the tasks evaluated now are replaced. `asked`: the tasks and settings of this
    evaluation, as asked for."""
    earlier = _read(folder)
    tasks = {row["task"] for row in rows}
    kept = [r for r in earlier.get("rows", []) if isinstance(r, dict) and r.get("task") not in tasks]
    data = {"base_model": base_model, "last_asked": asked, "rows": kept + rows}
    (folder / BENCHMARKS_FILE).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return data


def asked_already(folder: Path, asked: dict) -> bool:
    """The last evaluation asked for these tasks with these settings, after the model was last saved."""
    path, saved = folder / BENCHMARKS_FILE, folder / "trainer_state.json"
    if not path.is_file() or not saved.is_file() or path.stat().st_mtime < saved.stat().st_mtime:
        return False
    return _read(folder).get("last_asked") == asked


def cell(value: float | None, stderr: float | None, signed: bool = False) -> str:
    if value is None:
        return ""
    text = f"{value:+.4f}" if signed else f"{value:.4f}"
    return text + (f" ± {stderr:.4f}" if stderr is not None else "")


def table_rows(rows: list[dict]) -> list[list[str]]:
    """task, metric, base, trained, difference: the cells both the terminal and the model card show."""
    return [
        [
            r["task"],
            r["metric"],
            cell(r["base"], r["base_stderr"]),
            cell(r["trained"], r["trained_stderr"]),
            cell(r["difference"], r["difference_stderr"], signed=True),
        ]
        for r in rows
    ]


HEADER = ["task", "metric", "base", "trained", "difference"]


def print_table(rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for name in HEADER:
        table.add_column(name, justify="left" if name in ("task", "metric") else "right")
    for cells in table_rows(rows):
        table.add_row(*cells)
    Console().print(table)


def card_section(data: dict) -> str:
    """The model card's "Benchmarks" section for `benchmarks.json`'s contents."""
    rows = data["rows"]
    settings = sorted(
        {(r.get("limit"), r.get("num_fewshot"), r.get("chat_template"), r.get("lm_eval")) for r in rows}, key=str
    )
    lines = [
        CARD_HEADING,
        "",
        f"lm-evaluation-harness on the trained model and its base model `{data['base_model']}`, with the same "
        "settings (mean ± standard error; the difference's is paired over the same examples where the metric "
        "is their mean):",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|---|---|---|---|---|",
        *("| " + " | ".join(cells) + " |" for cells in table_rows(rows)),
        "",
    ]
    for limit, shots, chat, version in settings:
        lines.append(
            f"- lm-eval {version}: limit {limit if limit is not None else 'none'} per task, few-shot "
            f"{shots if shots is not None else 'the task default'}, chat template {'on' if chat else 'off'}"
        )
    return "\n".join(lines) + "\n\n"


def add_to_card(folder: Path, data: dict) -> None:
    """Write (or replace) the "Benchmarks" section of the run's model card, before its closing line."""
    card = folder / "README.md"
    if not card.is_file():
        return
    text = card.read_text(encoding="utf-8")
    if CARD_HEADING in text:  # an earlier evaluation's section: up to the next section or the closing line
        start = text.index(CARD_HEADING)
        section, closing = text.find("\n## ", start + 1), text.find(CARD_END, start)
        end = min([i + 1 for i in (section,) if i != -1] + [i for i in (closing,) if i != -1], default=len(text))
        text = text[:start] + text[end:]
    block = card_section(data)
    text = text.replace(CARD_END, block + CARD_END, 1) if CARD_END in text else text.rstrip() + "\n\n" + block
    card.write_text(text, encoding="utf-8")
