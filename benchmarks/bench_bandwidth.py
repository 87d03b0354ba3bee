"""ggprof's measured read bandwidth against a compiled C reference kernel (OpenMP, -O3
-march=native, benchmarks/stream_ref.c), with the same threads and array size, in alternating
pairs (the order flips every pair), under three conditions:

- quiet: nothing else running;
- one CPU: every worker of both pinned to one CPU (`taskset -c 0`): oversubscribed;
- busy: a competing busy loop pinned to one CPU for the whole condition.

    python benchmarks/bench_bandwidth.py [--pairs 5] [--out benchmarks/data/bandwidth-DATE.txt]

Each measurement runs in its own process (so an affinity set holds for all its threads). The
target: ggprof's read within 0.85-1.3x of the C reference (medians, quiet), and no pair above
1.3x in any condition (oversubscription may make both slower; it must never make ggprof's
figure higher). Needs a C compiler with OpenMP and `taskset` (util-linux).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOW, HIGH = 0.85, 1.3
GGPROF_READ = """
import json, sys
from ggprof.machine.stream import measure_bandwidth
threads, size = int(sys.argv[1]), int(sys.argv[2])
# an LLC of a quarter and free RAM of six times the size: array_bytes_for gives exactly `size`
m = measure_bandwidth(threads, size // 4, size * 6, quick=True)
print(json.dumps({"read": m.read.best_bytes_per_s / 1e9, "array_bytes": m.array_bytes, "threads": m.threads}))
"""


def build_reference() -> Path:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        sys.exit("no C compiler found: the C reference cannot be built")
    out = HERE / "_build" / "stream_ref"
    out.parent.mkdir(exist_ok=True)
    cmd = [cc, "-O3", "-march=native", "-ffast-math", "-fopenmp", str(HERE / "stream_ref.c"), "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        sys.exit(f"building the C reference failed (needs OpenMP): {r.stderr.strip()[:300]}")
    return out


def run(cmd: list[str], pin: str | None, env: dict[str, str] | None = None) -> dict[str, float]:
    full = (["taskset", "-c", pin] if pin is not None else []) + cmd
    out = subprocess.run(full, capture_output=True, text=True, check=True, env={**os.environ, **(env or {})})
    figures: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


def pair(ref: Path, threads: int, size: int, pin: str | None, ggprof_first: bool) -> tuple[float, float]:
    def ggprof() -> float:
        return run([sys.executable, "-c", GGPROF_READ, str(threads), str(size)], pin)["read"]

    def c() -> float:
        env = {"OMP_NUM_THREADS": str(threads), "OMP_PROC_BIND": "spread", "OMP_PLACES": "cores"}
        return run([str(ref), str(size // 8), "5"], pin, env)["read"]

    if ggprof_first:
        g = ggprof()
        return g, c()
    r = c()
    return ggprof(), r


def condition(name: str, ref: Path, threads: int, size: int, pairs: int, pin: str | None, out: list[str]) -> bool:
    ratios, gs, cs = [], [], []
    for i in range(pairs):
        g, c = pair(ref, threads, size, pin, ggprof_first=i % 2 == 0)
        gs.append(g)
        cs.append(c)
        ratios.append(g / c)
        say(out, f"  {name} pair {i + 1}: ggprof read {g:6.1f} GB/s, C read {c:6.1f} GB/s, ratio {g / c:.3f}")
    med = statistics.median(gs) / statistics.median(cs)
    worst = max(ratios)
    ok = worst <= HIGH and (name != "quiet" or LOW <= med <= HIGH)
    say(
        out,
        f"{name}: median ggprof {statistics.median(gs):.1f} GB/s, C {statistics.median(cs):.1f} GB/s, "
        f"ratio of medians {med:.3f} (pairs {min(ratios):.3f}-{worst:.3f}) -> "
        + ("ok" if ok else f"MISSED (target: quiet {LOW}-{HIGH}x, no pair above {HIGH}x)"),
    )
    return ok


def say(out: list[str], line: str) -> None:
    print(line, flush=True)
    out.append(line)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    from ggprof.machine.facts import gather_facts
    from ggprof.machine.stream import array_bytes_for

    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=HERE / "data" / f"bandwidth-{time.strftime('%Y-%m-%d')}.txt")
    args = ap.parse_args()
    if shutil.which("taskset") is None:
        sys.exit("taskset (util-linux) is needed to pin the workers")
    facts = gather_facts()
    threads = facts.usable_cores
    size, _ = array_bytes_for(facts.llc_bytes, facts.ram_available_bytes, quick=True)
    ref = build_reference()
    out: list[str] = []
    say(out, f"CPU: {cpu_model()} ({facts.physical_cores} physical / {facts.logical_cores} logical cores)")
    say(out, f"{threads} threads, {size >> 20} MiB arrays, {args.pairs} alternating pairs per condition")
    ok = condition("quiet", ref, threads, size, args.pairs, None, out)
    ok &= condition("one CPU", ref, threads, size, args.pairs, "0", out)
    busy = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        ok &= condition("busy", ref, threads, size, args.pairs, None, out)
    finally:
        busy.kill()
        busy.wait()
    say(out, "all targets met" if ok else "a target was missed")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(out) + "\n")
    print(f"kept in {args.out}")


if __name__ == "__main__":
    main()
