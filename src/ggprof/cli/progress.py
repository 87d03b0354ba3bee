"""A progress bar on stderr for runs longer than a couple of seconds (stdout stays clean)."""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO


class ProgressBar:
    """Shown on a terminal (or with GGPROF_PROGRESS=1) once a run has taken `delay_s`."""

    def __init__(self, total_steps: int, stream: TextIO | None = None, delay_s: float = 2.0) -> None:
        self.total = max(total_steps, 1)
        self.done = 0
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self.delay_s = delay_s
        self.enabled = os.environ.get("GGPROF_PROGRESS") == "1" or self.stream.isatty()
        self.shown = False

    def __call__(self, test: str, rep: int, reps: int) -> None:
        self.done += 1
        elapsed = time.monotonic() - self.start
        if not self.enabled or elapsed < self.delay_s:
            return
        width = 24
        filled = int(width * self.done / self.total)
        bar = "#" * filled + "." * (width - filled)
        self.stream.write(f"\r  [{bar}] {test:<16} rep {rep}/{reps}  {elapsed:5.1f} s")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
