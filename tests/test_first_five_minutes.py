"""What a newcomer meets first, on the real CLI: `ggprof` alone, `fit` on a fresh machine and its
expected speeds, a claim too fast for either ceiling, a log's causes against its own facts, the
"next:" line after `profile`, a network that is down, and `plot` without its extra."""

from __future__ import annotations

import json
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hub_server import HubServer
from support import as_process, in_process, judged

ROOT = Path(__file__).resolve().parents[1]
LOGS = Path(__file__).parent / "data" / "logs"
BENCH_ROW = Path(__file__).parent / "data" / "llama-bench-gemma3-270m.json"  # a real row, replayed
# what makes a number too fast, whichever ceiling it breaks (the list)
TOO_FAST = (
    "another model or quant",
    "a cached prompt counted as processed",
    "speculative decoding",
    "batched requests summed",
    "a GPU the claim does not mention",
    "tokens counted as characters",
)


# -- 1. `ggprof` alone ------------------------------------------------------------------------------
def test_ggprof_alone_prints_the_groups_help_readable() -> None:
    r = in_process()
    assert r.exit_code == 2 and r.stdout == ""  # as Click groups do: the help on stderr, usage's status
    assert r.stderr.startswith("Usage: ggprof [OPTIONS] COMMAND [ARGS]...\n")
    assert "\nCommands:\n" in r.stderr and "Exit status:" in r.stderr and "Error:" not in r.stderr
    assert len(r.stderr.splitlines()) > 20 and max(len(line) for line in r.stderr.splitlines()) <= 100
