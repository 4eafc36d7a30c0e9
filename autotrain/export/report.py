"""The export's own report: the parity figures (JSON, `export_report.json`) and a model card beside the
artifact (the run's card with an Export section). What makes an export fail is decided here, once."""

from __future__ import annotations

import json
import platform
from pathlib import Path

from autotrain.export.output import REPORT
from autotrain.export.parity import EXACT_QUANTS, GREEDY_TOKENS, LOGIT_TOLERANCE, MIN_TOKEN_AGREEMENT, rule


def build_report(source, fmt: str, quant: str, files: list[Path], seconds: float, summary, family, stage: Path):
    report = {
        "run": str(source.folder),
        "task": source.config.task,
        "kind": source.kind,
        "format": fmt,
        "quant": quant,
        "files": [{"name": f.name, "bytes": f.stat().st_size} for f in files],
        "export_seconds": round(seconds, 2),
        "machine": f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}",
    }
    if summary is not None:
        report["gguf"] = {
            "architecture": summary.architecture,
            "tokenizer": summary.tokenizer,
            "pre_tokenizer": summary.pre_tokenizer,
            "tensor_types": _count(summary.tensor_types.values()),
            "f16_fallbacks": summary.fallbacks,
        }
    if source.config.task == "llm":
        from autotrain.export.checks import llm_parity

        report["parity"] = llm_parity(source, fmt, quant, files[0], stage, summary, family)
    else:
        from autotrain.export.checks import task_parity

        report["parity"] = task_parity(source, quant, stage)
    report["rule"] = rule(report["task"], quant)
    report["failures"] = failures(report)
    report["passed"] = not report["failures"]
    return report


def _count(values) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def failures(report: dict) -> list[str]:
    """Each reason the export does not count as the trained model, as one clause."""
    parity, quant, found = report["parity"], report["quant"], []
    for reader, result in parity.get("readers", {}).items():
        if not result.get("exercised", True):
            continue
        written = result.get("vs_written_weights")
        if written and written["max_logit_diff"] > LOGIT_TOLERANCE:
            found.append(
                f"{reader}: logits differ by {written['max_logit_diff']:.3g} from the weights the file holds "
                f"(tolerance {LOGIT_TOLERANCE:g})"
            )
        trained = result.get("vs_trained", result)
        if trained.get("outputs") == 0:  # the task exports' check compares the model's forward outputs
            found.append(f"{reader}: no output of the model was captured to compare")
        if quant in EXACT_QUANTS and trained.get("agreement_pct") not in (None, 100.0):
            what = (
                f"prompts give the trained model's first {GREEDY_TOKENS} greedy tokens"
                if report["task"] == "llm"
                else "rows get the trained model's predictions (text, labels, spans)"
            )
            found.append(f"{reader}: {trained['prompts_agreeing']} of {trained['prompts']} {what}")
        found += _lossy(report, reader, trained)
    template = parity.get("chat_template")
    if template and (not template["same_template"] or template["renders_equal"] != template["conversations"]):
        found.append("the chat template read back from the export renders differently from the one trained with")
    tokenizer = parity.get("tokenizer")
    if tokenizer and tokenizer["same_ids"] != tokenizer["texts"] and not tokenizer.get("reader_limited"):
        differ = tokenizer["texts"] - tokenizer["same_ids"]
        found.append(f"the tokenizer read back gives other ids on {differ} prompt(s)")
    return found


def _lossy(report: dict, reader: str, trained: dict) -> list[str]:
    """An LLM export at a type that changes answers by design, keeping too few of the trained model's tokens."""
    quant, share = report["quant"], trained.get("token_agreement_pct")
    if report["task"] != "llm" or quant not in MIN_TOKEN_AGREEMENT or share is None:
        return []
    if share >= MIN_TOKEN_AGREEMENT[quant]:
        return []
    return [
        f"{reader}: {share:g}% of the trained model's greedy tokens are the export's top token "
        f"({quant}: at least {MIN_TOKEN_AGREEMENT[quant]:g}% required; {trained['prompts_agreeing']} of "
        f"{trained['prompts']} prompts give all {GREEDY_TOKENS})"
    ]


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def write_report(report: dict, stage: Path, run: Path) -> None:
    write_json(stage / REPORT, report)
    card = run / "README.md"
    text = card.read_text(encoding="utf-8").rstrip() + "\n" if card.is_file() else f"# {run.resolve().name}\n"
    (stage / "README.md").write_text(text + "\n" + card_section(report), encoding="utf-8")


def card_section(report: dict) -> str:
    """The model card's Export section: what was written and how closely it answers like the trained model."""
    parity = report["parity"]
    files = ", ".join(f"`{f['name']}` ({f['bytes'] / 1e6:.1f} MB)" for f in report["files"])
    lines = [
        f"## Export: {report['format']} {report['quant']}",
        "",
        f"{files}, from a {report['kind']} run, written in {report['export_seconds']} s. "
        f"Parity check: {'passed' if report['passed'] else 'FAILED'} on {parity.get('prompts', '?')} prompts "
        f"({parity.get('prompts_source', 'probe inputs')}); {report['rule']}.",
        "",
        "| reader | compared with | prompts agreeing | tokens agreeing | max logit diff |",
        "|---|---|---|---|---|",
    ]
    for reader, result in parity.get("readers", {}).items():
        if not result.get("exercised", True):
            lines.append(f"| {reader} | not checked: {result['reason']} | | | |")
            continue
        if "vs_trained" not in result:  # llama.cpp: greedy tokens, logits of the first answer token
            lines.append(
                f"| {reader} | trained model | {result['prompts_agreeing']}/{result['prompts']} | "
                f"| {result['max_logit_diff_first_token']:.3g} (first token) |"
            )
        for against in ("vs_trained", "vs_written_weights"):
            row = result.get(against)
            if row:
                lines.append(
                    f"| {reader} | {against[3:].replace('_', ' ')} model | {row['prompts_agreeing']}/{row['prompts']} "
                    f"| {row.get('token_agreement_pct', '')}% | {row['max_logit_diff']:.3g} |"
                )
    lines += [f"\n{'; '.join(report['failures'])}" if report["failures"] else ""]
    return "\n".join(lines) + "\n"
