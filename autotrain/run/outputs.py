"""The project folder: refuse to clobber a run, save the final model, config and model card."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from autotrain.config.interpolate import redact
from autotrain.config.load import LoadedConfig
from autotrain.training.folder import share_like_umask
from autotrain.training.plan import RunPlan


def save_config(loaded: LoadedConfig, folder: Path, plan: RunPlan | None = None) -> None:
    """The resolved config, runnable as it is; the plan (what this machine did) follows as comments."""
    text = f"# resolved config of this run ({loaded.source}); secrets redacted\n"
    text += yaml.safe_dump(loaded.redacted(), sort_keys=False)
    if plan is not None:
        recorded = yaml.safe_dump({"plan": redact(plan.record(), loaded.secrets)}, sort_keys=False)
        text += "\n# what this machine resolved (also in run.json):\n" + "".join(
            f"# {line}\n" for line in recorded.splitlines()
        )
    (folder / "autotrain.yaml").write_text(text, encoding="utf-8")


def write_model_card(
    loaded: LoadedConfig, folder: Path, metrics: dict, plots: list[Path] = (), plan: RunPlan | None = None, state=None
) -> None:
    cfg = loaded.config
    what = f"{cfg.task}" + (f" ({cfg.trainer})" if getattr(cfg, "trainer", None) else "")
    lines = [
        "---",
        "library_name: " + ("peft" if getattr(cfg, "uses_peft", False) else "transformers"),
        f"base_model: {cfg.base_model}",
        "tags: [autotrain]",
        "---",
        "",
        f"# {Path(cfg.project_name).name}",
        "",
        f"Fine-tuned from `{cfg.base_model}` with autotrain: {what}.",
        "",
        *_data_lines(loaded),
        *_training_lines(cfg, plan, state),
    ]
    shown = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
    if shown:
        lines += ["", "## Results", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4g} |" for k, v in shown.items()]
    if plots:
        lines += ["", "## Training curves", ""]
        lines += [f"![{p.stem}]({p.relative_to(folder).as_posix()})" for p in plots]
    lines += ["", "The full resolved config is in `autotrain.yaml`.", ""]
    (folder / "README.md").write_text("\n".join(lines), encoding="utf-8")


def add_memory_to_card(folder: Path, memory: dict) -> None:
    """A "Memory" section in the model card: the estimate beside the peak the run measured."""
    from autotrain.training.memory import gib

    card = folder / "README.md"
    if "measured" not in memory or not card.is_file():
        return
    measured = memory["measured"]
    what = "max_memory_allocated" if "max_memory_allocated" in measured else "peak_rss"
    shown = {"max_memory_allocated": "max memory allocated", "peak_rss": "peak resident memory of the process"}
    lines = [
        "## Memory",
        "",
        "| | per device |",
        "|---|---|",
        f"| estimated before the run | {gib(memory['bytes_per_device'])} |",
        f"| measured ({shown[what]}) | {gib(measured[what])} |",
    ]
    if what == "peak_rss":
        lines.append(f"| resident as training started | {gib(measured['rss_at_start'])} |")
    text = card.read_text(encoding="utf-8")
    marker = "The full resolved config is in"
    block = "\n".join(lines) + "\n\n"
    text = text.replace(marker, block + marker, 1) if marker in text else text + "\n" + block
    card.write_text(text, encoding="utf-8")


def _training_lines(cfg, plan: RunPlan | None, state) -> list[str]:
    """What the run did, from the plan and the Trainer's state: steps and epochs done (a run bounded by
    `max_steps` does not train `epochs`), the batch per optimizer step, optimizer, precision, final loss."""
    args = cfg.training_args
    bound = f"`max_steps: {args.max_steps}`" if args.max_steps else f"`epochs: {args.epochs}`"
    if state is not None:
        lines = [f"- trained: {state.global_step} steps, {state.epoch or 0:.2f} epochs (asked: {bound})"]
    else:
        lines = [f"- asked: {bound}"]
    if plan is not None:
        lines.append(
            f"- batch per step: {plan.effective_batch_size} = batch_size {plan.batch_size} x gradient_accumulation "
            f"{plan.gradient_accumulation} x {plan.world_size} process(es)"
            + (" (batch_size: auto)" if plan.batch_choice else "")
        )
    lines.append(f"- learning rate: {args.lr}, optimizer: {plan.optimizer.name if plan else args.optimizer}")
    if plan is not None and plan.adapter is not None:
        lines.append(f"- adapter: {plan.adapter.summary()}")
    if plan is not None:
        mode = "fp32" if plan.precision.mode == "no" else plan.precision.mode
        lines.append(f"- precision: {mode} on {plan.precision.device} (asked: {plan.asked_precision})")
    logged = [e for e in state.log_history if isinstance(e.get("loss"), (int, float))] if state is not None else []
    if logged:  # `train_loss` in the results is the mean over the run, far above where it ended
        lines.append(f"- final train loss: {logged[-1]['loss']:.4f} at step {logged[-1]['step']}")
    return lines


def save_final(trainer, loaded: LoadedConfig, plan: RunPlan, metrics: dict) -> None:
    """Model (or adapter), tokenizer/processor, merged model on request, config, metrics, card."""
    cfg = loaded.config
    folder = Path(cfg.project_name)
    trainer.save_model(str(folder))
    if plan.adapter is not None and plan.adapter.converts and trainer.is_world_process_zero():
        from autotrain.training.adapter import save_converted_adapter

        save_converted_adapter(trainer.model, folder)  # PiSSA / OLoRA: a plain LoRA adapter on the base model
    processor = getattr(trainer, "processing_class", None)
    if processor is not None and trainer.is_world_process_zero():
        processor.save_pretrained(str(folder))
    if getattr(cfg, "uses_peft", False) and cfg.peft.merge_adapter and trainer.is_world_process_zero():
        merged = trainer.model.merge_and_unload() if hasattr(trainer.model, "merge_and_unload") else trainer.model
        merged.save_pretrained(str(folder / "merged"))
        if processor is not None:
            processor.save_pretrained(str(folder / "merged"))
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    card_metrics = dict(metrics)
    if cfg.task != "llm" and trainer.eval_dataset is not None:
        from autotrain.trainers.classification_common import evaluate_and_report

        card_metrics.update(evaluate_and_report(trainer))  # eval_results.json and a table of the metrics
    if trainer.is_world_process_zero():
        save_config(loaded, folder, plan)
        from autotrain.training.plots import write_plots

        plots = write_plots(folder, trainer.state.log_history, cfg.task)  # plots/loss.png (+ metrics.png)
        write_model_card(loaded, folder, card_metrics, plots, plan, trainer.state)
        share_like_umask(folder)  # the weights are written 0600


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def export_after_training(loaded: LoadedConfig, say) -> tuple[int, list[Path]]:
    """The config's `export:` section, run on the saved run as `autotrain export` runs it: (exit code, files to
    push beside the model). A failed export leaves the trained model as it is and sets the run's exit code."""
    from autotrain.errors import EXIT_BAD_INPUT, EXIT_PARITY, ParityError, UserInputError
    from autotrain.export.pipeline import ExportRequest, export_run
    from autotrain.export.report import card_section

    spec, folder = loaded.config.export, Path(loaded.config.project_name)
    out = Path(spec.output) if spec.output else None
    request = ExportRequest(folder, spec.format, spec.quant, out, force=True, running_ok=True)
    try:
        result = export_run(request, say=say)
    except (UserInputError, ParityError) as exc:
        say(f"error: export: {exc}")
        return (EXIT_PARITY if isinstance(exc, ParityError) else EXIT_BAD_INPUT), []
    say(f"exported to {result.folder}/" + (f"; {result.ollama_command}" if result.ollama_command else ""))
    card = folder / "README.md"
    if card.is_file():
        card.write_text(card.read_text(encoding="utf-8").rstrip() + "\n\n" + card_section(result.report), "utf-8")
    pushed = [f for f in result.files if f.suffix == ".gguf"]
    if result.ollama_command:
        pushed.append(result.folder / "Modelfile")
    return 0, pushed if spec.push_to_hub else []


