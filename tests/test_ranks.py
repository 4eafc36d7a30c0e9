"""Decisions that change which collectives run are the same on every rank (autotrain.training.ranks).

Two gloo processes are made to disagree locally (a packing check that passes on one rank only, a loss that
is non-finite on one rank, skips counted on one shard, a checkpoint seen differently, a signal to one
rank): both end with the same decision, and then run the collectives that decision implies without
hanging (the harness fails the test after its timeout rather than waiting).
"""

from __future__ import annotations

import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from autotrain.training import ranks
from autotrain.training.folder import COMPLETE_MARKER

TIMEOUT = 240  # two fresh interpreters importing torch and transformers on a loaded 2-core machine


def test_one_process_decides_alone_and_runs_no_collective():
    assert torch.distributed.is_initialized() is False
    assert ranks.group() is None
    assert ranks.on_every_rank(True) and not ranks.on_every_rank(False)
    assert ranks.on_any_rank(True) and not ranks.on_any_rank(False)
    assert ranks.largest(7) == 7
    assert ranks.main_rank_value("x") == "x"


def _packing(rank: int) -> bool:
    """sft's choice of row packing when the packing check passes on rank 0 only."""
    import autotrain.training.batching as batching
    from autotrain.trainers.llm.sft import batching_for_model

    check = batching.keeps_packed_samples_apart
    batching.keeps_packed_samples_apart = lambda model: rank == 0
    try:
        plan = SimpleNamespace(padding_free="rows", refine=lambda why, **changes: SimpleNamespace(**changes))
        return batching_for_model(plan, None).padding_free == "rows"
    finally:
        batching.keeps_packed_samples_apart = check


def _halt(rank: int) -> str:
    """The divergence guard under `halt` when only rank 1's loss is non-finite."""
    from autotrain.training.guards import Diverged, install_loss_hooks

    loss = torch.tensor(float("nan") if rank == 1 else 1.0, requires_grad=True)
    trainer = SimpleNamespace(
        compute_loss=lambda model, inputs, return_outputs=False, **kw: loss,
        state=SimpleNamespace(global_step=4),
        add_callback=lambda callback: None,
    )
    install_loss_hooks(trainer, "halt")
    model = torch.nn.Linear(2, 2)
    try:
        trainer.compute_loss(model, {"input_ids": torch.ones(1, 3, dtype=torch.long)})
    except Diverged as exc:
        return str(exc)
    return "trained on"


def _skips(rank: int) -> int | None:
    """The step at which the skip guard stops when only rank 1's shard skips tensors, every step."""
    from autotrain.training.guards import RepeatedSkips, skip_guard

    optimizer = SimpleNamespace(skipped_tensors=0)
    trainer = SimpleNamespace(optimizer=optimizer)
    guard = skip_guard(trainer, limit=3)
    for step in range(1, 8):
        optimizer.skipped_tensors += rank  # rank 1 skips one tensor a step, rank 0 none
        try:
            guard.on_step_end(None, SimpleNamespace(global_step=step), None)
        except RepeatedSkips:
            return step
    return None


def _checkpoints(rank: int, out: Path) -> tuple[str, str]:
    """The checkpoint every rank resumes from when each found a different one (rank 0: checkpoint-2), and
    what happens when rank 1 does not see rank 0's as complete."""
    from autotrain.errors import UserInputError
    from autotrain.training import checkpoints

    mine = out / f"rank{rank}" / f"checkpoint-{2 + 2 * rank}"
    mine.mkdir(parents=True, exist_ok=True)
    (mine / "trainer_state.json").write_text("{}")
    (mine / COMPLETE_MARKER).write_text("complete\n")
    agreed = checkpoints.same_checkpoint_on_every_rank(str(mine))
    seen = checkpoints.is_complete
    if rank == 1:
        checkpoints.is_complete = lambda path: False  # this machine has no copy of rank 0's folder
    try:
        checkpoints.same_checkpoint_on_every_rank(str(mine))
        refused = "resumed"
    except UserInputError as exc:
        refused = str(exc)
    finally:
        checkpoints.is_complete = seen
    return agreed, refused


def _stop(rank: int) -> int | None:
    """The stop flag when only rank 1 got SIGTERM."""
    from autotrain.training.signals import signal_on_any_rank, stop_flag_group

    return signal_on_any_rank(signal.SIGTERM if rank == 1 else None, stop_flag_group())


def disagreeing_ranks(rank: int, world: int, out: Path) -> dict:
    """Each local decision made to differ between the two ranks, then the collectives each decision
    leads to (a gather where packing was chosen, as RowPackedTrainer does; a barrier otherwise)."""
    import torch.distributed as dist

    packed = _packing(rank)
    if packed:
        gathered = [torch.zeros(1) for _ in range(world)]
        dist.all_gather(gathered, torch.ones(1))
    else:
        dist.barrier()
    return {
        "every": ranks.on_every_rank(rank == 0),
        "any": ranks.on_any_rank(rank == 1),
        "largest": ranks.largest(3 + 4 * rank),
        "main": ranks.main_rank_value(f"rank {rank}"),
        "packed": packed,
        "halt": _halt(rank),
        "skips": _skips(rank),
        "checkpoints": _checkpoints(rank, out),
        "stop": _stop(rank),
        "one group": ranks.group() is ranks.group(),
    }


@pytest.mark.slow
def test_two_ranks_that_disagree_locally_take_the_same_decision(tmp_path):
    from fsdp_training import spawn

    first, second = spawn(disagreeing_ranks, out=tmp_path, timeout=TIMEOUT)
    assert first["every"] is False and first["any"] is True and first["largest"] == 7
    assert first["main"] == "rank 0"
    assert first["packed"] is False, "packed rows although the check failed on rank 1"
    assert "non-finite loss on another rank at step 5" in first["halt"]
    assert "non-finite loss (nan) at step 5" in second["halt"]
    assert first["skips"] == 3
    agreed, refused = first["checkpoints"]
    assert agreed.endswith("rank0/checkpoint-2")
    assert "rank 0 resumes from" in refused and "not complete on every machine" in refused
    assert first["stop"] == signal.SIGTERM and first["one group"] is True
    for key in ("every", "any", "largest", "main", "packed", "skips", "stop"):
        assert first[key] == second[key], key
    assert first["checkpoints"] == second["checkpoints"]
