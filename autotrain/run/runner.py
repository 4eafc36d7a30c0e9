"""Run a validated config: build the trainer, train, save; map every outcome to an exit code.

Exit codes: 0 done, 1 failure during training (traceback in project_name/logs/), 2 bad input,
3 diverged (non-finite loss), 130 / 143 interrupted by SIGINT / SIGTERM after saving a checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from autotrain.config.load import LoadedConfig
from autotrain.errors import EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_FAILURE, EXIT_OK, UserInputError, debug_enabled, eprint
from autotrain.run.launch import LAUNCHED_ENV
from autotrain.run.ray_launch import RAY_LAUNCHED
from autotrain.training.quiet import quiet_bars, quiet_libraries


def _write_traceback(folder: Path, secrets: set[str]) -> Path | None:
    from autotrain.config.interpolate import redact

    try:
        (folder / "logs").mkdir(parents=True, exist_ok=True)
        rank = os.environ.get("RANK")
        path = folder / "logs" / (f"error-rank{rank}.log" if rank not in (None, "0") else "error.log")
        path.write_text(redact(traceback.format_exc(), secrets), encoding="utf-8")
        return path
    except OSError:
        return None


def resume_command(loaded: LoadedConfig, argv_sets: list[str]) -> str:
    parts = ["autotrain", loaded.config.task, "--config", loaded.source]
    for item in argv_sets:
        parts += ["--set", item]
    return shlex.join([*parts, "--resume"])


class _Run:
    """One run of a validated config in this process: what it says, what it wrote, how it ended."""

    def __init__(self, loaded: LoadedConfig, argv_sets: Sequence[str]):
        self.loaded = loaded
        self.cfg = loaded.config
        self.folder = Path(self.cfg.project_name)
        self.argv_sets = list(argv_sets)
        # a rank started by run.launch ("1") or a Ray Train worker (run.ray_launch)
        self.launched = os.environ.get(LAUNCHED_ENV) in ("1", RAY_LAUNCHED)
        self.main_process = os.environ.get("RANK", "0") == "0"
        self.manifest = None
        self.started = False  # trainer.train() was entered
        self.plan = None  # RunPlan, once resolved
        self.rendezvous = None  # the multi-node check-in store (machine 0 serves it while the run lasts)

    def say(self, message: str, every_rank: bool = False) -> None:
        """Progress messages come from the main process only; errors from every rank that has one."""
        from autotrain.config.interpolate import redact

        if self.main_process or every_rank:
            prefix = "" if self.main_process or not self.launched else f"[rank {os.environ.get('RANK')}] "
            eprint(prefix + redact(message, self.loaded.secrets))

    def finish(self, status: str, code: int, last: str | None) -> int:
        if self.manifest is not None:
            with contextlib.suppress(OSError):
                self.manifest.finish(status, code, last)
        return code


def run(loaded: LoadedConfig, resume: str | None = None, overwrite: bool = False, argv_sets=()) -> int:
    """Claim the project folder, then train here or in several processes; returns the exit code."""
    quiet_bars()  # before anything imports transformers (and tqdm)
    this = _Run(loaded, argv_sets)
    project = None
    stop = None
    try:
        if not this.launched:  # under a launcher the parent process has claimed the folder already
            from autotrain.run.project import ProjectFolder

            if this.cfg.distributed.machine_rank == 0:
                # Claimed before the training stack is imported: a refusal here takes a fraction of a second.
                project = ProjectFolder(this.folder).claim(resume, overwrite)
                if resume and _finished(this):
                    return EXIT_OK
            else:  # machine 0 claims the (shared) folder; the others only write into it
                this.folder.mkdir(parents=True, exist_ok=True)
            ray = this.cfg.distributed.backend == "ray"  # Ray places the workers: no machines to check in
            if this.cfg.distributed.num_machines > 1 and not ray:  # before the training stack loads: fail in seconds
                from autotrain.run.rendezvous import check_in

                this.rendezvous = check_in(this.cfg.distributed)  # kept: the launcher reuses its server
        from autotrain.training.signals import GracefulStop

        stop = GracefulStop()
        stop.install()
        this.plan = _resolve(this)
        if os.environ.get(LAUNCHED_ENV) == "1" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            from autotrain.run.rendezvous import check_ranks

            check_ranks(this.cfg.distributed.rendezvous_timeout)  # before the model loads
        if not this.launched and this.cfg.distributed.backend == "ray":
            from autotrain.run.ray_launch import run_on_ray

            return run_on_ray(loaded, this.plan, resume=resume, argv_sets=this.argv_sets)
        if not this.launched and this.plan.world_size > 1:
            from autotrain.run.launch import relaunch

            held = this.rendezvous is not None
            return relaunch(loaded, this.plan, resume=resume, argv_sets=this.argv_sets, port_held=held)
        return _train(this, resume, stop)
    except BaseException as exc:
        code = _failure_code(this, exc)
        if code == EXIT_BAD_INPUT and project is not None and not this.started:
            project.abandon()  # nothing trained: leave nothing that blocks the corrected rerun
        return code
    finally:
        if stop is not None:
            stop.uninstall()
        if project is not None:
            project.release()


def _finished(this: _Run) -> bool:
    """`--resume` on a completed run: True (say so, touch nothing) unless max_steps / epochs grew."""
    import json

    from autotrain.training.folder import run_status

    if run_status(this.folder) != "completed":
        return False
    try:
        state = json.loads((this.folder / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        state = {}
    args = this.cfg.training_args
    done_steps, done_epochs = state.get("global_step", 0), state.get("num_train_epochs", 0)
    grew = args.max_steps > done_steps if args.max_steps is not None else args.epochs > done_epochs
    if grew:
        this.say(f"the run in {this.folder} is finished; continuing it to the longer schedule asked for")
        return False
    this.say(
        f"the run in {this.folder} is already finished (step {done_steps}); nothing to resume. "
        "To train longer, raise training_args.max_steps (or epochs) and --resume again."
    )
    return True


def _resolve(this: _Run):
    """The plan, decided once in this process, and the checks that need no weights (one error for all ranks)."""
    from autotrain.training.plan import preflight, resolve_plan

    plan = resolve_plan(this.cfg)
    problems = preflight(this.cfg, plan)
    if problems:
        raise UserInputError("; ".join(problems))
    return plan


def _train(this: _Run, resume: str | None, stop) -> int:
    from transformers.trainer_callback import PrinterCallback

    from autotrain.trainers import build_trainer
    from autotrain.training.checkpoints import AtomicCheckpoints, find_resume_checkpoint
    from autotrain.training.guards import install_loss_hooks
    from autotrain.training.metrics_log import MetricsLog
    from autotrain.training.progress import ProgressCallback

    cfg, folder = this.cfg, this.folder
    checkpoint = find_resume_checkpoint(folder, resume, warn=this.say) if resume else None
    if checkpoint:
        this.say(f"resuming from {checkpoint}")
    quiet_libraries()
    memory = _memory_estimate(this)
    from autotrain.training.memory import current_anon, mark_baseline

    before_model = current_anon()
    progress = ProgressCallback()
    # The builder returns the plan it ran: the resolved one, or one it refined (recorded as such).
    trainer, this.plan = build_trainer(cfg, this.plan, [progress, stop], token=cfg.hub.token)
    trainer.remove_callback(PrinterCallback)  # our progress display replaces its raw dict lines
    install_loss_hooks(trainer, cfg.training_args.nan_policy)
    AtomicCheckpoints(folder, cfg.training_args.save_total_limit, [checkpoint] if checkpoint else []).attach(trainer)
    progress.trainer = trainer
    trainer.add_callback(MetricsLog(folder, trainer))  # logs/metrics.jsonl: live charts in `autotrain app`
    if trainer.args.world_size > 1:
        this.say(f"processes: {trainer.args.world_size} (world size)")
    _start_manifest(this, memory)
    this.started = True
    mark_baseline(trainer.model, before_model)  # the measured peak leaves out what is not the model's
    try:
        result = trainer.train(resume_from_checkpoint=checkpoint)
    finally:
        progress.close()
    if stop.agreed is not None:  # the same on every rank: all save and stop, or none
        code = _interrupted(this, trainer, stop.agreed)
        stop.wait_for_other_ranks()  # none exits while another still writes the checkpoint
    else:
        code = _completed(this, trainer, dict(result.metrics))
    _leave_process_group()
    return code


def _leave_process_group() -> None:
    """Tear the rank's process group down here, once its last collective is done, rather than in the
    interpreter's exit: gloo's threads destroyed during exit now and then abort the process (`terminate
    called without an active exception`, exit -6), which turned a finished run into a failed one."""
    if os.environ.get(LAUNCHED_ENV) != "1":  # only ranks the launcher started (Ray tears its own down)
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def _memory_estimate(this: _Run) -> dict | None:
    """The memory estimate for run.json (main process only), shown when the run would not fit."""
    if not this.main_process:
        return None
    from autotrain.run.fit import memory_lines, memory_record

    record = memory_record(this.cfg, this.plan, token=this.cfg.hub.token)
    if record.get("fits") is False:
        this.say("\n".join(memory_lines(record)))
    return record


def _start_manifest(this: _Run, memory: dict | None = None) -> None:
    """run.json, written once the data and model are known good (so a refused run leaves none)."""
    if not this.main_process:
        return
    from autotrain.config.interpolate import redact
    from autotrain.run.manifest import RunManifest

    argv = [redact(a, this.loaded.secrets) for a in sys.argv]
    this.manifest = RunManifest(this.loaded, this.plan, this.folder, argv)
    if memory is not None:
        this.manifest.data["memory"] = memory
    this.manifest.write()


def _record_memory(this: _Run) -> None:
    """The measured peak beside the estimate in run.json (and then the model card)."""
    if this.manifest is None or "memory" not in this.manifest.data:
        return
    from autotrain.run.fit import add_measured

    this.manifest.data["memory"] = add_measured(this.manifest.data["memory"], this.plan.precision.device)


def _record_compile_choices(this: _Run, trainer) -> None:
    """What CAME's auto compile measured (on CUDA), in run.json and one line."""
    from autotrain.training.guards import compile_choices

    choices = compile_choices(getattr(trainer, "optimizer", None))
    if not choices:
        return
    kept = sum(choice["kept"] == "compiled" for choice in choices)
    failed = sum("failure" in choice for choice in choices)
    this.say(
        f"optimizer: the compiled step measured faster and kept for {kept} of {len(choices)} groups of "
        "same-shaped parameters"
        + (f"; {failed} took the eager step after it failed" if failed else "")
        + " (run.json: optimizer_compile)"
    )
    if this.manifest is not None:
        this.manifest.data["optimizer_compile"] = choices


