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


# Read by each library when it is first imported: a library not imported yet is quieted by these, and none is
# imported only to be quieted (datasets, with pandas and pyarrow, is ~870 modules that a dry run of hub data
# or an export never needs).
QUIET_VARIABLES = {
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_VERBOSITY": "error",  # "Retrying in 8s [Retry 4/5]", a line per retry of every file
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' bars follow the hub's
    "DATASETS_VERBOSITY": "error",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
}


def quiet_libraries() -> None:
    """Library chatter (warnings, tqdm bars) hides the progress display; AUTOTRAIN_DEBUG=1 keeps it."""
    if debug_enabled():
        return
    quiet_bars()
    import sys
    import warnings

    for name, value in QUIET_VARIABLES.items():
        os.environ.setdefault(name, value)
    if "transformers" in sys.modules:  # imported already: its settings are read
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import logging as hub_logging

        hub_logging.set_verbosity_error()
    if "datasets" in sys.modules:
        import datasets

        datasets.disable_progress_bars()
        datasets.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
