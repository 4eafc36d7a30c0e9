"""`--dry-run`: print the resolved config and plan, without loading a model or touching the project folder.

The plan is printed even when the machine has problems with the config (they follow it on stderr), so that
what would run is never hidden behind what stops it.
"""

from __future__ import annotations

from collections.abc import Sequence

import yaml

from autotrain.config.load import LoadedConfig
from autotrain.training.plan import RunPlan


def print_plan(
    loaded: LoadedConfig, plan: RunPlan, argv_sets: Sequence[str] = (), problems: list | None = None
) -> None:
    """Print the plan, the memory estimate and the data preview; problems the preview meets join `problems`."""
    problems = [] if problems is None else problems
    from autotrain.config.interpolate import redact

    cfg = loaded.config
    print(f"# resolved config ({loaded.source}); secrets shown as ***")
    print(yaml.safe_dump(loaded.redacted(), sort_keys=False, default_flow_style=False), end="")
    print("# plan")
    what = cfg.task + (f" / trainer {cfg.trainer}" if getattr(cfg, "trainer", None) else "")
    print(f"task: {what}")
    print(
        f"effective batch size: {plan.effective_batch_size} = batch_size {plan.batch_size} x gradient_accumulation "
        f"{plan.gradient_accumulation} x processes {plan.world_size}"
        + (" (batch_size: auto, chosen by the memory estimate: see below)" if plan.batch_choice else "")
    )
    print(
        f"processes: {plan.processes_per_machine} per machine x {plan.num_machines} machine(s)"
        + (f", strategy {cfg.distributed.strategy}" if plan.world_size > 1 else "")
    )
    print(f"precision: {plan.precision.mode} on {plan.precision.device} (asked: {plan.asked_precision})")
    optimizer = plan.optimizer.record()
    print(f"optimizer: {optimizer['name']}" + (f" ({optimizer['class']})" if "class" in optimizer else ""))
    settings = optimizer.get("kwargs") or optimizer.get("training_arguments") or {}
    if settings:
        print("optimizer arguments: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    if plan.adapter is not None:
        print(f"adapter: {plan.adapter.summary()}")
    if plan.attn_implementation:  # an LLM
        asked = "" if cfg.attn_implementation == plan.attn_implementation else f" (asked: {cfg.attn_implementation})"
        rows = f"; padding-free batches: {plan.padding_free}" if plan.padding_free else ""
        print(f"attention: {plan.attn_implementation}{asked}{rows}")
    if plan.cross_entropy:  # an LLM trainer computing its own next-token loss
        print(f"loss: cross_entropy {plan.cross_entropy}")
    if plan.data.get("sources"):  # data autotrain prepares: each source's share of an epoch, or a stream
        shares = ", ".join(f"{s['path']} [{s['split']}] {s['share']:.0%}" for s in plan.data["sources"])
        print(redact(f"data: {'streamed; ' if plan.data.get('streaming') else ''}{shares}", loaded.secrets))
    print(f"output folder: {loaded.redacted()['project_name']}")
    if plan.world_size > 1:
        from autotrain.run.launch import display_command

        print("launch: " + display_command(loaded, plan, list(argv_sets)))
    trainer_args = {k: v for k, v in plan.record()["training_arguments"].items() if k not in settings}
    print(redact(_block("training arguments (what the config fields became)", trainer_args), loaded.secrets), end="")
    for extra in extra_blocks(loaded, plan, problems):
        print(redact(extra, loaded.secrets), end="")
    if problems:
        count = len(problems)
        follow = "1 problem follows" if count == 1 else f"{count} problems follow"
        print(f"dry run: nothing was trained or written; {follow} (stderr).")
    else:
        print(redact("dry run: nothing was trained or written.", loaded.secrets))


def _block(title: str, data: dict) -> str:
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    return f"{title}:\n" + "".join(f"  {line}\n" for line in body.splitlines())


def extra_blocks(loaded: LoadedConfig, plan: RunPlan, problems: list[str]) -> list[str]:
    """The memory estimate and, for data on this machine, the data preview; a data problem the preview
    meets (a missing column, ...) joins `problems`."""
    from autotrain.errors import UserInputError
    from autotrain.run.fit import memory_lines, memory_record
    from autotrain.run.preview import local_data, preview_lines, preview_record

    cfg = loaded.config
    blocks = ["\n".join(memory_lines(memory_record(cfg, plan, cfg.hub.token))) + "\n"]
    if not local_data(cfg):
        blocks.append("# data preview: data.path is not on this machine; `--preview` downloads it and shows it\n")
        return blocks
    try:
        blocks.append("\n".join(preview_lines(preview_record(cfg, plan, PREVIEW_COUNT, cfg.hub.token))) + "\n")
    except UserInputError as exc:
        problems.append(str(exc))
    except Exception as exc:  # noqa: BLE001 - the preview is a courtesy: the dry run's answer stands without it
        blocks.append(f"# data preview: unavailable ({type(exc).__name__}: {exc})\n")
    return blocks


PREVIEW_COUNT = 3
