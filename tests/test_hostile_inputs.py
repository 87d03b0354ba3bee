"""What a user pastes or points ggprof at, made hostile: a path that is no regular file.
Each runs the real CLI in a subprocess of its own session (support.measured), bounded in time
and memory, and checks that nothing of its session outlives it."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import Measured, measured

MiB = 1 << 20
START_UP_BYTES = 96 * MiB  # the interpreter, ggprof's imports and profiles: about 40 MiB here
LOG_CAP_BYTES = 16 * MiB  # documented: a log is read up to 16 MiB and 1,000,000 lines
LOG_CAP_LINES = 1_000_000


def one_line_error(r: Measured, *words: str) -> None:
    """Exit 2, nothing on stdout, one `Error:` line holding `words`, nothing left running."""
    assert r.exit_code == 2 and r.stdout == "", (r.exit_code, r.stdout[:300], r.stderr)
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)
    assert r.left == []


# -- 7. a path that is no regular file, for --log and --llama-bench alike ---------------------------
@pytest.fixture
def not_files(tmp_path: Path) -> Iterator[dict[str, tuple[str, str]]]:
    """Each kind of path that is no regular file, and the words its refusal names."""
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)  # no writer: opening it for reading would wait forever
    folder = tmp_path / "folder.log"
    folder.mkdir()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "s.log"))  # listening or not, a socket cannot be opened as a file
    yield {
        "fifo": (str(fifo), "not a regular file (a FIFO)"),
        "folder": (str(folder), "is a directory, not a file"),
        "device": ("/dev/zero", "not a regular file (a device)"),
        "socket": (str(tmp_path / "s.log"), "not a regular file (a socket)"),
    }
    sock.close()


@pytest.mark.parametrize("option", ["--log", "--llama-bench"])
@pytest.mark.parametrize("kind", ["fifo", "folder", "device", "socket"])
def test_a_path_that_is_no_regular_file_is_refused_at_once(
    not_files: dict[str, tuple[str, str]], option: str, kind: str
) -> None:
    path, words = not_files[kind]
    r = measured("check", option, path, "--bandwidth", "90", timeout_s=60)
    one_line_error(r, path, words)
    assert r.wall_s < 20  # refused before a byte is read: a FIFO without a writer blocked --log forever


@pytest.mark.parametrize("option", ["--log", "--llama-bench"])
def test_standard_input_of_zeros_is_refused_at_once(option: str) -> None:
    with open("/dev/zero", "rb") as zeros:
        r = measured("check", option, "-", "--bandwidth", "90", timeout_s=60, stdin=zeros)
    one_line_error(r, "standard input: binary data")
    assert r.wall_s < 20 and r.peak_rss_bytes < START_UP_BYTES + 4 * MiB
