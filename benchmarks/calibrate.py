"""Fit the expected-speed models on published llama.cpp results and measure the verdicts on them.

    python benchmarks/calibrate.py            # judge the dataset with the committed fits
    python benchmarks/calibrate.py --write    # refit, write src/ggprof/calibration/speed-fits.json, judge
    python benchmarks/calibrate.py --placements-only --write  # refit placement-fits.json alone
      (--write also refits speculative-fits.json, bench_speculative.py's reach, and moe-fits.json,
      bench_moe.py's fixed time a MoE layer adds)
    python benchmarks/calibrate.py --plot docs/calibration-published.png

Each row is judged as `ggprof check MODEL --tg X (or --pp X) --device ID --backend B` on the
reference header of its model, and again as `--bandwidth <published GB/s> --flops <published
peak>` with no device (so no architecture). Printed per backend: honest results judged
impossible and suspicious, the same rows made 2.5x slower (decode) or 4x slower (prefill)
judged suspicious, and the median error of the band's midpoint; first in sample (the rows
the fit saw), then **leave one device out**: each device's rows judged by the fits made
without that device, as a device the dataset does not hold will be. Targets, per backend
with results on at least 5 devices: 0 impossible, <= 5% suspicious, >= 95% of the slowed
rows suspicious.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from ggprof_backends._diagnosis import AMDVLK_AHEAD_UNTIL_BUILD, UBATCH_PREFILL_SHARE
from ggprof_backends.vulkan import AMDVLK

from ggprof import calibration
from ggprof.calibration.levels import MIN_LEVEL_DEVICES
from ggprof.llamacpp import N_UBATCH
from ggprof.paths import cache_dir
from ggprof.physics.expected import LEVELS, OUTLIER_FACTOR, Levels
from ggprof.pipelines.calibrate import (
    Points,
    References,
    ResultRow,
    RowVerdict,
    ceiling_known,
    ceiling_unknown,
    judge_row,
    load_dataset,
    points_of,
    regress_all,
    regress_points,
)
from ggprof.pipelines.extensions import Extensions
from ggprof.plugins import extensions

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT / "benchmarks" / "data" / "llama-cpp-results.jsonl"
BUILD_EFFECTS = ROOT / "benchmarks" / "data" / "build-effects.jsonl"  # one chip, builds side by side
UBATCH_EFFECTS = ROOT / "benchmarks" / "data" / "ubatch-effects.jsonl"  # one build, physical batches side by side
SLOWDOWN = {"tg": 2.5, "pp": 4.0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", type=Path, default=DATASET)
    ap.add_argument("--write", action="store_true", help="refit and write src/ggprof/calibration/speed-fits.json")
    ap.add_argument("--plot", type=Path, help="draw measured vs expected (needs matplotlib)")
    ap.add_argument("--loo-only", action="store_true", help="only the leave-one-device-out tables")
    ap.add_argument("--missed", action="store_true", help="list the slowed rows leave-one-out did not catch")
    ap.add_argument("--placements-only", action="store_true", help="only the placement shares (placement-fits.json)")
    args = ap.parse_args()
    if args.write:
        write_placement_fits()
        write_speculative_fits()
        write_moe_fits()
    if args.placements_only:
        import bench_placements

        sys.argv = [sys.argv[0]]
        return bench_placements.main()

    ext = extensions()
    rows = load_dataset(args.dataset, ext.profiles)
    refs = References(cache_dir() / "reference")
    fresh = regress_all(
        rows,
        refs,
        dataset=str(args.dataset.relative_to(ROOT)) if args.dataset.is_relative_to(ROOT) else str(args.dataset),
    )
    if args.write:
        calibration.FITS_PATH.write_text(fresh.to_json())
        calibration.committed_fits.cache_clear()
        print(f"wrote {calibration.FITS_PATH.relative_to(ROOT)}")
    elif stale := calibration.speed_fits().differences(fresh):
        print(
            f"warning: the committed speed-fits.json differs from a refit of this dataset at {stale[0]} (run --write)"
        )
    print(f"{len(rows)} rows from {args.dataset.name}, {len({r.profile.id for r in rows})} devices\n")
    fits = calibration.speed_fits()
    for test, fitted_table, levels in (
        ("decode ", fits.decode, fits.decode_levels),
        ("prefill", fits.prefill, fits.prefill_levels),
    ):
        for b, f in fitted_table.items():
            print(f"{test} {b:7s} {f.describe()}")
            for label in f.left_out:
                print(f"  left out of the {b} {test.strip()} fit ({OUTLIER_FACTOR:g}x off): {label}")
            if b in levels:
                print(describe_levels(levels[b]))
            else:
                print(f"  no levels: fewer than {MIN_LEVEL_DEVICES} devices")
    for kind, fitted in (("tg", fits.decode), ("pp", fits.prefill)):
        for b in sorted({r.backend for r in rows if r.kind == kind} - set(fitted)):
            mine = [r for r in rows if r.backend == b and r.kind == kind]
            devices = len({r.profile.id for r in mine})
            what = "decode " if kind == "tg" else "prefill"
            print(f"{what} {b:7s} not fitted: {len(mine)} rows on {devices} devices; its plugin's own band applies")

    if not args.loo_only:
        honest, slowed, by_bw, by_bw_slow = judge_all(rows, refs, ext)
        print()
        print(table("in sample, --device ID (profile figures): rows the fit saw", honest, slowed))
        print(table("in sample, --bandwidth GB/s --flops TFLOPS (no device): rows the fit saw", by_bw, by_bw_slow))
        if args.plot:
            plot(honest, args.plot)

    # Leave one device out: fit without device D, judge D's rows (as published and slowed), for
    # every device. The figure a new device will see; the one docs/calibration.md reports.
    started = time.perf_counter()
    loo: list[tuple[RowVerdict, ...]] = []
    points = points_of(rows, refs)
    for device in sorted({r.profile.id for r in rows}):
        mine = [r for r in rows if r.profile.id == device]
        with calibration.using(regress_points(points.without(device), dataset="leave one out")):
            loo += zip(*judge_all(mine, refs, ext), *judge_unbuilt(mine, refs, ext), strict=True)
    honest, slowed, by_bw, by_bw_slow, no_build, no_build_slow = (list(x) for x in zip(*loo, strict=True))
    seconds = time.perf_counter() - started
    print(f"\nleave one device out ({len({r.profile.id for r in rows})} devices, {seconds:.0f} s): each device judged")
    print("by fits made without it; targets per backend with >= 5 devices: 0 impossible, <= 5% suspicious,")
    print(f">= 95% of the {SLOWDOWN['tg']:g}x (decode) / {SLOWDOWN['pp']:g}x (prefill) slower rows caught\n")
    print(
        table("leave one device out, --device ID (profile figures) and the row's build", honest, slowed, targets=True)
    )
    print(
        table(
            "... by the level each band rested on (device: never, the device is left out)",
            honest,
            slowed,
            targets=True,
            by=lambda v: v.level,
        )
    )
    print(
        table(
            "... prefill by whether the row's compute ceiling is known (matrix cores used or not: the Vulkan "
            "banner, a build older than the kernels, a chip without them; without them, int8 dot products "
            "used or not: the banner's `int dot` and the build, a build older than the kernels, weights "
            "without them)",
            [v for v in honest if v.row.kind == "pp"],
            [v for v in slowed if v.row.kind == "pp"],
            targets=True,
            by=lambda v: ceiling_unknown(v.row, refs.spec(v.row.model_ref)) or "ceiling known",
        )
    )

    def known_pp(v: RowVerdict) -> bool:
        return v.row.kind == "pp" and ceiling_known(v.row, refs.spec(v.row.model_ref))

    print(
        table(
            "... prefill where the compute ceiling is known, by the level each band rested on",
            [v for v in honest if known_pp(v)],
            [v for v in slowed if known_pp(v)],
            targets=True,
            by=lambda v: v.level,
        )
    )
    print(table("leave one device out, --device ID, the build not given", no_build, no_build_slow, targets=True))
    print(table("leave one device out, --bandwidth GB/s --flops TFLOPS (no device)", by_bw, by_bw_slow, targets=True))
    for title, verdicts in (("--device", honest), ("--bandwidth", by_bw)):
        for v in verdicts:
            if v.severity in ("impossible", "suspicious"):
                band = f"{v.low_tok_s:.1f}-{v.high_tok_s:.1f}" if v.low_tok_s and v.high_tok_s else "-"
                print(f"  {title:11s} {v.severity:10s} {v.row.label}: {v.row.tok_s} tok/s, band {band}")
    if args.missed:
        for title, verdicts in (("--device", slowed), ("--bandwidth", by_bw_slow)):
            for v in verdicts:
                if v.severity not in ("impossible", "suspicious"):
                    band = f"{v.low_tok_s:.1f}-{v.high_tok_s:.1f}" if v.low_tok_s and v.high_tok_s else "-"
                    slow = v.row.tok_s / v.slowdown
                    print(f"  missed {title:11s} {v.row.label}: {slow:.1f} tok/s ({v.slowdown:g}x slower), band {band}")
    print(build_effects(points, refs, ext))
    print(ubatch_effects())
    print("\npublished RPC results (benchmarks/data/rpc-public.jsonl), judged as splits over their machines:")
    import bench_rpc_public

    return bench_rpc_public.main()


def write_placement_fits() -> None:
    """Fit the placement shares on benchmarks/data/placement-results.jsonl (bench_placements) and
    write src/ggprof/calibration/placement-fits.json."""
    import os
    import tempfile

    import bench_placements

    from ggprof.machine.profiles import ProfileDB

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GGPROF_CACHE_DIR"] = str(Path(tmp) / "cache")  # this host's measurements never read
        fits = bench_placements.fit_placements(bench_placements.load_rows(), Path(tmp), ProfileDB.default())
    calibration.PLACEMENT_FITS_PATH.write_text(fits.to_json())
    calibration.committed_placement_fits.cache_clear()
    print(f"wrote {calibration.PLACEMENT_FITS_PATH.relative_to(ROOT)}")


def write_moe_fits() -> None:
    """Fit the fixed time a MoE layer adds to a token on a GPU on benchmarks/data/moe-results.jsonl
    (bench_moe) and write moe-fits.json."""
    import bench_moe

    if bench_moe.write_fit() is not None:
        print(f"wrote {calibration.MOE_FITS_PATH.relative_to(ROOT)}")


def write_speculative_fits() -> None:
    """Fit the share of the modelled speed-up speculative runs reach on
    benchmarks/data/speculative-results.jsonl (bench_speculative) and write speculative-fits.json."""
    import bench_speculative

    if bench_speculative.write_reach() is not None:
        print(f"wrote {calibration.SPECULATIVE_FITS_PATH.relative_to(ROOT)}")


def judge_all(
    rows: list[ResultRow], refs: References, ext: Extensions
) -> tuple[list[RowVerdict], list[RowVerdict], list[RowVerdict], list[RowVerdict]]:
    """Each row judged four ways: as published and slowed, with the device and without."""
    return (
        [judge_row(r, refs, ext) for r in rows],
        [judge_row(r, refs, ext, slowdown=SLOWDOWN[r.kind]) for r in rows],
        [judge_row(r, refs, ext, use_profile=False) for r in rows],
        [judge_row(r, refs, ext, slowdown=SLOWDOWN[r.kind], use_profile=False) for r in rows],
    )


def judge_unbuilt(
    rows: list[ResultRow], refs: References, ext: Extensions
) -> tuple[list[RowVerdict], list[RowVerdict]]:
    """The rows judged with the device but not the build (`check --tg X --device ID` alone)."""
    return (
        [judge_row(r, refs, ext, use_build=False) for r in rows],
        [judge_row(r, refs, ext, slowdown=SLOWDOWN[r.kind], use_build=False) for r in rows],
    )


def build_effect(row: ResultRow) -> tuple[str, str | None]:
    """(what the row's build did, the word its cause names) for a build-effects row: the two
    slow configurations the data shows (each against a same-run pair that differs in that
    fact alone: benchmarks/import_build_effects.py), or every other build."""
    b = row.build
    facts = row.raw.get("build_facts")
    rocm = str(facts.get("rocm", "")) if isinstance(facts, dict) else ""
    if row.kind == "pp" and b.rocblas_use_hipblaslt in ("0", "unset") and rocm in ("", "6.4.3"):
        return "rocBLAS without hipBLASLt (ROCm 6.4.3, or unset on a 2025-08 build)", "hipBLASLt"
    if row.kind == "pp" and b.vulkan_driver == AMDVLK and (b.number or 0) > AMDVLK_AHEAD_UNTIL_BUILD:
        return f"AMDVLK after b{AMDVLK_AHEAD_UNTIL_BUILD}", "AMDVLK"
    return ("every other build, prefill" if row.kind == "pp" else "every build, decode"), None


def build_effects(points: Points, refs: References, ext: Extensions) -> str:
    """The build-effects rows, each judged with its build facts by fits made without its chip:
    the slow builds caught with their cause named, the others plausible."""
    rows = load_dataset(BUILD_EFFECTS, ext.profiles)
    chips = sorted({r.profile.id for r in rows})
    sources = sorted({r.source.split("/blob/")[0] for r in rows})
    groups: dict[str, list[tuple[RowVerdict, str | None]]] = defaultdict(list)
    for chip in chips:
        with calibration.using(regress_points(points.without(chip), dataset="leave the chip out")):
            for r in (r for r in rows if r.profile.id == chip):
                what, word = build_effect(r)
                groups[f"{r.backend:7s} {what}"].append((judge_row(r, refs, ext), word))
    lines = [
        f"\nbuild effects on one chip ({BUILD_EFFECTS.relative_to(ROOT)}: {len(rows)} results on "
        f"{', '.join(chips)} from {len(sources)} public repositories), each judged with its build facts "
        "by fits made without the chip",
        f"{'backend and build':76s} {'rows':>5s} {'suspicious':>10s} {'cause named':>11s}",
    ]
    for key, judged in sorted(groups.items()):
        n = len(judged)
        sus = sum(v.severity in ("suspicious", "impossible") for v, _ in judged)
        named = sum(bool(word and any(word in c for c in v.causes)) for v, word in judged)
        cause = f"{named / n:11.0%}" if judged[0][1] else f"{'-':>11s}"
        lines.append(f"{key:76s} {n:5d} {sus / n:10.0%} {cause}")
    return "\n".join(lines)


def ubatch_effects() -> str:
    """The share of its -ub 512 prompt speed each public table kept at each smaller physical
    batch, beside the range a slow prompt's cause quotes (_diagnosis.UBATCH_PREFILL_SHARE)."""
    rows = [json.loads(line) for line in UBATCH_EFFECTS.read_text().splitlines() if line.strip()]
    at_default = {(r["source"], r["model"]): r["tok_s"] for r in rows if r["n_ubatch"] == N_UBATCH}
    shares: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        if r["n_ubatch"] < N_UBATCH:
            shares[r["n_ubatch"]].append(r["tok_s"] / at_default[r["source"], r["model"]])
    devices = sorted({r["device"] for r in rows})
    lines = [
        f"\nphysical batches ({UBATCH_EFFECTS.relative_to(ROOT)}: {len(at_default)} tables on {', '.join(devices)}): "
        f"the share of each table's -ub {N_UBATCH} prompt speed kept",
        f"{'-ub':>5s} {'tables':>6s} {'kept':>9s} {'quoted':>9s}",
    ]
    for size, kept in sorted(shares.items()):
        quoted = UBATCH_PREFILL_SHARE.get(size)
        said = f"{quoted[0]:.0%}-{quoted[1]:.0%}" if quoted else "-"
        lines.append(f"{size:5d} {len(kept):6d} {f'{min(kept):.0%}-{max(kept):.0%}':>9s} {said:>9s}")
    return "\n".join(lines)


def describe_levels(lv: Levels) -> str:
    """One backend's levels: every key's effect (x its speed factor) and the devices behind it."""
    lines = [
        f"  levels: {lv.n} results on {lv.n_devices} devices, shrunk toward the level above by "
        f"{lv.shrink_devices:g} devices; a new device's error {math.exp(lv.spread_low) - 1:+.0%}/"
        f"{math.exp(lv.spread_high) - 1:+.0%} (leave one device out)"
    ]
    for level in [lv for lv in reversed(LEVELS) if lv != "device"]:  # the least specific first
        keys = ", ".join(
            f"{k} x{math.exp(e):.2f} ({lv.devices[level][k]})" for k, e in sorted(lv.effects.get(level, {}).items())
        )
        lines.append(f"    {level}: {keys or '-'}")
    terms = ", ".join(
        f"{t} x{math.exp(v):.2f} per {'year' if t == 'build age' else 'unit'}" for t, v in sorted(lv.terms.items())
    )
    lines.append(f"    build terms: {terms or 'none the data can fit'}")
    return "\n".join(lines)


MIN_TARGET_DEVICES = 5  # the targets apply to a backend with results on at least this many devices


def table(
    title: str,
    honest: list[RowVerdict],
    slowed: list[RowVerdict],
    targets: bool = False,
    by: Callable[[RowVerdict], str] | None = None,
) -> str:
    """Per backend and test (and `by`, where given): honest rows judged impossible and
    suspicious, slowed rows caught, the median midpoint error and the median band width."""
    groups: dict[tuple[str, str, str], list[tuple[RowVerdict, RowVerdict]]] = defaultdict(list)
    for h, s in zip(honest, slowed, strict=True):
        sub = by(h) if by else ""
        groups[(h.row.backend, h.row.kind, sub)].append((h, s))
        if not by:
            groups[("all", h.row.kind, "")].append((h, s))
    lines = [
        title,
        f"{'backend':8s} {'test':7s} {'rows':>5s} {'devices':>7s} {'impossible':>10s} {'suspicious':>10s} "
        f"{'slowed caught':>13s} {'midpoint error':>14s} {'band width':>10s}" + ("  targets" if targets else ""),
    ]
    for (backend, kind, sub), pairs in sorted(groups.items(), key=lambda kv: (kv[0][0] == "all", kv[0])):
        n = len(pairs)
        devices = len({h.row.profile.id for h, _ in pairs})
        imp = sum(h.severity == "impossible" for h, _ in pairs) / n
        sus = sum(h.severity == "suspicious" for h, _ in pairs) / n
        caught = sum(s.severity in ("suspicious", "impossible") for _, s in pairs) / n
        errors = [
            abs((h.low_tok_s + h.high_tok_s) / 2 / h.row.tok_s - 1) for h, _ in pairs if h.low_tok_s and h.high_tok_s
        ]
        med = f"{statistics.median(errors):.1%}" if errors else "no band"
        widths = [h.high_tok_s / h.low_tok_s for h, _ in pairs if h.low_tok_s and h.high_tok_s]
        width = f"x{statistics.median(widths):.2f}" if widths else "-"
        test = "decode" if kind == "tg" else "prefill"
        line = (
            f"{backend:8s} {test:7s} {n:5d} {devices:7d} {imp:10.1%} {sus:10.1%} {caught:13.1%} {med:>14s} {width:>10s}"
        )
        if targets:
            met = imp == 0 and sus <= 0.05 and caught >= 0.95
            line += "  " + ("met" if met else "MISSED") if devices >= MIN_TARGET_DEVICES else "  (few devices)"
        lines.append(line + (f"  {sub}" if sub else ""))
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
