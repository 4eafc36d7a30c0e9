"""CAME, CAME8Bit and CAME8Bit+FusedAdam under FSDP2: two CPU processes (gloo), each holding half of every
parameter, must train as one process on the whole batch does, hold half of the state each, and resume
exactly from a sharded or a full checkpoint."""

from __future__ import annotations

import pytest
import torch
from fsdp_training import ALIGNED_BLOCKS, OPTIMIZERS, resume_run, sharded_run, single_process, spawn

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.slow,
    pytest.mark.skipif(not torch.distributed.is_available(), reason="torch built without distributed"),
]


def relative_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The largest, over parameters, of |a - b| / |b|."""
    return max(((a[k] - b[k]).norm() / b[k].norm()).item() for k in b)


UNALIGNED_BLOCKS = 23


@pytest.mark.parametrize(
    "name, block_size, compile",
    [(name, ALIGNED_BLOCKS, False) for name in OPTIMIZERS]
    # Blocks of 23: no divisor of fc2's 50-wide rows fits (CAME8Bit's row_aligned_block), so they cut its rows
    # and the two shards' blocks group other elements than one process's.
    + [("came_8bit", UNALIGNED_BLOCKS, False), ("came", ALIGNED_BLOCKS, True), ("came_8bit", UNALIGNED_BLOCKS, True)],
    ids=[*OPTIMIZERS, "came_8bit-unaligned-blocks", "came-compiled", "came_8bit-unaligned-blocks-compiled"],
)
def test_two_shards_train_as_one_process(tmp_path, name, block_size, compile):
    """Compiled: each rank compiles the phases of its shards' step; the all-reduces run between them."""
    expected, single_bytes = single_process(name, block_size=block_size, compile=compile)
    ranks = spawn(sharded_run, name, block_size, compile, out=tmp_path)
    got = ranks[0]["params"]
    assert got.keys() == expected.keys()
    assert relative_difference(expected, single_process(name, steps=0)[0]) > 1e-2, "barely trained: proves nothing"
    if name == "came":  # the same sums in another order
        assert relative_difference(got, expected) <= 1e-5
    else:
        # An 8-bit code near a rounding boundary flips on a last-bit difference of the gradient (the two
        # runs sum it in other orders), so compare with what quantization itself changes in a run.
        quantization = relative_difference(expected, single_process(name, block_size=block_size, quantize=False)[0])
        # Unaligned blocks quantize other groups of elements than one process does: as large again.
        factor = 0.5 if block_size == ALIGNED_BLOCKS else 2.0
        assert relative_difference(got, expected) <= factor * quantization
    for rank in ranks:
        # A shard's phases, each a graph, for the 2-D and the 1-D params (the 3-D kernel steps eagerly)
        assert rank["graphs"] >= 5 if compile else rank["graphs"] == 0
        assert rank["record"] == []
        # Half, plus what every rank keeps whole: column statistics of matrices and per-param scalars.
        assert 0.45 <= rank["state_bytes"] / single_bytes <= 0.6
        # The weights' RMS after the last step, summed over the shards: every rank records the whole's.
        assert rank["rms"] and rank["rms"] == pytest.approx(
            {n: got[n].pow(2).mean().sqrt().item() for n in rank["rms"]}, rel=1e-5
        )


@pytest.mark.parametrize("full", [False, True], ids=["sharded", "full"])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_resume_from_checkpoint_matches_uninterrupted_run(tmp_path, name, full):
    ranks = spawn(resume_run, name, full, out=tmp_path)
    for rank in ranks:
        assert relative_difference(rank["resumed"], rank["params"]) <= 1e-6
        if "8bit" in name:  # codes and scales came back as saved, not cast to the param dtype
            assert rank["dtypes"]["exp_avg_codes"] == torch.int8
            assert rank["dtypes"]["exp_avg_absmax"] == torch.float32
