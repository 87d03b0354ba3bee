"""Watching a child process: what it sends, read from a queue until it ends or a deadline
passes (ggprof's own llama.cpp child and an external llama-bench alike)."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


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
