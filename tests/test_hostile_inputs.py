"""What a user pastes or points ggprof at, made hostile: a path that is no regular file, a log far
past its caps. Each runs the real CLI in a subprocess of its own session (support.measured),
bounded in time and memory, and checks that nothing of its session outlives it."""

from __future__ import annotations

import json
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


# -- 8. a big log: read up to its caps, streamed, memory a few times the cap -------------------------
@pytest.fixture(scope="module")
def big_logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("big-logs")
    logs = {
        "16 MiB of short lines": (b"ab\n", 16 * MiB // 3),
        "64 MiB of short lines": (b"ab\n", 64 * MiB // 3),
        "one 64 MiB line": (b"x", 64 * MiB),
    }
    out = {}
    for name, (unit, n) in logs.items():
        path = folder / (name.replace(" ", "-") + ".log")
        path.write_bytes(unit * n)
        out[name] = path
    return out


@pytest.mark.parametrize("source", ["file", "stdin"])
@pytest.mark.parametrize("name", ["16 MiB of short lines", "64 MiB of short lines", "one 64 MiB line"])
def test_a_big_log_is_read_to_its_cap_in_bounded_time_and_memory(
    big_logs: dict[str, Path], name: str, source: str
) -> None:
    path = big_logs[name]
    if source == "file":
        r = measured("check", "--log", str(path), "--json", timeout_s=120)
    else:
        with open(path, "rb") as f:
            r = measured("check", "--log", "-", "--json", timeout_s=120, stdin=f)
    assert r.exit_code == 0 and r.left == [], r.stderr
    # before: 16 MiB of short lines took 15 s and 1.1 GB, 64 MiB the same (the first 16 read)
    assert r.wall_s < 30 and r.peak_rss_bytes < START_UP_BYTES + 4 * LOG_CAP_BYTES, (r.wall_s, r.peak_rss_bytes)
    d = json.loads(r.stdout)
    assert d["truncated"] is True and d["verdict"] == "unknown" and d["measurements"] == []
    if name == "one 64 MiB line":
        assert d["lines_read"] == 1 and d["lines_cut"] == 1
        assert d["bytes_read"] == (LOG_CAP_BYTES // 2 if source == "file" else LOG_CAP_BYTES)
    else:
        assert d["lines_read"] == LOG_CAP_LINES and d["bytes_read"] == 3 * LOG_CAP_LINES


def test_a_big_log_says_what_it_left_unread_and_the_cap(big_logs: dict[str, Path]) -> None:
    r = measured("check", "--log", str(big_logs["64 MiB of short lines"]), timeout_s=120)
    assert r.exit_code == 0 and r.left == [], r.stderr
    said = r.stdout.splitlines()[1]
    assert said.startswith("  a long log: its first 1.50 MB (1.43 MiB) and last 1.50 MB (1.43 MiB) read")
    assert "ggprof reads at most 16 MiB and 1,000,000 lines of a log" in said


def test_a_long_log_of_speeds_keeps_its_last_runs_within_its_caps(tmp_path: Path, gemma_path: Path) -> None:
    """64 model loads of 2,000 speeds each (16 MB): each judged speed costs its verdict, so a log
    keeps 4,000 speeds in all, of its last runs (as JSON it took 18 s and 2.4 GB)."""
    timing = (
        "llama_perf_context_print:        eval time =    1000.00 ms /   100 runs   (   10.00 ms per token,   "
        "100.00 tokens per second)\n"
    )
    log = tmp_path / "runs.log"
    log.write_text("".join("./llama-cli -m model.gguf -p hi\n" + timing * 2000 for _ in range(64)))
    args = ("--device", "rtx-4090", "--backend", "cuda", "--json")
    r = measured("check", "--log", str(log), str(gemma_path), *args, timeout_s=120)
    assert r.exit_code == 3 and r.left == [], r.stderr  # 100 tok/s is slow for 270M on an RTX 4090's CUDA
    assert r.wall_s < 60 and r.peak_rss_bytes < START_UP_BYTES + 4 * LOG_CAP_BYTES, (r.wall_s, r.peak_rss_bytes)
    d = json.loads(r.stdout)
    assert len(d["runs"]) == 2 and len(d["measurements"]) == 4000
    assert d["runs"][-1]["first_line"] == 63 * 2001 + 1  # the last run's command line
