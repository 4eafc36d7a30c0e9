"""`training_args.batch_size: auto`: the largest per-device batch whose memory estimate fits the budget, with
the gradient accumulation that keeps the samples per optimizer step asked for.

"Asked for" is `training_args.target_batch_size` (default 8, batch_size's own default): the samples each
device puts into one optimizer step, batch_size x gradient_accumulation. The batch is chosen among the
divisors of the target, so the step keeps exactly that many samples (a target of 12 tries 12, 6, 4, 3, 2,
1), never below what the trainer needs per batch (KTO's 2, ...). The budget is `training_args.memory_budget`
when given, else what the device has (CUDA: its free memory; CPU: the available RAM). A batch fits when its
estimate is at most the budget less a margin: 5% on the CPU, the most the estimate has read below the
measured peak (docs/memory-and-preview.md); 10% on a GPU, for the caching allocator's fragments besides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotrain.training.plan import BatchChoice

MARGIN = {"cpu": 0.05, "cuda": 0.10}


def candidates(target: int, smallest: int = 1) -> list[int]:
    """The batches that divide `target`, largest first, none below `smallest` (the target itself at least)."""
    found = [batch for batch in range(target, 0, -1) if target % batch == 0 and batch >= smallest]
    return found or [target]


def choose_batch(
    target: int,
    smallest: int,
    estimate_for: Callable[[int, int], int],
    budget: int,
    device: str,
    source: str,
) -> BatchChoice:
    """The largest candidate batch whose estimate (`estimate_for(batch, accumulation)`, bytes) is within
    `budget` less the device's margin; the smallest candidate, flagged, when none is. `source` says where
    the budget came from (for the record)."""
    margin = MARGIN.get(device, MARGIN["cuda"])
    allowed = int(budget * (1 - margin))
    options = candidates(target, smallest)
    needs: dict[int, int] = {}
    chosen = options[-1]
    for batch in options:
        needs[batch] = estimate_for(batch, target // batch)
        if needs[batch] <= allowed:
            chosen = batch
            break
    larger = [batch for batch in options if batch > chosen]
    why: dict[str, Any] = {
        "target_batch_size": target,
        "budget": budget,
        "budget_from": source,
        "margin": margin,
        "allowed": allowed,
        "estimate": needs[chosen],
        "fits": needs[chosen] <= allowed,
        "next_larger": {"batch_size": larger[-1], "estimate": needs[larger[-1]]} if larger else None,
    }
    return BatchChoice(chosen, target // chosen, why)


def describe(plan_batch: int, accumulation: int, why: dict[str, Any], gib: Callable[[float], str]) -> list[str]:
    """The dry run's lines for a batch `auto` chose."""
    lines = [
        f"batch_size auto: {plan_batch} x gradient_accumulation {accumulation} = target_batch_size "
        f"{why['target_batch_size']} samples per step; estimate {gib(why['estimate'])} of the "
        f"{gib(why['allowed'])} allowed ({why['budget_from']} {gib(why['budget'])} less a {why['margin']:.0%} margin)"
    ]
    if why.get("kept_from"):
        lines.append(
            f"  kept from {why['kept_from'].removeprefix('the run ')}: the checkpoint counts batches of this size"
        )
    larger = why.get("next_larger")
    if larger:
        lines.append(f"  the next larger batch, {larger['batch_size']}, would need {gib(larger['estimate'])}")
    else:
        lines.append("  no larger batch divides the target")
    if not why["fits"]:
        lines.append(f"  warning: even batch {plan_batch} is estimated above the budget")
    return lines
