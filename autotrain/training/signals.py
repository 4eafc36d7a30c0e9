"""SIGTERM / SIGINT: finish the optimizer step, save a full checkpoint, exit 143 / 130.

A second signal exits at once; the checkpoint being written then never gets its completion marker and the
last complete checkpoint is untouched (see checkpoints.py).

With several processes the ranks agree at every step end on whether any of them got a signal, so all of
them stop after the same step and write one checkpoint together, even when the signal reaches the ranks
in different steps, or only some of them (a signal sent to one process, not to the launcher).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from transformers import TrainerCallback

from autotrain.errors import EXIT_SIGINT, EXIT_SIGTERM

EXIT_CODES = {signal.SIGINT: EXIT_SIGINT, signal.SIGTERM: EXIT_SIGTERM}
STOP_FILE_ENV = "AUTOTRAIN_STOP_FILE"


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = EXIT_CODES[signum]


class GracefulStop(TrainerCallback):
    """Installs the handlers; once training runs, a signal turns into save-and-stop at the step's end.

    ``received`` is the signal this process got; ``agreed`` the one every rank acts on (any rank's,
    SIGTERM over SIGINT), settled at each step end and at the end of training.
    """

    def __init__(self, stop_file: str | None = None):
        # Where signals cannot reach the training thread (a Ray Train worker), the launcher asks for the
        # stop by creating this file; every rank looks for it at each step end.
        self.stop_file = stop_file or os.environ.get(STOP_FILE_ENV)
        self.received: int | None = None
        self.agreed: int | None = None
        self.training = False
        self.finishing = False  # training ended at its schedule's end; the final save is under way
        self._previous = {}
        self._group = None
        self.before_exit = None  # called with the signal number before a second signal ends the process

    def install(self) -> None:
        import threading

        if threading.current_thread() is not threading.main_thread():
            return  # handlers can only be set from the main thread; the stop file still works
        for signum in EXIT_CODES:
            self._previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum, frame) -> None:
        if self.agreed is not None and not self.training:
            # This rank has saved and is on its way out; the launcher stops the ranks still running
            # once one has exited, and all of them finished writing before any exited.
            os._exit(EXIT_CODES[self.agreed])
        if self.received is not None:
            print(
                f"\n{signal.Signals(signum).name} again: exiting now without saving",
                file=sys.stderr,
                flush=True,
            )
            if self.before_exit is not None:
                with contextlib.suppress(Exception):  # the record is a courtesy; exiting now is what was asked
                    self.before_exit(signum)
            os._exit(EXIT_CODES[signum])
        self.received = signum
        if not self.training and not self.finishing:
            raise Interrupted(signum)
        doing = "saving the final model first" if self.finishing else "finishing this step and saving a checkpoint"
        print(
            f"\n{signal.Signals(signum).name}: {doing} (send it again to exit at once)",
            file=sys.stderr,
            flush=True,
        )

    def _agree(self) -> None:
        if self.received is None and self.stop_file and os.path.exists(self.stop_file):
            self.received = _requested(self.stop_file)
        self.agreed = signal_on_any_rank(self.received, self._group)

    def on_train_begin(self, args, state, control, **kwargs):
        self.training = True
        self._group = stop_flag_group()

    def on_step_end(self, args, state, control, **kwargs):
        self._agree()
        if self.agreed is not None:
            control.should_save = True
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        self._agree()  # a signal after the last step: every rank skips the final save, or none does
        self.training = False
        self.finishing = self.agreed is None  # a signal from here on waits for the final save

    def wait_for_other_ranks(self) -> None:
        """Return once every rank is here: after an agreed stop, none exits while another still writes."""
        if self._group is not None:
            import torch.distributed as dist

            dist.barrier(group=self._group)


def _requested(stop_file: str) -> int:
    """The signal number the launcher wrote into the stop file (SIGTERM if unreadable)."""
    try:
        with open(stop_file, encoding="ascii") as handle:
            signum = int(handle.read().strip() or signal.SIGTERM)
    except (OSError, ValueError):
        return signal.SIGTERM
    return signum if signum in EXIT_CODES else signal.SIGTERM


def stop_flag_group():
    """The gloo group of every rank that the stop flag and the other agreed decisions share
    (autotrain.training.ranks), or None for one process.

    On the CPU whatever the training backend, so agreeing each step costs no device synchronisation.
    """
    from autotrain.training import ranks

    return ranks.group()


def signal_on_any_rank(received: int | None, group) -> int | None:
    """The largest signal number any rank received (SIGTERM 15 over SIGINT 2), or None."""
    if group is None:
        return received
    from autotrain.training import ranks

    return ranks.largest(received or 0) or None
