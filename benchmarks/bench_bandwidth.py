"""ggprof's measured bandwidth vs a compiled C reference kernel (OpenMP, -O3 -march=native),
run alternately in one script with the same threads and array size.

    python benchmarks/bench_bandwidth.py [--rounds 3] [--full]

Builds benchmarks/_build/stream_ref when a C compiler with OpenMP is present, else says
so and prints ggprof's figures alone. Goal: ggprof's read and triad >= 90% of the C
reference, within the `ggprof host --quick` time budget (~2 s).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from ggprof.machine.facts import gather_facts
from ggprof.machine.stream import array_bytes_for, measure_bandwidth

HERE = Path(__file__).resolve().parent


def build_reference() -> Path | None:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        print("no C compiler found: the C reference is skipped")
        return None
    out = HERE / "_build" / "stream_ref"
    out.parent.mkdir(exist_ok=True)
    cmd = [cc, "-O3", "-march=native", "-ffast-math", "-fopenmp", str(HERE / "stream_ref.c"), "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        print(f"building the C reference failed (needs OpenMP): {r.stderr.strip()[:300]}")
        return None
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--full", action="store_true", help="ggprof's full measurement instead of --quick")
    args = ap.parse_args()
    facts = gather_facts()
    threads, quick = facts.physical_cores, not args.full
    size, _ = array_bytes_for(facts.llc_bytes, facts.ram_available_bytes, quick)
    ref = build_reference()
    print(
        f"{threads} threads, {size >> 20} MiB arrays, {args.rounds} alternating rounds "
        f"({'quick' if quick else 'full'} ggprof measurement)"
    )
    rows: dict[str, list[float]] = {k: [] for k in ("g_read", "g_triad", "c_read", "c_triad", "g_s")}
    for i in range(args.rounds):
        t = time.perf_counter()
        m = measure_bandwidth(threads, facts.llc_bytes, facts.ram_available_bytes, quick=quick)
        rows["g_s"].append(time.perf_counter() - t)
        rows["g_read"].append(m.read.best_bytes_per_s / 1e9)
        rows["g_triad"].append(m.triad.best_bytes_per_s / 1e9)
        line = (
            f"round {i + 1}: ggprof read {rows['g_read'][-1]:5.1f} triad {rows['g_triad'][-1]:5.1f} GB/s "
            f"({rows['g_s'][-1]:.1f} s)"
        )
        if ref is not None:
            env = {"OMP_NUM_THREADS": str(threads), "OMP_PROC_BIND": "spread", "PATH": "/usr/bin:/bin"}
            out = subprocess.run([str(ref), str(size // 8), "5"], capture_output=True, text=True, check=True, env=env)
            c = json.loads(out.stdout)
            rows["c_read"].append(c["read"])
            rows["c_triad"].append(c["triad"])
            line += f" | C read {c['read']:5.1f} triad {c['triad']:5.1f} GB/s"
        print(line)
    med = {k: statistics.median(v) for k, v in rows.items() if v}
    print(f"median: ggprof read {med['g_read']:.1f}, triad {med['g_triad']:.1f} GB/s in {med['g_s']:.1f} s")
    if ref is not None:
        print(f"median: C      read {med['c_read']:.1f}, triad {med['c_triad']:.1f} GB/s")
        print(
            f"ratio ggprof / C: read {med['g_read'] / med['c_read']:.0%}, triad {med['g_triad'] / med['c_triad']:.0%}"
        )


if __name__ == "__main__":
    main()
