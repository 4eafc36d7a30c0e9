"""More than one process: hand the run to `accelerate launch`, one rank per GPU (or CPU process).

The parent `autotrain` process checks the project folder, then runs accelerate's launcher (the torch
elastic agent, as torchrun does), which starts `python -m autotrain.cli.main <task> --config F ...` in
every rank with AUTOTRAIN_LAUNCHED=1, so that each rank trains instead of launching again.

The launcher runs in this process rather than as a child so the ranks' exit codes survive: accelerate's
own command line turns any rank failure into exit status 1, while its exception still lists each rank's
code, and a rank that stopped on bad input (2) or divergence (3) should make the whole run say so.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
from collections.abc import Sequence

from autotrain.config.load import LoadedConfig
from autotrain.errors import (
    EXIT_BAD_INPUT,
    EXIT_DIVERGED,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_SIGINT,
    EXIT_SIGTERM,
    UserInputError,
    debug_enabled,
    eprint,
)
from autotrain.run.distributed import check_hardware, strategy_flags, write_launch_files
from autotrain.run.process import ACCELERATE_LAUNCHED, LAUNCHED_ENV, PARENT_ENV
from autotrain.training.plan import RunPlan, visible_gpus

LAUNCHER = ("-m", "accelerate.commands.launch")
RANK_ENTRY = ("-m", "autotrain.cli.main")
_KEPT_CODES = (EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_SIGINT, EXIT_SIGTERM)


def launcher_args(loaded: LoadedConfig, plan: RunPlan) -> list[str]:
    """`accelerate launch` options for this machine: topology, precision, strategy (all from the plan)."""
    cfg = loaded.config
    dist = cfg.distributed
    # accelerate counts processes over all machines; the config counts them per machine.
    args = ["--num_processes", str(plan.world_size), "--num_machines", str(dist.num_machines)]
    if dist.num_machines > 1:
        args += ["--machine_rank", str(dist.machine_rank), "--main_process_ip", str(dist.main_process_ip)]
    args += ["--main_process_port", str(dist.main_process_port)]
    args += ["--mixed_precision", plan.precision.mode, "--dynamo_backend", "no"]
    return args + strategy_flags(cfg)


def rank_args(loaded: LoadedConfig, argv_sets: Sequence[str] = (), resume: str | None = None) -> list[str]:
    """What each rank runs after `python -m autotrain.cli.main`: the same config, overrides and resume.

    No `--overwrite`: the parent has already replaced the old run, and a rank must not delete the folder
    the others are writing to.
    """
    args = [loaded.config.task, "--config", loaded.source]
    for item in argv_sets:
        args += ["--set", item]
    if resume:
        args += ["--resume", resume]
    return args


def launch_command(
    loaded: LoadedConfig, plan: RunPlan, argv_sets: Sequence[str], resume: str | None = None
) -> list[str]:
    """The full command line `relaunch` runs (in-process); printed by `--dry-run`. Creates no files."""
    return [
        sys.executable,
        *LAUNCHER,
        *launcher_args(loaded, plan),
        *RANK_ENTRY,
        *rank_args(loaded, argv_sets, resume),
    ]


def display_command(
    loaded: LoadedConfig, plan: RunPlan, argv_sets: Sequence[str] = (), resume: str | None = None
) -> str:
    """`launch_command` as one shell line; secrets (`--set hub.token=...`, `${HF_TOKEN}` values) hidden."""
    from autotrain.config.interpolate import REDACTED, SECRET_KEYS, redact

    shown = []
    for item in argv_sets:
        key, sep, _ = item.partition("=")
        shown.append(f"{key}={REDACTED}" if sep and key.rsplit(".", 1)[-1].lower() in SECRET_KEYS else item)
    return redact(shlex.join(launch_command(loaded, plan, shown, resume)), loaded.secrets)


def rank_exit_code(code: int) -> int:
    """One rank's exit status as a documented code (negative = killed by that signal)."""
    if code in _KEPT_CODES:
        return code
    if code == -signal.SIGINT:
        return EXIT_SIGINT
    if code == -signal.SIGTERM:
        return EXIT_SIGTERM
    return EXIT_OK if code == 0 else EXIT_FAILURE


def run_exit_code(codes: dict[int, int], first: int | None = None) -> int:
    """The run's exit code from the failed ranks' codes.

    A rank that stopped on bad input or divergence says why the run failed; otherwise the first rank to
    fail does. The agent stops the others once one has failed, so they show up as signalled: that a
    signal ends them must not hide the failure that caused it.
    """
    mapped = {rank: rank_exit_code(code) for rank, code in codes.items()}
    ordered = ([mapped[first]] if first in mapped else []) + list(mapped.values())
    found = [code for code in ordered if code in (EXIT_BAD_INPUT, EXIT_DIVERGED)]
    if found:
        return found[0]
    failed = [code for code in ordered if code != EXIT_OK]
    return failed[0] if failed else (EXIT_OK if mapped else EXIT_FAILURE)


