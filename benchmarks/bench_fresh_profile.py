"""The main job as a new user meets it: `ggprof profile` (the default model) N times, each in
a fresh cache (so each measures the host's bandwidth anew), printing each run's bandwidth, its
spread, its verdict and its time.

    python benchmarks/bench_fresh_profile.py [--runs 5] [--out benchmarks/data/fresh-profile-DATE.txt]

Target (issue: figures you can trust on any machine): on a quiet machine, every run's
bandwidth spread under 15% and every verdict plausible.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAX_SPREAD = 0.15


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=HERE / "data" / f"fresh-profile-{time.strftime('%Y-%m-%d')}.txt")
    args = ap.parse_args()
    lines: list[str] = []
    met = 0
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "GGPROF_CACHE_DIR": cache}
            t0 = time.monotonic()
            r = subprocess.run(
                [sys.executable, "-m", "ggprof", "profile", "--json", "--no-save"],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            wall = time.monotonic() - t0
            host = json.loads(
                subprocess.run(
                    [sys.executable, "-m", "ggprof", "host", "--json", "--no-measure"],
                    capture_output=True,
                    text=True,
                    env=env,
                    check=True,
                ).stdout
            )
        d = json.loads(r.stdout)
        spread = host["measured_bandwidth_spread"]["read"]
        read = host["measured_read_bandwidth_bytes_per_s"] / 1e9
        ok = spread < MAX_SPREAD and d["verdict"] == "plausible"
        met += ok
        line = (
            f"run {i + 1}: read {read:.1f} GB/s, spread {spread:.1%}, {host['usable_cores']} threads; "
            f"decode {d['measured_tg_tok_s']:.1f} tok/s, expected {d['expected_tok_s_low']:.1f}-"
            f"{d['expected_tok_s_high']:.1f}; verdict {d['verdict']} (exit {r.returncode}); {wall:.1f} s"
            + ("" if ok else "  <- missed")
        )
        print(line, flush=True)
        lines.append(line)
    summary = f"{met} of {args.runs} runs: spread under {MAX_SPREAD:.0%} and verdict plausible"
    print(summary)
    cpu = host["cpu_model"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(f"CPU: {cpu} ({host['physical_cores']} physical cores)\n" + "\n".join([*lines, summary]) + "\n")
    print(f"kept in {args.out}")


if __name__ == "__main__":
    main()
