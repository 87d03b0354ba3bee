"""A reader that closes the pipe ends ggprof quietly (status 0, no traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import database


@pytest.mark.parametrize(
    "args",
    [["history", "--json"], ["history", "--format", "csv"], ["report"], ["profiles"], ["plugins"], ["inspect"]],
)
def test_a_closed_pipe_ends_quietly(args: list[str], tmp_path: Path, gemma_path: Path) -> None:
    """`ggprof history --json | head -1`: the reader is gone before ggprof writes (its end of the
    pipe closed first, so every command meets it); ggprof ends with 0 and no traceback."""
    db = database(tmp_path / "h.db", n=3)
    extra = {"history": ["--db", str(db)], "report": ["--db", str(db)], "inspect": [str(gemma_path)]}
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "ggprof", *args, *extra.get(args[0], [])],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (r.returncode, r.stderr.decode()) == (0, "")
