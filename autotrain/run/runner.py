"""The parent: claim the project folder, resolve the plan, then train here (one process, run/train.py) or
launch the ranks (accelerate, Ray) and wait for them. What a rank does is in run/rank.py; a process started
as a rank goes straight there.

Exit codes: those of run/rank.py (0 done, 1 failure, 2 bad input, 3 diverged, 5 out of memory, 130 / 143
interrupted).
"""

from __future__ import annotations

import os

from autotrain.config.load import LoadedConfig
from autotrain.errors import EXIT_BAD_INPUT, EXIT_OK, UserInputError
from autotrain.run.process import Run, launched
from autotrain.run.rank import failure_code, run_rank
from autotrain.run.train import resolve, train
from autotrain.training.quiet import quiet_bars


def run(
    loaded: LoadedConfig, resume: str | None = None, overwrite: bool = False, argv_sets=(), accept_changes: bool = False
) -> int:
    """Claim the project folder, then train here or in several processes; returns the exit code.

    `accept_changes`: a resume whose config differs from the run's record goes on with the new values
    (without it, it is refused with the list of differences)."""
    if launched():  # a rank a launcher started: the parent has claimed the folder already
        return run_rank(loaded, resume, argv_sets)
    quiet_bars()  # before anything imports transformers (and tqdm)
    this = Run(loaded, argv_sets)
    project = None
    stop = None
    try:
        if this.cfg.distributed.machine_rank == 0:
            from autotrain.run.project import ProjectFolder

            # Claimed before the training stack is imported: a refusal here takes a fraction of a second.
            project = ProjectFolder(this.folder).claim(resume, overwrite)
            _note_taken_over(this, project)
            if resume and _finished(this):
                return EXIT_OK
            if resume:
                _check_changes(this, accept_changes)
        else:  # machine 0 claims the (shared) folder; the others only write into it
            this.folder.mkdir(parents=True, exist_ok=True)
        from autotrain.training.signals import GracefulStop

        stop = GracefulStop()
        stop.install()
        # The preflight before the check-in: a machine that lacks a package says so and leaves, and the
        # others' check-in names it as missing within rendezvous_timeout, instead of waiting in the launcher.
        this.plan = resolve(this, resume)
        ray = this.cfg.distributed.backend == "ray"  # Ray places the workers: no machines to check in
        if this.cfg.distributed.num_machines > 1 and not ray:  # before the model loads: fail in seconds
            from autotrain.run.rendezvous import check_in

            this.rendezvous = check_in(this.cfg.distributed)  # kept: the launcher reuses its server
        if ray or this.plan.world_size > 1:
            return _launch(this, resume, ray)
        return train(this, resume, stop)
    except BaseException as exc:
        code = failure_code(this, exc)
        if code == EXIT_BAD_INPUT and project is not None and not this.started:
            project.abandon()  # nothing trained: leave nothing that blocks the corrected rerun
        return code
    finally:
        if stop is not None:
            stop.uninstall()
        if project is not None:
            project.release()


def _launch(this: Run, resume: str | None, ray: bool) -> int:
    """Start the ranks (Ray or accelerate), wait for them, and settle the record of a run they left `running`
    (a rank killed before it could write how the run ended)."""
    from autotrain.run.fit import batch_env
    from autotrain.run.manifest import settle

    os.environ.update(batch_env(this.plan))  # `batch_size: auto`: the ranks take the batch decided here
    if ray:
        from autotrain.run.ray_launch import run_on_ray

        code, how = run_on_ray(this.loaded, this.plan, resume=resume, argv_sets=this.argv_sets), None
    else:
        from autotrain.run.launch import relaunch

        held = this.rendezvous is not None
        code, how = relaunch(this.loaded, this.plan, resume=resume, argv_sets=this.argv_sets, port_held=held)
    if this.cfg.distributed.machine_rank == 0:
        settle(this.folder, code, how)
    return code


def _note_taken_over(this: Run, project) -> None:
    """The folder was left locked by a process that ended without releasing it (killed): say so, and settle
    the record it left `running` (this process holds the folder now, so that process is surely gone)."""
    from autotrain.training.folder import settle
    from autotrain.training.locks import describe

    if project.took_over is not None:
        this.say(
            f"note: the lock of {this.folder} named {describe(project.took_over)}, which ended without releasing "
            "it (killed, or its machine or container stopped); taken over"
        )
    settled = settle(this.folder, claimed=True)
    if settled is not None:
        where = settled["last_checkpoint"] or "no complete checkpoint"
        this.say(f"note: run.json said `running`, but {settled['how']}; recorded as `died` ({where})")


def _check_changes(this: Run, accept: bool) -> None:
    """`--resume` with a config that differs from the run's record: list every difference; go on only with
    `accept` (the schedule's length may change without it)."""
    from autotrain.run.fingerprint import data_fingerprint, differences, fingerprint, is_length
    from autotrain.training.folder import run_record

    record = run_record(this.folder)
    if not record.get("fingerprint"):
        this.say(f"note: {this.folder}/run.json records no fingerprint of the run; the config is taken as it is")
        return
    found = differences(record["fingerprint"], record.get("data"), fingerprint(this.loaded), data_fingerprint(this.cfg))
    for difference in filter(is_length, found):
        this.say(f"note: {difference.line()} (the schedule now ends there)")
    changed = [d for d in found if not is_length(d)]
    if not changed:
        return
    listed = "".join(f"\n  {d.line()}" for d in changed)
    if not accept:
        raise UserInputError(
            f"--resume: the config differs from the run in `{this.folder}` (its run.json):{listed}\n"
            "To continue the run as it was, restore these values; to continue with the new ones from the resumed "
            "step, add --accept-changes (run.json records them)."
        )
    this.say(f"resuming with changes (--accept-changes), applied from the resumed step:{listed}")


def _finished(this: Run) -> bool:
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
