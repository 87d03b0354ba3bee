"""Pictures of the sweeps (the optional extra `ggprof[plot]`, matplotlib): aggregate tok/s and
step time against the batch, tok/s against threads, a server's gap to llama-bench. SVG or PNG by
the file's suffix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ggprof.bench.results import BenchResult
from ggprof.errors import BadInputError
from ggprof.pipelines.sweep import BatchSweep, ThreadSweep
from ggprof.units import clean_name

SUFFIXES = (".png", ".svg")
INSTALL_PLOT = "pip install 'ggprof[plot]'"  # the optional extra: matplotlib


def no_matplotlib(what: str) -> BadInputError:
    return BadInputError(f"{what} needs matplotlib, the optional extra [plot]: {INSTALL_PLOT}")


def check_plot_target(path: Path, what: str = "--plot") -> None:
    """Before anything runs: a .png or .svg path in a folder that exists and can be written,
    not a folder, FIFO or device, and matplotlib installed; BadInputError (one line) otherwise.
    `what` draws it: `--plot`, or `ggprof plot`."""
    import importlib.util
    import os
    import stat

    if path.suffix.lower() not in SUFFIXES:
        raise BadInputError(f"--plot {clean_name(path)}: give a .png or .svg file")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise BadInputError(f"--plot {clean_name(path)}: no folder {clean_name(folder)}")
    if not os.access(folder, os.W_OK):
        raise BadInputError(f"--plot {clean_name(path)}: the folder cannot be written")
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):
        raise BadInputError(f"--plot {clean_name(path)}: not a regular file")
    if importlib.util.find_spec("matplotlib") is None:
        raise no_matplotlib(what)


def _pyplot(path: Path) -> Any:
    if path.suffix.lower() not in SUFFIXES:
        raise BadInputError(f"--plot {clean_name(path)}: give a .png or .svg file")
    try:
        import matplotlib
    except ImportError:
        raise no_matplotlib("--plot") from None
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


# -- the roofline of a prediction (and of a profile's measurements) --------------------------------
def _points(result: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[int, float | None, float | None]]]:
    """(the first prediction, [(depth, measured decode tok/s, measured prefill tok/s)])."""
    if "depths" in result:  # a profile: a prediction and a measurement per depth
        depths = [d for d in result["depths"] if d.get("prediction")]
        if not depths:
            raise BadInputError("this run has no prediction (no bandwidth was known): nothing to draw")
        measured = [(d["depth"], d.get("measured_tg_tok_s"), d.get("measured_pp_tok_s")) for d in depths]
        return depths[0]["prediction"], measured
    return result, []  # a prediction alone (`ggprof predict`)


def plot_roofline(result: dict[str, Any], path: Path) -> Path:
    """Left: FLOP/s against arithmetic intensity (the bandwidth slope, the compute roof, the
    ridge; prefill and decode, predicted and measured). Right: decode tok/s against depth."""
    plt = _pyplot(path)
    p, measured = _points(result)
    bw, peak = p["bandwidth_bytes_per_s"], p.get("peak_flops_per_s")
    i_dec, i_pre = p["decode_intensity_flops_per_byte"], p.get("prefill_intensity_flops_per_byte") or 0
    fig, (roof, depth) = plt.subplots(1, 2, figsize=(11, 4.2))
    lo = min(i_dec, i_pre or i_dec) / 4
    hi = max(i_pre, (peak / bw) if peak else 0, i_dec) * 4
    xs = [lo * (hi / lo) ** (k / 60) for k in range(61)]
    roof.plot(xs, [bw * x for x in xs], color="tab:blue", label=f"bandwidth slope ({bw / 1e9:.3g} GB/s)")
    if peak:
        roof.axhline(peak, color="tab:red", label=f"compute roof ({peak / 1e12:.3g} TFLOP/s)")
        roof.axvline(peak / bw, color="grey", ls=":", label=f"ridge point ({peak / bw:.3g} FLOP/byte)")

    def attain(x: float) -> float:
        return float(min(bw * x, peak) if peak else bw * x)

    decode_flops_per_tok = i_dec * p["bytes_per_token_at_depth"]
    roof.scatter([i_dec], [attain(i_dec)], marker="o", color="tab:green", label="decode, predicted (batch 1)")
    if i_pre:
        roof.scatter([i_pre], [attain(i_pre)], marker="s", color="tab:purple", label="prefill, predicted")
    tg0 = next((tg for d, tg, _ in measured if tg), None)
    pp0 = next((pp for d, _, pp in measured if pp), None)
    if tg0:
        roof.scatter(
            [i_dec], [tg0 * decode_flops_per_tok], marker="x", s=80, color="tab:green", label="decode, measured"
        )
    if pp0 and i_pre:
        roof.scatter(
            [i_pre],
            [pp0 * p["prefill_flops_per_token"]],
            marker="x",
            s=80,
            color="tab:purple",
            label="prefill, measured",
        )
    roof.set_xscale("log")
    roof.set_yscale("log")
    roof.set_xlabel("arithmetic intensity (FLOP/byte)")
    roof.set_ylabel("FLOP/s")
    roof.set_title(f"roofline: {p.get('device_name', '')}"[:60])
    roof.legend(fontsize=7)
    table = p.get("depth_table") or []
    xs_d = [r["depth"] for r in table]
    depth.plot(
        xs_d, [r["decode_ceiling_tok_s"] for r in table], marker=".", label="decode ceiling vs depth (predicted)"
    )
    band = p.get("efficiency_band")
    if band:
        depth.fill_between(
            xs_d,
            [band[0] * r["decode_ceiling_tok_s"] for r in table],
            [band[1] * r["decode_ceiling_tok_s"] for r in table],
            alpha=0.2,
            label=f"expected band ({band[0]:.0%}-{band[1]:.0%} of the ceiling)",
        )
    judged = [d for d in result.get("depths", []) if d.get("expected_tok_s_low") is not None]
    if judged:
        depth.errorbar(
            [d["depth"] for d in judged],
            [(d["expected_tok_s_low"] + d["expected_tok_s_high"]) / 2 for d in judged],
            yerr=[(d["expected_tok_s_high"] - d["expected_tok_s_low"]) / 2 for d in judged],
            fmt="none",
            ecolor="tab:green",
            capsize=6,
            label="the verdict's expected band (with the measured compute roof)",
        )
    points = [(d, tg) for d, tg, _ in measured if tg]
    if points:
        depth.scatter(
            [d for d, _ in points], [tg for _, tg in points], marker="x", s=80, color="black", label="decode, measured"
        )
    depth.set_xlabel("depth (tokens already in the KV cache)")
    depth.set_ylabel("decode tok/s")
    depth.set_title("decode speed against depth")
    depth.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_gap(gap: dict[str, Any], path: Path) -> Path:
    """`profile --server --vs-bench`'s two waterfalls side by side: llama-bench's bar, each term
    floating where it moves the rate, the unexplained rest, the server's bar, the steps beyond."""
    plt = _pyplot(path)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, test in zip(axes, ("prefill", "decode"), strict=True):
        w = gap.get(test) or {}
        bars: list[tuple[str, float, float, str]] = []  # label, bottom, height, colour
        start, end = w.get("start"), (w.get("end") or {}).get("tok_s") or 0.0
        level = start.get("tok_s") if start else None
        if level is not None:
            bars.append(("llama-bench", 0.0, level, "tab:blue"))
            steps = [(t["name"], t["tok_s"]) for t in w.get("terms") or []]
            if (rest := w.get("unexplained_tok_s")) is not None:
                steps.append(("unexplained", rest))
            for name, delta in steps:
                bars.append((name, level, delta, "tab:green" if delta >= 0 else "tab:red"))
                level += delta
        bars.append(("server", 0.0, end, "tab:orange"))
        level = end
        for t in w.get("beyond") or []:
            bars.append((t["name"], level, t["tok_s"], "tab:gray"))
            level += t["tok_s"]
        x = range(len(bars))
        ax.bar(x, [b[2] for b in bars], bottom=[b[1] for b in bars], color=[b[3] for b in bars])
        ax.set_xticks(list(x), [clean_name(b[0], 24) for b in bars], rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("tok/s")
        ax.set_title(f"{test}: llama-bench -> server")
    fig.suptitle(clean_name(gap.get("server"), 100), fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