def push_to_hub(loaded: LoadedConfig, extra_files: list[Path] = ()) -> str:
    """Upload the finished project folder (not its checkpoints, logs or exports) to `hub.repo_id`, and
    `extra_files` (an exported GGUF file) beside the model."""
    from huggingface_hub import HfApi

    cfg = loaded.config
    api = HfApi(token=cfg.hub.token)
    repo = api.create_repo(cfg.hub.repo_id, private=cfg.hub.private, exist_ok=True)
    api.upload_folder(
        folder_path=cfg.project_name,
        repo_id=cfg.hub.repo_id,
        ignore_patterns=[
            "checkpoint-*",
            "checkpoint-*/**",
            "logs/**",
            "run.json",
            "training_args.bin",
            "export-*/**",
            "*.failed/**",
            ".autotrain*",  # the folder's marker and locks
            ".*.lock",  # exports' locks
        ],
        commit_message="Upload model trained with autotrain",
    )
    for path in extra_files:
        message = f"Add {path.name} (autotrain export)"
        repo_id = cfg.hub.repo_id
        api.upload_file(path_or_fileobj=str(path), path_in_repo=path.name, repo_id=repo_id, commit_message=message)
    return str(repo)


def _data_lines(loaded: LoadedConfig) -> list[str]:
    """The model card's data line (secrets redacted): the path and split, or each source of a mixture with its
    share."""
    cfg, data = loaded.config, loaded.redacted()["data"]
    if not data.get("sources"):
        return [f"- data: `{data.get('path')}` (split `{data.get('train_split', 'train')}`)"]
    mixed = zip(data["sources"], cfg.data.shares(), strict=True)
    return [
        "- data: a mixture of " + ", ".join(f"`{s['path']}` [{s.get('split', 'train')}] ({x:.0%})" for s, x in mixed)
    ]
