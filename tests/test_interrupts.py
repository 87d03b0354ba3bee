"""Interrupts end the run and its llama.cpp child: Ctrl-C (130), SIGTERM (143), kill -9."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from support import (
    llama_child,
    start_bench,
)


# -- 7. interrupts end the run and its llama.cpp child ---------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "status", "word"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_a_signal_ends_bench_and_its_child(sig: int, status: int, word: str, gemma_path: Path) -> None:
    proc = start_bench(gemma_path)
    try:
        child = llama_child(proc)
    except BaseException:  # the run ends (and its pipes close) even when the child was not found
        proc.kill()
        proc.communicate(timeout=60)
        raise
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == status and f"Error: {word}" in err
    child.wait(timeout=10)
    assert not child.is_running()


@pytest.mark.slow
def test_kill_9_of_ggprof_ends_the_child_too(gemma_path: Path) -> None:
    proc = start_bench(gemma_path)
    try:
        child = llama_child(proc)
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    child.wait(timeout=10)
    assert not child.is_running()
