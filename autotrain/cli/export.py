"""`autotrain export RUN_DIR`: a finished run as a merged folder, a GGUF file or an Ollama model, checked
against the trained model. The work is in autotrain.export, imported inside the command."""

from __future__ import annotations

from pathlib import Path

import typer

from autotrain.cli.common import fail
from autotrain.cli.inference import RunDirArgument, reported
from autotrain.config.export_formats import FORMATS, GGUF_QUANTS, MERGED_DTYPES, quant_problem
from autotrain.errors import EXIT_PARITY, eprint


def export(
    run_dir: Path = RunDirArgument,
    format_: str = typer.Option(
        None,
        "--format",
        "-f",
        help=f"One of: {', '.join(FORMATS)} (default: gguf for an LLM run; merged, the only one, for the others).",
        metavar="FORMAT",
        show_default=False,
    ),
    quant: str = typer.Option(
        None,
        "--quant",
        "-q",
        help=f"GGUF weights: {', '.join(GGUF_QUANTS)} (default f16); merged: {', '.join(MERGED_DTYPES)} (default f32).",
        show_default=False,
    ),
    output: Path = typer.Option(
        None, "--output", "-o", help="Output folder (default: RUN_DIR/export-FORMAT-QUANT).", show_default=False
    ),
    force: bool = typer.Option(False, "--force", help="Replace an earlier export in the output folder."),
) -> None:
    """Export a finished run, an LLM as merged weights, GGUF, or GGUF + Ollama Modelfile, any other task as
    a merged folder (-f merged), and check that the export answers as the trained model does (greedy
    answers; other tasks: predictions); exit 4 when it does not (the export is kept as OUT.failed)."""
    problem = quant_problem(format_, quant) if format_ is not None else None  # else: once the run's task is read
    if problem:
        raise fail(problem)
    from autotrain.errors import ParityError

    with reported():
        from autotrain.export.pipeline import ExportRequest, export_run

        try:
            result = export_run(ExportRequest(run_dir, format_, quant, output, force), say=eprint)
        except ParityError as exc:
            raise fail(str(exc), EXIT_PARITY) from None
    for file in result.files:
        print(f"exported: {file} ({file.stat().st_size / 1e6:.1f} MB)")
    print(summary_line(result.report))
    if result.ollama_command:
        print(f"to run it in Ollama:\n  {result.ollama_command}")


def summary_line(report: dict) -> str:
    parity = report["parity"]
    parts = []
    for reader, result in parity["readers"].items():
        if not result.get("exercised", True):
            parts.append(f"{reader}: not checked ({result['reason']})")
            continue
        row = result.get("vs_trained", result)
        diff = row.get("max_logit_diff", row.get("max_logit_diff_first_token"))
        rows = "prompts" if report.get("task", "llm") == "llm" else "rows"  # other tasks: rows of data predicted
        part = f"{reader}: {row['prompts_agreeing']}/{row['prompts']} {rows} agree"
        if row.get("token_agreement_pct") is not None:
            part += f", {row['token_agreement_pct']:g}% of tokens agree"
        part += f", max logit diff {diff:.3g}"
        if "max_prediction_diff" in row:  # scores, values, embeddings: the numbers predict writes
            part += f", max prediction diff {row['max_prediction_diff']:.3g}"
        parts.append(part)
    rule = f" ({report['rule']})" if "rule" in report else ""
    return "parity passed: " + "; ".join(parts) + rule
