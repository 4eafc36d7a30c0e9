"""`autotrain export`: a finished run as a merged folder, a GGUF file, or a GGUF file with an Ollama
Modelfile (LLMs); every other task as a merged folder (its model's files, or its adapter merged into the
base model); checked against the trained model before it is published under its final name."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from autotrain.config.export_formats import DEFAULT_QUANT, quant_problem
from autotrain.errors import ParityError, UserInputError
from autotrain.export import output


@dataclass
class ExportRequest:
    run: Path
    format: str | None = None  # gguf for an LLM run, merged (the only one) for the others
    quant: str | None = None
    output: Path | None = None
    force: bool = False
    running_ok: bool = False  # the hook at the end of training: run.json says "running" until it returns

    def resolved(self) -> tuple[str, Path]:
        """(quant, output folder); bad values are refused here, before anything is loaded."""
        problem = quant_problem(self.format, self.quant)
        if problem:
            raise UserInputError(problem)
        quant = self.quant or DEFAULT_QUANT[self.format]
        return quant, Path(self.output) if self.output else output.default_output(self.run, self.format, quant)


@dataclass
class ExportResult:
    folder: Path
    report: dict
    files: list[Path] = field(default_factory=list)
    ollama_command: str | None = None


def export_run(request: ExportRequest, say: Callable[[str], None] = print) -> ExportResult:
    """Export, check, publish. Raises UserInputError (bad input, exit 2) or ParityError (exit 4)."""
    from autotrain.export.source import check_run

    cfg = check_run(request.run, request.running_ok)
    if request.format is None:
        request = replace(request, format="gguf" if cfg.task == "llm" else "merged")
    quant, out = request.resolved()
    if cfg.task != "llm" and request.format != "merged":
        raise UserInputError(
            f"`{request.run}` holds a {cfg.task} model: it exports as `--format merged` only "
            "(GGUF and Ollama are for LLMs)"
        )
    if cfg.task != "llm":
        from autotrain.inference.tasks import require_extra

        require_extra(cfg.task)  # the task's packages: predict's code runs the parity check
    with output.locked(out, say):  # from here to the rename, no other export writes to `out`
        output.check_output(out, request.force)
        if request.format != "merged":
            import importlib.util

            if importlib.util.find_spec("gguf") is None:
                from autotrain.hints import install_hint

                raise UserInputError(f"GGUF export needs the gguf package: {install_hint(extra='export')}")
        return _export(request, cfg, quant, out, say)


def _export(request: ExportRequest, cfg, quant: str, out: Path, say: Callable[[str], None]) -> ExportResult:
    from autotrain.export.source import load_source

    say(f"loading the run in {request.run} ...")
    source = load_source(request.run, cfg)
    family = _check_exportable(source, request.format)
    stage = output.staging(out)
    try:
        started = time.perf_counter()
        files, summary = _write(source, request.format, quant, stage, out)
        seconds = time.perf_counter() - started
        say(f"written in {seconds:.1f} s; checking parity ...")
        from autotrain.export.report import build_report, write_report

        report = build_report(source, request.format, quant, files, seconds, summary, family, stage)
        write_report(report, stage, source.folder)
        if family is not None:
            _write_modelfile(stage, files[0].name, family, report)
        return _publish(stage, out, report, files, request.format)
    except BaseException as exc:  # SIGINT and SIGTERM too (cli/inference.py): nothing half-written stays
        shutil.rmtree(stage, ignore_errors=True)  # gone already once published
        explained = output.writing_error(exc, out, output.size_needed(source.model, quant))
        if explained is None:
            raise
        raise explained from None


def _check_exportable(source, fmt: str):
    """Refusals that need the loaded model, before anything is written: architecture, chat family."""
    if fmt == "merged":
        return None
    from autotrain.export.gguf_file import architecture_of

    architecture_of(source.model.config)
    if fmt != "ollama":
        return None
    from autotrain.export.modelfile import FAMILIES, find_family
    from autotrain.export.parity import collect_prompts

    tokenizer = source.processor
    if not tokenizer.chat_template:
        raise UserInputError(
            "the run's tokenizer has no chat template, so no Ollama TEMPLATE can be written; use --format gguf"
        )
    prompts = collect_prompts(source.config, tokenizer)
    family = find_family(_renderer(tokenizer), prompts.conversations, _bos_prefix(tokenizer), tokenizer.eos_token or "")
    if family is None:
        raise UserInputError(
            f"the run's chat template is none of the families a Modelfile can be written for ({', '.join(FAMILIES)}); "
            "use --format gguf (the GGUF file carries the template itself)"
        )
    return family


def _renderer(tokenizer):
    return lambda messages: tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def _bos_prefix(tokenizer) -> str:
    """What llama.cpp and Ollama put before the template's text: BOS, when the tokenizer adds one."""
    ids = tokenizer("a")["input_ids"]
    bos = tokenizer.bos_token_id
    return tokenizer.bos_token if ids and bos is not None and ids[0] == bos else ""


def _write(source, fmt: str, quant: str, stage: Path, out: Path):
    if fmt == "merged":
        from autotrain.export import model_files

        if source.config.task == "llm":
            return model_files.save_merged(source.model, source.processor, quant, stage), None
        # Another task's model folder (a full fine-tune, or `merged/`) is copied as it is, at most rounded:
        # sentence-transformers' modules and any processor files come along exactly as the run saved them.
        if source.is_folder:
            files = model_files.copy_model(source.weights, stage, quant, source.config.trust_remote_code)
        else:
            files = model_files.save_merged(source.model, source.processor, quant, stage)
        model_files.copy_plots(source.folder, stage)
        return files, None
    from autotrain.export.gguf_file import write_gguf

    path = stage / f"{source.folder.resolve().name}-{quant}.gguf"
    summary = write_gguf(source.model, source.processor, path, quant, source.folder.resolve().name)
    return [path], summary


def _write_modelfile(stage: Path, gguf_name: str, family, report: dict) -> None:
    from autotrain.export.modelfile import modelfile_text, takes_system

    system = report["parity"].get("system_prompt")
    (stage / "Modelfile").write_text(modelfile_text(gguf_name, family, system), encoding="utf-8")
    report["modelfile"] = {
        "family": family.name,
        "stops": list(family.stops),
        "system": system or family.default_system,
        "system_written": bool(system or family.default_system) and takes_system(family.template),
    }
    from autotrain.export.report import write_json

    write_json(stage / output.REPORT, report)


def _publish(stage: Path, out: Path, report: dict, files: list[Path], fmt: str) -> ExportResult:
    from autotrain.training.folder import share_like_umask

    share_like_umask(stage)  # merged weights are written 0600
    passed = report["passed"]
    final = output.publish(stage, out if passed else output.failed_name(out))
    if passed and output.failed_name(out).exists() and output.ours(output.failed_name(out)):
        shutil.rmtree(output.failed_name(out), ignore_errors=True)  # an earlier failed try of this export
    moved = [final / f.name for f in files]
    result = ExportResult(final, report, moved)
    if fmt == "ollama":
        result.ollama_command = f"ollama create {_ollama_name(report['run'])} -f {final / 'Modelfile'}"
    if not passed:
        raise ParityError(
            f"parity check failed: {'; '.join(report['failures'])}. The export is kept as `{final}` "
            f"(see {output.REPORT})"
        )
    return result


def _ollama_name(run: str) -> str:
    import re

    return re.sub(r"[^a-z0-9._-]+", "-", Path(run).name.lower()).strip("-") or "autotrain-model"
