"""Start-up time of `ggprof --version` and `ggprof --help` against the bare interpreter.

Targets: `--version` at most 60 ms over the bare interpreter, `--help` at most 200 ms wall
time (medians). Each command runs as a fresh process (as a script
calling ggprof per row would), rounds alternating so a burst of noise hits all alike;
prints the median and spread of each, and each command's time over `python -c pass`.

    python benchmarks/bench_startup.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

VERSION_OVER_PYTHON_MS = 60.0
HELP_MS = 200.0
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "ggprof --version": [sys.executable, "-m", "ggprof", "--version"],
    "ggprof --help": [sys.executable, "-m", "ggprof", "--help"],
    "ggprof plugins": [sys.executable, "-m", "ggprof", "plugins"],
}


# as a user's install runs: bytecode cached (some CI images set PYTHONDONTWRITEBYTECODE, which
# makes every start compile the package again and measures the image, not ggprof)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall_ms(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=ENV)
    return (time.perf_counter() - t0) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    for cmd in COMMANDS.values():  # warm the page cache and .pyc files
        wall_ms(cmd)
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.rounds):
        for name, cmd in COMMANDS.items():
            samples[name].append(wall_ms(cmd))
    base = statistics.median(samples["python -c pass"])
    print(f"{args.rounds} rounds, alternating; wall time of a fresh process")
    print(f"{'command':<18} {'median ms':>9} {'min':>7} {'max':>7} {'over python':>12}  target")
    for name, values in samples.items():
        med = statistics.median(values)
        if name == "ggprof --version":
            ok = med - base <= VERSION_OVER_PYTHON_MS
            target = f"{'ok' if ok else 'OVER'} (<= {VERSION_OVER_PYTHON_MS:g} over python)"
        elif name == "ggprof --help":
            target = f"{'ok' if med <= HELP_MS else 'OVER'} (<= {HELP_MS:g} ms)"
        else:
            target = ""
        print(f"{name:<18} {med:9.1f} {min(values):7.1f} {max(values):7.1f} {med - base:+11.1f}  {target}")


if __name__ == "__main__":
    main()
