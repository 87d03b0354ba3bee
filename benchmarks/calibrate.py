"""Fit the expected-speed models on published llama.cpp results and measure the verdicts on them.

    python benchmarks/calibrate.py            # judge the dataset with the committed fits
    python benchmarks/calibrate.py --write    # refit, write plugins/ggprof_backends/speed-fits.json, judge
    python benchmarks/calibrate.py --plot docs/calibration-published.png

Each row is judged as `ggprof check MODEL --tg X (or --pp X) --device ID --backend B` on the
reference header of its model, and again as `--bandwidth <published GB/s> --flops <published
peak>` with no device (so no architecture). Printed per backend: honest results judged
impossible and suspicious, the same rows made 2.5x slower (decode) or 4x slower (prefill)
judged suspicious, and the median error of the band's midpoint. Targets: 0 impossible,
<= 5% suspicious, >= 95% of the slowed rows suspicious, median midpoint error <= 15%.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from ggprof.paths import cache_dir
from ggprof.pipelines.calibrate import References, RowVerdict, fit_all, judge_row, load_dataset
from ggprof.plugins import extensions
from ggprof.speed import OUTLIER_FACTOR

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT / "benchmarks" / "data" / "llama-cpp-results.jsonl"
SLOWDOWN = {"tg": 2.5, "pp": 4.0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", type=Path, default=DATASET)
    ap.add_argument("--write", action="store_true", help="refit and write the plugin's speed-fits.json")
    ap.add_argument("--plot", type=Path, help="draw measured vs expected (needs matplotlib)")
    args = ap.parse_args()

    from ggprof_backends import _fitted

    ext = extensions()
    rows = load_dataset(args.dataset, ext.profiles)
    refs = References(cache_dir() / "reference")
    fresh = fit_all(
        rows,
        refs,
        dataset=str(args.dataset.relative_to(ROOT)) if args.dataset.is_relative_to(ROOT) else str(args.dataset),
    )
    if args.write:
        _fitted.FITS_PATH.write_text(fresh.to_json())
        _fitted.fits.cache_clear()
        print(f"wrote {_fitted.FITS_PATH.relative_to(ROOT)}")
    elif _fitted.fits().to_json() != fresh.to_json():
        print("warning: the committed speed-fits.json differs from a refit of this dataset (run with --write)")
    print(f"{len(rows)} rows from {args.dataset.name}, {len({r.profile.id for r in rows})} devices\n")
    for b, f in _fitted.fits().decode.items():
        print(f"decode  {b:7s} {f.describe()}")
    for b, f in _fitted.fits().decode_arch.items():
        print(f"decode  {b:7s} with the device's architecture: {f.describe()}")
    for b, f in _fitted.fits().prefill.items():
        print(f"prefill {b:7s} {f.describe()}")
    for b, f in _fitted.fits().prefill_any.items():
        print(f"prefill {b:7s} without the architecture: {f.describe()}")
    for name, fitted_table in (
        ("decode", _fitted.fits().decode),
        ("decode with the architecture", _fitted.fits().decode_arch),
        ("prefill", _fitted.fits().prefill),
        ("prefill without the architecture", _fitted.fits().prefill_any),
    ):
        for b, f in fitted_table.items():
            for label in f.left_out:
                print(f"  left out of the {b} {name} fit ({OUTLIER_FACTOR:g}x off): {label}")
    for kind, fitted in (("tg", _fitted.fits().decode), ("pp", _fitted.fits().prefill)):
        for b in sorted({r.backend for r in rows if r.kind == kind} - set(fitted)):
            mine = [r for r in rows if r.backend == b and r.kind == kind]
            devices = len({r.profile.id for r in mine})
            what = "decode " if kind == "tg" else "prefill"
            if kind == "pp" and b in _fitted.fits().prefill_any:
                print(f"{what} {b:7s} not fitted by architecture ({len(mine)} rows): one factor for all its devices")
                continue
            print(f"{what} {b:7s} not fitted: {len(mine)} rows on {devices} devices; its plugin's own band applies")

    honest = [judge_row(r, refs, ext) for r in rows]
    slowed = [judge_row(r, refs, ext, slowdown=SLOWDOWN[r.kind]) for r in rows]
    by_bw = [judge_row(r, refs, ext, use_profile=False) for r in rows]
    by_bw_slow = [judge_row(r, refs, ext, slowdown=SLOWDOWN[r.kind], use_profile=False) for r in rows]

    print()
    print(table("--device ID (profile figures)", honest, slowed))
    print(table("--bandwidth GB/s --flops TFLOPS (published figures, no device)", by_bw, by_bw_slow))
    bad = [v for v in honest if v.severity in ("impossible", "suspicious")]
    for v in bad:
        mid = f"{v.low_tok_s:.1f}-{v.high_tok_s:.1f}" if v.low_tok_s and v.high_tok_s else "-"
        print(f"  {v.severity:10s} {v.row.label}: {v.row.tok_s} tok/s, band {mid}")
    if args.plot:
        plot(honest, args.plot)
    return 0


def table(title: str, honest: list[RowVerdict], slowed: list[RowVerdict]) -> str:
    groups: dict[tuple[str, str], list[tuple[RowVerdict, RowVerdict]]] = defaultdict(list)
    for h, s in zip(honest, slowed, strict=True):
        groups[(h.row.backend, h.row.kind)].append((h, s))
        groups[("all", h.row.kind)].append((h, s))
    lines = [
        title,
        f"{'backend':8s} {'test':7s} {'rows':>5s} {'impossible':>10s} {'suspicious':>10s} {'slowed caught':>13s} "
        f"{'median midpoint error':>22s}",
    ]
    for (backend, kind), pairs in sorted(groups.items(), key=lambda kv: (kv[0][0] == "all", kv[0])):
        n = len(pairs)
        imp = sum(h.severity == "impossible" for h, _ in pairs) / n
        sus = sum(h.severity == "suspicious" for h, _ in pairs) / n
        caught = sum(s.severity in ("suspicious", "impossible") for _, s in pairs) / n
        errors = [
            abs((h.low_tok_s + h.high_tok_s) / 2 / h.row.tok_s - 1) for h, _ in pairs if h.low_tok_s and h.high_tok_s
        ]
        med = f"{statistics.median(errors):.1%}" if errors else "no band"
        test = "decode" if kind == "tg" else "prefill"
        lines.append(f"{backend:8s} {test:7s} {n:5d} {imp:10.1%} {sus:10.1%} {caught:13.1%} {med:>22s}")
    return "\n".join(lines) + "\n"


def plot(verdicts: list[RowVerdict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    colors = {"cuda": "tab:green", "metal": "tab:gray", "rocm": "tab:red", "vulkan": "tab:purple", "cpu": "tab:blue"}
    for ax, kind, title in ((axes[0], "tg", "decode"), (axes[1], "pp", "prefill")):
        for v in verdicts:
            if v.row.kind != kind or not v.low_tok_s or not v.high_tok_s:
                continue
            mid = (v.low_tok_s + v.high_tok_s) / 2
            c = colors.get(v.row.backend, "k")
            ax.plot([mid, mid], [v.low_tok_s, v.high_tok_s], color=c, alpha=0.25, lw=1)
            ax.scatter([mid], [v.row.tok_s], s=9, color=c, label=v.row.backend)
        lo, hi = ax.get_xlim()
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("expected (band midpoint), tok/s")
        ax.set_ylabel("published, tok/s (the band as a vertical line)")
        ax.set_title(f"{title}: published llama.cpp results vs the fitted band")
        handles, labels = ax.get_legend_handles_labels()
        uniq = dict(zip(labels, handles, strict=True))
        ax.legend(uniq.values(), uniq.keys(), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
