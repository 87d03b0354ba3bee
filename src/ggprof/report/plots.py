"""Pictures of the sweeps (the optional extra `ggprof[plot]`, matplotlib): aggregate tok/s and
step time against the batch, tok/s against threads. SVG or PNG by the file's suffix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ggprof.bench.results import BenchResult
from ggprof.errors import BadInputError
from ggprof.pipelines.sweep import BatchSweep, ThreadSweep

SUFFIXES = (".png", ".svg")


def _pyplot(path: Path) -> Any:
    if path.suffix.lower() not in SUFFIXES:
        raise BadInputError(f"--plot {path}: give a .png or .svg file")
    try:
        import matplotlib
    except ImportError:
        raise BadInputError("--plot needs matplotlib: pip install 'ggprof[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # labels stay text in the SVG (readable, searchable)
    return plt


def plot_batch_sweeps(sweeps: list[tuple[BenchResult, BatchSweep]], path: Path) -> Path:
    plt = _pyplot(path)
    fig, (tput, step) = plt.subplots(1, 2, figsize=(10, 4))
    for result, s in sweeps:
        b = [p.batch for p in s.points]
        label = f"{result.params.n_threads} threads"
        tput.plot(b, [p.aggregate_tok_s for p in s.points], marker="o", label=f"aggregate tok/s, {label}")
        tput.plot(
            b, [p.per_sequence_tok_s for p in s.points], marker="x", ls="--", label=f"per-sequence tok/s, {label}"
        )
        step.plot(b, [p.step_ms for p in s.points], marker="o", label=f"step time (TPOT) ms, {label}")
        if s.bend_batch:
            step.axvline(s.bend_batch, color="grey", ls=":", label=f"measured bend: B = {s.bend_batch}")
        if s.predicted_ridge_batch:
            step.axvline(
                s.predicted_ridge_batch,
                color="red",
                ls="--",
                label=f"predicted ridge: B = {s.predicted_ridge_batch:.3g}",
            )
    batches = sorted({p.batch for _, s in sweeps for p in s.points})
    for ax, title in ((tput, "decode throughput vs batch"), (step, "decode step vs batch")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.set_xlabel("sequences decoded together (B)")
        ax.set_title(title)
        ax.legend(fontsize=7)
    tput.set_ylabel("tok/s")
    step.set_ylabel("ms")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_thread_sweep(s: ThreadSweep, path: Path) -> Path:
    plt = _pyplot(path)
    fig, ax = plt.subplots(figsize=(6, 4))
    t = [p.threads for p in s.points]
    if any(p.tg_tok_s for p in s.points):
        ax.plot(t, [p.tg_tok_s or 0 for p in s.points], marker="o", label="decode tok/s")
    if any(p.pp_tok_s for p in s.points):
        ax2 = ax.twinx()
        ax2.plot(t, [p.pp_tok_s or 0 for p in s.points], marker="s", color="tab:orange", label="prefill tok/s")
        ax2.set_ylabel("prefill tok/s")
        ax2.legend(loc="lower right", fontsize=7)
    if s.best_tg_threads:
        ax.axvline(s.best_tg_threads, color="grey", ls=":", label=f"best: {s.advice}")
    ax.set_xlabel("threads (-t)")
    ax.set_ylabel("decode tok/s")
    ax.set_title("llama.cpp speed vs threads")
    ax.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
