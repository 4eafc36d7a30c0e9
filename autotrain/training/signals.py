"""SIGTERM / SIGINT: finish the optimizer step, save a full checkpoint, exit 143 / 130.

A second signal exits at once; the checkpoint being written then never gets its completion marker and the
last complete checkpoint is untouched (see checkpoints.py).
"""

from __future__ import annotations

import os
import signal
import sys

from transformers import TrainerCallback

from autotrain.errors import EXIT_SIGINT, EXIT_SIGTERM

EXIT_CODES = {signal.SIGINT: EXIT_SIGINT, signal.SIGTERM: EXIT_SIGTERM}


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = EXIT_CODES[signum]


class GracefulStop(TrainerCallback):
    """Installs the handlers; once training runs, a signal turns into save-and-stop at the step's end."""

    def __init__(self):
        self.received: int | None = None
        self.training = False
        self._previous = {}

    def install(self) -> None:
        for signum in EXIT_CODES:
            self._previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum, frame) -> None:
        if self.received is not None:
            print(
                f"\n{signal.Signals(signum).name} again: exiting now without saving",
                file=sys.stderr,
                flush=True,
            )
            os._exit(EXIT_CODES[signum])
        self.received = signum
        if not self.training:
            raise Interrupted(signum)
        print(
            f"\n{signal.Signals(signum).name}: finishing this step and saving a checkpoint "
            "(send it again to exit at once)",
            file=sys.stderr,
            flush=True,
        )

    def on_train_begin(self, args, state, control, **kwargs):
        self.training = True

    def on_step_end(self, args, state, control, **kwargs):
        if self.received is not None:
            control.should_save = True
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        self.training = False
