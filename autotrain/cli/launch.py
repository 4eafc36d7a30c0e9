"""`autotrain launch --config F --target slurm|kubernetes|skypilot|torchrun`: the spec a scheduler runs."""

from __future__ import annotations

from pathlib import Path

import typer

from autotrain.cli.common import ConfigOption, SetOption, fail, report_config_error
from autotrain.errors import EXIT_BAD_INPUT

TARGET_HELP = (
    "slurm (an sbatch script), kubernetes (a Kubeflow PyTorchJob), skypilot (a task YAML) or torchrun "
    "(the command for each machine)."
)


def launch(
    config: Path = ConfigOption,
    target: str = typer.Option(..., "--target", "-t", help=TARGET_HELP, show_default=False, metavar="TARGET"),
    nodes: int = typer.Option(
        None, "--nodes", "-n", min=1, max=4096, help="Machines (default: cluster.nodes, else distributed.num_machines)."
    ),
    output: Path = typer.Option(
        None, "--output", "-o", help="Write the spec here instead of printing it.", metavar="FILE"
    ),
    force: bool = typer.Option(False, "--force", help="Replace an existing --output file."),
    set_: list[str] = SetOption,
) -> None:
    """Write what Slurm, Kubernetes, SkyPilot or each machine runs to train this config on several machines."""
    from autotrain.config.load import load_config
    from autotrain.errors import ConfigError, UserInputError
    from autotrain.run.cluster import TARGETS, render

    if target not in TARGETS:
        raise fail(f"--target {target}: choose one of {', '.join(TARGETS)}", EXIT_BAD_INPUT)
    if config is None:
        raise fail("missing --config FILE", EXIT_BAD_INPUT)
    if output is not None and output.exists() and not force:
        raise fail(f"{output} exists; choose another -o FILE or add --force", EXIT_BAD_INPUT)
    try:
        loaded = load_config(config, set_ or [])
        text = render(loaded, target, nodes, set_ or [])
    except ConfigError as exc:
        raise report_config_error(exc, config) from None
    except UserInputError as exc:
        raise fail(str(exc), EXIT_BAD_INPUT) from None
    if output is None:
        print(text, end="")
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    if target == "slurm":
        output.chmod(0o755)
    print(f"wrote {output}")