def _interrupted(this: _Run, trainer, signum: int) -> int:
    from autotrain.training.signals import Interrupted

    code = Interrupted(signum).exit_code
    last = _last_checkpoint(this.folder)
    this.say(
        f"interrupted: checkpoint saved to {last} (step {trainer.state.global_step}); "
        f"resume with:\n  {resume_command(this.loaded, this.argv_sets)}"
    )
    return this.finish("interrupted", code, last)


def _completed(this: _Run, trainer, metrics: dict) -> int:
    from autotrain.run.outputs import save_final

    if getattr(trainer, "skipped_batches", 0):
        metrics["skipped_batches"] = trainer.skipped_batches
        this.say(f"warning: skipped {trainer.skipped_batches} batch(es) with a non-finite loss")
    if getattr(trainer, "skipped_tensors", 0):
        metrics["skipped_tensors"] = trainer.skipped_tensors
        this.say(f"warning: the optimizer skipped {trainer.skipped_tensors} parameter update(s): non-finite gradient")
    _record_compile_choices(this, trainer)
    _record_memory(this)  # before saving: the peak of training, not of writing the model
    save_final(trainer, this.loaded, this.plan, metrics)
    if this.manifest is not None and "memory" in this.manifest.data:
        from autotrain.run.outputs import add_memory_to_card

        add_memory_to_card(this.folder, this.manifest.data["memory"])
    this.say(f"done: model saved to {this.folder}/ ({_losses(trainer, metrics)})")
    code, exported = EXIT_OK, []
    if getattr(this.cfg, "export", None) is not None and trainer.is_world_process_zero():
        from autotrain.run.outputs import export_after_training

        code, exported = export_after_training(this.loaded, this.say)
    if this.cfg.hub.push_to_hub and trainer.is_world_process_zero():
        from autotrain.run.outputs import push_to_hub

        this.say(f"pushed to {push_to_hub(this.loaded, exported)}")
    return this.finish("completed", code, _last_checkpoint(this.folder))