def _quiet_agent() -> None:
    """The elastic agent logs each start and stop; the ranks and our summary line say what matters."""
    import logging

    if debug_enabled():
        return
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(("torch.distributed.elastic", "torch.distributed.run", "torch.distributed.launcher")):
            logging.getLogger(name).setLevel(logging.CRITICAL)


@contextlib.contextmanager
def _port_held_by_check_in(held: bool):
    """Machine 0's check-in store (run/rendezvous.py) already serves main_process_port, and the launcher's
    rendezvous reuses that server (both are multi-tenant TCPStores in this process): accelerate's test that
    the port is free would refuse it, so it is skipped while the launcher starts."""
    import accelerate.utils.launch as accelerate_launch_utils

    original = getattr(accelerate_launch_utils, "is_port_in_use", None)
    if not held or original is None:  # nothing to skip (a later accelerate may not test the port here)
        yield
        return
    accelerate_launch_utils.is_port_in_use = lambda port=None: False
    try:
        yield
    finally:
        accelerate_launch_utils.is_port_in_use = original


def _run_launcher(args: list[str], world: int, port_held: bool = False) -> tuple[int, str | None]:
    """Start the ranks and wait for them: (the run's exit code, how it ended when a rank failed)."""
    import subprocess

    import torch.distributed.run  # noqa: F401  (imported here so that _quiet_agent reaches its loggers)
    from accelerate.commands.launch import launch_command as accelerate_launch
    from accelerate.commands.launch import launch_command_parser
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from autotrain.training.lifetime import identity, to_env

    parsed = launch_command_parser().parse_args(args)
    _quiet_agent()
    previous = {name: os.environ.get(name) for name in (LAUNCHED_ENV, PARENT_ENV)}
    os.environ[LAUNCHED_ENV] = ACCELERATE_LAUNCHED  # inherited by every rank: they train, not launch
    os.environ[PARENT_ENV] = to_env(identity())  # ... and end with this process (run/rank.py)
    try:
        with _port_held_by_check_in(port_held):
            accelerate_launch(parsed)
        return EXIT_OK, None
    except ChildFailedError as exc:
        return _failed_ranks(exc, world)
    except ConnectionError as exc:  # accelerate: the port on machine 0 is taken
        raise UserInputError(f"{exc} (distributed.main_process_port)") from None
    except SignalException as exc:
        eprint("interrupted: every rank was told to stop")
        return (EXIT_SIGINT if exc.sigval == signal.SIGINT else EXIT_SIGTERM), "the launcher was told to stop"
    except KeyboardInterrupt:
        eprint("interrupted")
        return EXIT_SIGINT, "the launcher was interrupted"
    except subprocess.CalledProcessError as exc:  # accelerate's single-process and DeepSpeed ssh launchers
        eprint(f"error: the launched run exited with code {exc.returncode}")
        return rank_exit_code(exc.returncode), f"the launched run exited with code {exc.returncode}"
    except SystemExit as exc:
        return (EXIT_OK if not exc.code else rank_exit_code(exc.code if isinstance(exc.code, int) else 1)), None
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _failed_ranks(exc, world: int) -> tuple[int, str]:
    """The run's exit code from the ranks' failures, and how the first one ended (said, and recorded)."""
    codes = {rank: failure.exitcode for rank, failure in exc.failures.items()}
    first, failure = exc.get_first_failure()
    code = run_exit_code(codes, first)
    ended = failure.exitcode
    how = f"rank {first} of {world} " + (
        f"was killed by {signal.Signals(-ended).name}" if ended < 0 and -ended in signal.valid_signals() else
        f"exited with code {ended}"
    )  # fmt: skip
    if code in (EXIT_SIGINT, EXIT_SIGTERM):  # a signal sent to a rank rather than to this process
        eprint(f"interrupted: rank {first} of {world} stopped on a signal (exit code {code})")
    else:
        eprint(f"error: {how}; the run was stopped (exit code {code})")
    return code, how


def relaunch(
    loaded: LoadedConfig,
    plan: RunPlan,
    resume: str | None = None,
    argv_sets: Sequence[str] = (),
    port_held: bool = False,
) -> tuple[int, str | None]:
    """Run the config in `plan.world_size` processes; returns the run's exit code and, when a rank failed,
    how (for run.json).

    Raises UserInputError (exit 2 in the runner) for what can be refused before any process starts.
    """
    cfg = loaded.config
    dist = cfg.distributed
    check_hardware(cfg, visible_gpus(), plan.processes_per_machine)
    write_launch_files(cfg)
    command = launch_command(loaded, plan, argv_sets, resume)
    where = ""
    if dist.num_machines > 1:
        where = f" on {dist.num_machines} machines (this is machine {dist.machine_rank})"
    eprint(f"launching {plan.world_size} processes ({dist.strategy}){where} with accelerate")
    if debug_enabled():
        eprint("launch: " + display_command(loaded, plan, argv_sets, resume))
    return _run_launcher(command[1 + len(LAUNCHER) :], plan.world_size, port_held and dist.machine_rank == 0)
