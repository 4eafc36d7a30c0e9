"""transformers' private names that autotrain needs.

- A model class's `_no_split_modules`: the decoder-layer classes FSDP wraps one by one. accelerate's own
  auto-wrap reads the same attribute; transformers has no public accessor for it.
- `Trainer._save_checkpoint`: what the training loop runs to write a checkpoint (weights, optimizer, scheduler,
  RNG states, trainer state); there is no public call to save one outside the loop (after an allocation
  failed mid-step, the state is that of the last completed step).
- `masking_utils._ignore_bidirectional_mask_sdpa`: asked by a vision tower whose patches all count
  (Idefics3's) whether its attention mask can be skipped. On the meta device (the memory estimate's trace)
  a tensor cannot say; the answer there is yes, every patch of the traced image being real.

Checked on transformers 5.18.0 (the floor) and 5.25.0 (tests/test_compat.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

CHECKED_ON = ("5.18.0", "5.25.0")


def no_split_modules(model_class: type) -> list[str]:
    """The names of the layer classes `model_class` keeps whole when sharded (empty when it names none)."""
    return list(model_class._no_split_modules or [])


def save_checkpoint(trainer) -> None:
    """Write `checkpoint-<global step>` of `trainer` into its output folder, as its loop does before `on_save`."""
    trainer._save_checkpoint(trainer.model, trial=None)


@contextlib.contextmanager
def bidirectional_mask_skipped() -> Iterator[None]:
    """Within the block, every bidirectional attention mask of an SDPA model counts as skippable."""
    from transformers import masking_utils

    saved = masking_utils._ignore_bidirectional_mask_sdpa
    masking_utils._ignore_bidirectional_mask_sdpa = lambda *args, **kwargs: True
    try:
        yield
    finally:
        masking_utils._ignore_bidirectional_mask_sdpa = saved