def _losses(trainer, metrics: dict) -> str:
    """`final loss 1.6312 at step 50; mean train loss over the run 2.9229`: the Trainer's `train_loss` is the mean of
    every step, far above where the progress display ended; both are said, each by its name."""
    logged = [e for e in trainer.state.log_history if isinstance(e.get("loss"), (int, float))]
    mean = f"mean train loss over the run {metrics.get('train_loss', float('nan')):.4f}"
    return f"final loss {logged[-1]['loss']:.4f} at step {logged[-1]['step']}; {mean}" if logged else mean


def _failure_code(this: _Run, exc: BaseException) -> int:
    """Report an exception that ended the run and return its exit code (re-raise what is not ours)."""
    if isinstance(exc, UserInputError):
        if debug_enabled():
            traceback.print_exc()
        this.say(f"error: {exc}", every_rank=True)
        return this.finish("bad input", EXIT_BAD_INPUT, None)
    if not isinstance(exc, Exception):  # SystemExit, KeyboardInterrupt: not ours to map
        raise exc
    from autotrain.training.guards import Diverged
    from autotrain.training.signals import Interrupted

    if isinstance(exc, Interrupted):
        this.say(f"interrupted by {exc} before training started; nothing to save")
        return this.finish("interrupted", exc.exit_code, _last_checkpoint(this.folder))
    last = _last_checkpoint(this.folder)
    if isinstance(exc, Diverged):
        this.say(f"error: {exc}" + (f"; the last good checkpoint is {last}" if last else ""), every_rank=True)
        return this.finish("diverged", EXIT_DIVERGED, last)
    from autotrain.training.verify import refused_pickle

    if refused_pickle(exc):  # torch refused to unpickle a model file: the input, not the run (and no advice)
        this.say(f"error: the model files (base_model or a checkpoint): {refused_pickle(exc)}", every_rank=True)
        return this.finish("bad input", EXIT_BAD_INPUT, last)
    log = _write_traceback(this.folder, this.loaded.secrets)
    if debug_enabled():
        traceback.print_exc()
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    this.say(f"error: training failed: {type(exc).__name__}: {first}", every_rank=True)
    if log is not None:
        this.say(f"full traceback: {log}", every_rank=True)
    return this.finish("failed", EXIT_FAILURE, last)


def _last_checkpoint(folder: Path) -> str | None:
    from autotrain.training.checkpoints import is_complete, list_checkpoints

    complete = [p for p in list_checkpoints(folder) if is_complete(p)]
    return str(complete[-1]) if complete else None
