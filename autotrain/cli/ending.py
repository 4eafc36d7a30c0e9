"""Ending the process without the interpreter's teardown of its modules, once a command is done.

After torch, transformers and TRL are imported, the teardown of their modules at exit takes about a second
by itself, and on a rank of a launched run the C++ teardown (gloo's threads) now and then aborted a rank
that had finished (`terminate called without an active exception`, exit -6). Read-only commands and
launched ranks skip it (autotrain/cli/main.py), through documented behaviour only: the interpreter's exit
joins the non-daemon threads, then runs the exit handlers last-registered first; the handler registered
here, when the command line is imported and before any library registers one, runs last and ends the
process with `os._exit` once it is armed, before the modules are torn down.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys

_STATUS: list[int] = []  # the exit status, once armed


def _end_here() -> None:
    if not _STATUS:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more can reach it
            stream.flush()
    os._exit(_STATUS[0])


atexit.register(_end_here)


def skip_teardown(code: object) -> None:
    """When the interpreter next exits, on `SystemExit(code)`, end the process after its threads and exit
    handlers, before the teardown of its modules. `code` as SystemExit takes it: None is 0, a number is
    itself, anything else (a message, which the interpreter prints) is 1."""
    _STATUS[:] = [0 if code is None else code if isinstance(code, int) else 1]
