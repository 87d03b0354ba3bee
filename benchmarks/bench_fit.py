"""`ggprof fit` over 200 GGUF headers with large vocabularies, next to `inspect` of one.

Each file is a Llama-3-8B-shaped header with a 128,256-token vocabulary (strings, scores
and types, as real files carry; the data section a sparse hole), hard-linked 200 times so
each is a distinct path. Prints the whole `fit` run (scan, headers, placement, ranking) and
its per-file cost beside `inspect`'s per-header cost in the same process.

    python benchmarks/bench_fit.py [--files 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> None:
    from ggufs import Q4_K, Shape, write_model

    from ggprof.figures import Figure
    from ggprof.machine.target import DeviceChoice, resolve_target
    from ggprof.model.spec import load_model
    from ggprof.pipelines.choose import ChooseOptions, choose_models, scan
    from ggprof.plugins import extensions
    from ggprof.units import parse_bandwidth

    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=200)
    args = ap.parse_args()
    ext = extensions()
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        shape = Shape(
            n_layers=32, n_embd=4096, n_heads=32, n_kv_heads=8, n_ff=14336, vocab=128256,
            qtype=Q4_K, file_type=15, tokens=True, context=131072,
        )  # fmt: skip
        first = write_model(folder / "model-0.gguf", shape)[0]
        for i in range(1, args.files):
            os.link(first, folder / f"model-{i}.gguf")
        inspect_s = []
        for _ in range(15):
            t0 = time.perf_counter()
            load_model(first)
            inspect_s.append(time.perf_counter() - t0)
        choice = DeviceChoice(bandwidth=Figure(parse_bandwidth("90"), "user", "--bandwidth 90"))
        target = resolve_target(choice, profiles=ext.profiles, host=None)
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            report = choose_models(scan([folder], []), target, ChooseOptions(ctx=4096), ext)
            runs.append(time.perf_counter() - t0)
        assert len(report.models) == args.files, (len(report.models), report.skipped[:2])
        size_gb = first.stat().st_size / 1e9
    per_inspect = statistics.median(inspect_s) * 1e3
    whole = statistics.median(runs)
    per_fit = whole / args.files * 1e3
    print(f"header: Llama-3-8B shape, {shape.vocab:,}-token vocabulary ({size_gb:.2f} GB sparse file)")
    print(f"inspect, one header:        median {per_inspect:6.1f} ms over 15")
    print(f"fit, {args.files} files:            median {whole:6.2f} s over 3  ({per_fit:.1f} ms per file)")
    print(f"fit's per-file cost = {per_fit / per_inspect:.2f}x inspect's (the rest: placement, prediction, ranking)")


if __name__ == "__main__":
    main()
