"""`ggprof profile`'s wall time: the adaptive default (repeat until the 95% CI of tok/s is
within 3%, 2-10 repetitions) against the fixed 5 repetitions (`-r 5`), paired and alternating
on the same model, host bandwidth already cached.

Targets (issue: a trustworthy verdict in 15 seconds): the adaptive run's median wall time at
most 15 s on this machine, and the same verdict as the fixed run in at least 19 of 20 pairs;
cold (an empty cache directory: the host measured and the default model written first) at
most 25 s. Prints both distributions, each pair's verdicts and repetitions, and the cold runs.

    python benchmarks/bench_profile_time.py [--pairs 20] [--cold 5] [MODEL.gguf ...]
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
from typing import Any

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as a user's install runs


def run(args: list[str], env: dict[str, str] = ENV) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "ggprof", "profile", *args, "--json", "--no-save"],
                         capture_output=True, text=True, env=env, check=False)  # fmt: skip
    wall = time.perf_counter() - t0
    return wall, json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--cold", type=int, default=5, help="adaptive runs from an empty cache directory")
    ap.add_argument("model", nargs="?", help="default: ggprof's default synthetic model")
    args = ap.parse_args()
    base = [args.model] if args.model else []
    run([*base, "-r", "1", "-p", "16", "-n", "4"])  # the host measured and the model written, once
    adaptive_s, fixed_s, same = [], [], 0
    for i in range(args.pairs):
        order = [("adaptive", base), ("fixed", [*base, "-r", "5"])]
        if i % 2:
            order.reverse()
        got = {name: run(a) for name, a in order}
        (ta, da), (tf, df) = got["adaptive"], got["fixed"]
        adaptive_s.append(ta)
        fixed_s.append(tf)
        same += da["verdict"] == df["verdict"]
        reps = "/".join(str(len(b["samples_ns"])) for b in da["bench"])
        print(f"pair {i + 1}: adaptive {ta:.1f} s ({da['verdict']}, repetitions {reps}), "
              f"fixed {tf:.1f} s ({df['verdict']})")  # fmt: skip
        if da["verdict"] != df["verdict"]:  # which findings differ, for the record
            for name, d in (("adaptive", da), ("fixed", df)):
                codes = ", ".join(f["code"] for f in d["findings"] if f["severity"] != "plausible")
                print(f"  {name}: {codes or 'all plausible'}")
    for name, xs in (("adaptive", adaptive_s), ("fixed -r 5", fixed_s)):
        q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
        print(f"{name}: median {statistics.median(xs):.1f} s (quartiles {q[0]:.1f}-{q[2]:.1f}, "
              f"min {min(xs):.1f}, max {max(xs):.1f}, n={len(xs)})")  # fmt: skip
    print(f"same verdict: {same} of {len(adaptive_s)} pairs")
    cold_s = []
    for i in range(args.cold):
        with tempfile.TemporaryDirectory() as cache:
            t, d = run(base, {**ENV, "GGPROF_CACHE_DIR": cache})
        cold_s.append(t)
        reps = "/".join(str(len(b["samples_ns"])) for b in d["bench"])
        print(f"cold {i + 1}: {t:.1f} s ({d['verdict']}, repetitions {reps})")
    if cold_s:
        cold = statistics.median(cold_s)
        print(f"cold: median {cold:.1f} s (min {min(cold_s):.1f}, max {max(cold_s):.1f}, n={len(cold_s)}); "
              f"target at most 25 s -> {'met' if cold <= 25 else 'MISSED'}")  # fmt: skip
    median = statistics.median(adaptive_s)
    print(f"target: adaptive median at most 15 s -> {'met' if median <= 15 else 'MISSED'} ({median:.1f} s); "
          f"same verdict in 19 of 20 -> {'met' if same >= 0.95 * len(adaptive_s) else 'MISSED'}")  # fmt: skip


if __name__ == "__main__":
    main()
