"""Watching a child process (ggprof's own llama.cpp child and an external llama-bench alike):
started in a process group of its own, what it sends read from a queue until it ends or a
deadline passes, and killed with everything it started."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


def spawn(argv: list[str], *, stdin: int, stderr: int) -> subprocess.Popen[str]:
    """The program in a process group of its own (POSIX), so that a kill takes all it started;
    its output as text, bytes that do not decode replaced (what a program prints is untrusted)."""
    return subprocess.Popen(
        argv, stdin=stdin, stdout=subprocess.PIPE, stderr=stderr, text=True, errors="replace", start_new_session=True
    )


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL to the process and its group (Windows, without groups: the process), then reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    proc.wait()


def drain(q: queue.Queue[T | None], timeout_s: float | None, on_timeout: Callable[[], Exception]) -> Iterator[T]:
    """The items put on `q` until the None that ends them; `on_timeout()` is raised when
    `timeout_s` (None or 0: no limit) passes first."""
    deadline = time.monotonic() + timeout_s if timeout_s else None
    while True:
        wait = None if deadline is None else max(deadline - time.monotonic(), 0)
        try:
            item = q.get(timeout=wait)
        except queue.Empty:
            raise on_timeout() from None
        if item is None:
            return
        yield item
