"""Library chatter (warnings, tqdm bars, retry logs) hides autotrain's own output; AUTOTRAIN_DEBUG=1 keeps it."""

from __future__ import annotations

import os

from autotrain.errors import debug_enabled


def quiet_bars() -> None:
    """No tqdm bars (GGUF de-quantizing, ...) nor TRL notices. tqdm reads its variable when first imported:
    call this before transformers is (its setting also reaches the processes a launcher starts)."""
    if debug_enabled():
        return
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")


def quiet_libraries() -> None:
    """Library chatter (warnings, tqdm bars) hides the progress display; AUTOTRAIN_DEBUG=1 keeps it."""
    if debug_enabled():
        return
    quiet_bars()
    import warnings

    import datasets
    import transformers
    from huggingface_hub.utils import logging as hub_logging

    transformers.logging.set_verbosity_error()
    hub_logging.set_verbosity_error()  # "Retrying in 8s [Retry 4/5]", a line per retry of every file
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
