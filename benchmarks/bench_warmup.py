"""Does a short warm-up leave the first repetition of a CPU prompt test slow? Runs llama.cpp's
pp512 (the python engine's child, this host's CPU, all cores) with a warm-up of the whole
prompt (llama-bench's) and of 32 tokens (ggprof's adaptive runs on the CPU), alternating, and
prints each run's repetitions, the first repetition over the median of the later ones, and the
widest ratio between two repetitions of one test.

    python benchmarks/bench_warmup.py [--pairs 8] [--reps 3] [MODEL.gguf]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import psutil

from ggprof.bench.results import WARMUP_PROMPT_CPU, BenchParams
from ggprof.llamacpp import N_PROMPT
from ggprof.model.synth import ensure_model


def run(model: Path, warmup: int | None, reps: int, threads: int) -> list[float]:
    req = BenchParams(model=model, n_threads=threads, n_gen=(0,), reps=reps, repack="off", warmup_prompt=warmup)
    out = subprocess.run([sys.executable, "-m", "ggprof.engines.python.child"], input=json.dumps(req.request()),
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    row = next(json.loads(line) for line in out.splitlines() if '"event": "row"' in line)
    return [ns / 1e9 for ns in row["samples_ns"]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("model", nargs="?", help="default: ggprof's default synthetic model")
    args = ap.parse_args()
    model = Path(args.model) if args.model else ensure_model()
    threads = psutil.cpu_count(logical=False) or 1
    ratios: dict[str, list[float]] = {"full": [], "short": []}
    widest = 1.0
    for i in range(args.pairs):
        order = [("full", None), ("short", WARMUP_PROMPT_CPU)]
        for name, warmup in order if i % 2 == 0 else order[::-1]:
            s = run(model, warmup, args.reps, threads)
            ratio = s[0] / statistics.median(s[1:])
            ratios[name].append(ratio)
            widest = max(widest, max(s) / min(s))
            print(f"warm-up {warmup or N_PROMPT:>3} tokens: pp{N_PROMPT} repetitions (s) "
                  f"{' '.join(f'{x:.2f}' for x in s)}; first / median of the rest {ratio:.3f}", flush=True)  # fmt: skip
    for name, xs in ratios.items():
        print(f"{name} warm-up: first repetition / the rest, median {statistics.median(xs):.3f} "
              f"(min {min(xs):.3f}, max {max(xs):.3f}, n={len(xs)})")  # fmt: skip
    print(f"widest ratio between two repetitions of one test: {widest:.2f}x")


if __name__ == "__main__":
    main()
