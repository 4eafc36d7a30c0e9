"""Progress of the long data steps (reading, templating, tokenizing, packing and writing a split; waiting for the
process that does): rows done, rows/s and time left, as a rich bar on a terminal and as a line at most every
10 seconds in a log, a container or a cluster job (the app shows a run's log, so these lines too)."""

from __future__ import annotations

import math
import sys
import time

INTERVAL_ENV = "AUTOTRAIN_PROGRESS_INTERVAL"  # seconds between two lines without a terminal
INTERVAL = 9.0  # a second under the 10 s promised: a busy machine delays a line by a fraction of one


def line_interval() -> float:
    import os

    try:
        return max(0.05, float(os.environ.get(INTERVAL_ENV, INTERVAL)))
    except ValueError:
        return INTERVAL


def fmt_eta(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class RowProgress:
    """Rows done of a long data step (reading, templating, tokenizing, packing and writing a split; waiting for
    the process that does): a rich bar on a terminal; otherwise a line every `interval` seconds (from a thread
    of its own, so a slow batch or a long wait still shows) and one when it ends. Rows done, rows/s, and the
    share and time left when the total is known."""

    def __init__(
        self, what: str, total: int | None = None, stream=None, rich: bool | None = None, interval: float | None = None
    ):
        import threading

        self.what, self.total, self.done = what, total, 0
        self.stream = stream or sys.stderr
        self.rich = self.stream.isatty() if rich is None else rich
        self.interval = interval if interval is not None else line_interval()
        self.start = time.perf_counter()
        self.progress = self.task = None
        self._stop = threading.Event()
        self._thread = None
        if self.rich:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            columns = (TextColumn(f"[bold]{what}"), BarColumn(), MofNCompleteColumn(), TextColumn("rows"))
            rate = TextColumn("{task.fields[rate]}")
            self.progress = Progress(*columns, rate, TimeRemainingColumn(), console=Console(file=self.stream))
            self.progress.start()
            self.task = self.progress.add_task(what, total=total, rate="")
        else:
            self._thread = threading.Thread(target=self._lines, daemon=True)
            self._thread.start()

    def update(self, done: int, total: int | None = None) -> None:
        self.done = done
        if total is not None:
            self.total = total
        if self.progress is not None:
            self.progress.update(self.task, completed=done, total=self.total, rate=f"{self.rate():,.0f} rows/s")

    def rate(self) -> float:
        return self.done / max(time.perf_counter() - self.start, 1e-9)

    def line(self) -> str:
        rate = self.rate()
        if not self.total:
            return f"{self.what}: {self.done:,} rows, {rate:,.0f} rows/s"
        share = min(100.0, 100.0 * self.done / self.total)
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        return (
            f"{self.what}: {self.done:,} of {self.total:,} rows ({share:.0f}%), {rate:,.0f} rows/s, eta {fmt_eta(eta)}"
        )

    def _lines(self) -> None:
        while not self._stop.wait(self.interval):
            print(self.line(), file=self.stream, flush=True)

    def close(self, summary: str | None = None) -> None:
        """Stop the display; `summary` (a line saying what was done) is printed last."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        if summary:
            print(summary, file=self.stream, flush=True)
