"""Published llama-bench results of mixtures of experts run wholly on one device
(benchmarks/data/moe-results.jsonl): the fixed time a MoE layer adds to a token on a GPU
(ggprof.physics.moe), fitted and judged leaving one device out.

Each MoE decode row at depth 0 (a deeper test's attention moves with depth, not its MoE layers;
BF16 rows not: the speed fits hold F16 results) becomes
`ggprof check MODEL --tg X --depth 0 --device P --backend B [--build N]` on a header of its
model's published shape (bench_placements.shape_of: the row's parameters, active parameters and
size), judged first with no MoE term: its time less the time the dense band's midpoint allows,
over its MoE layers, is the row's `c` (ggprof.calibration.moe), where that band is fitted for its
weights' type (a basis saying "no published results" gives no reference). The fit is the median
over devices, its band the errors of each device's rows predicted without it (`--write` keeps the
fit on every row in src/ggprof/calibration/moe-fits.json).

Printed: the fit with each row's `c`; then the MoE rows judged as published and slowed to a
third, each by the fit made without its device, beside the same verdicts with no MoE term. Dense
rows of the same sources are kept in the data for reference (no MoE layer: the term never
touches them); rows at depth, prompt tests and BF16 are counted, not judged.

    python benchmarks/bench_moe.py [--rows] [--write] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "moe-results.jsonl"
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_placements  # noqa: E402
from ggufs import write_model  # noqa: E402

from ggprof.calibration.moe import LayerRow, fit_layer_cost, held_out  # noqa: E402
from ggprof.physics.moe import MoeLayerFit  # noqa: E402

WHAT = "the fixed time a MoE layer adds to a token on a GPU"
SLOWED = 3.0
# a family's published figures where the row leaves them out: (the name bench_placements' shapes
# know, parameters B, active parameters B)
FAMILIES = {
    "gpt-oss-20b": ("gpt-oss-20b", 20.91, 3.61),
    "gpt-oss-120b": ("gpt-oss-120b", 116.83, 5.13),
    "qwen3-30b-a3b": ("qwen3-30b-a3b", 30.53, 3.3),
    "qwen3-coder-30b-a3b": ("qwen3-30b-a3b", 30.53, 3.3),
    "qwen3.5-35b-a3b": ("qwen3.5-35b-a3b", 34.66, 3.0),
    "qwen3.6-35b-a3b": ("qwen3.6-35b-a3b", 34.66, 3.0),
    "glm-4.5-air": ("glm-4.5-air", 110.47, 12.0),
}


def load_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()] if DATA.exists() else []


def depth_of(test: str) -> int | None:
    """llama-bench's decode test at its depth (`tg128`, `tg32 @ d4096`); None for a prompt test."""
    found = re.fullmatch(r"tg\d+(?:\s*@\s*d(\d+))?", test.strip())
    return int(found.group(1) or 0) if found else None


def placement_row(row: dict[str, Any]) -> dict[str, Any] | None:
    """The row in bench_placements' terms (its shape_of reads these), None for a family it has no shape for."""
    family = FAMILIES.get(row["model_family"])
    if family is None:
        return None
    name, params, active = family
    return {
        "model": name,
        "model_params_b": row.get("params_b") or params,
        "active_params_b": active,
        "quant": row["quant"],
        "model_size_gib": row.get("model_size_gib"),
    }


def backend_of(row: dict[str, Any]) -> str:
    return bench_placements.backend_of(row)


def ggprof(args: list[str]) -> dict[str, Any] | None:
    """`ggprof check --json`'s answer in this process (bench_placements' runner)."""
    return bench_placements.ggprof(args)


def skipped(row: dict[str, Any]) -> str:
    """Why a row is not judged ("" where it is)."""
    depth = depth_of(row["test"])
    if not row["moe"]:
        return "a dense model (no MoE layer: the term never touches it)"
    if depth is None:
        return "a prompt test"
    if depth:
        return "a decode at depth (its attention, not its MoE layers, moves with depth: depth 0 isolates them)"
    if not row["profile"] or placement_row(row) is None:
        return "no profile or no shape for its model"
    if "BF16" in row["quant"].upper():
        return "BF16 (the speed fits hold F16 results, and BF16's kernels differ by backend)"
    return ""


def judged_rows(rows: list[dict[str, Any]], folder: Path) -> list[tuple[int, dict[str, Any], Path, list[str]]]:
    """(index, row, header, check's arguments less --tg) of each MoE decode row at depth 0 that can
    be judged."""
    out = []
    for i, row in enumerate(rows):
        like = placement_row(row)
        depth = depth_of(row["test"])
        if skipped(row) or like is None or depth is None:
            continue
        shape = bench_placements.shape_of(like)
        if shape is None:
            continue
        shape = replace(shape, context=max(shape.context, depth + 4096))  # a test at depth d fits its context
        model = folder / f"moe{i}.gguf"
        if not model.exists():
            write_model(model, shape)
        args = ["check", str(model), "--device", row["profile"], "--backend", backend_of(row), "--depth", str(depth)]
        build = re.search(r"\b(\d{4,5})\b", str(row.get("build") or ""))
        args += ["--build", build.group(1)] if build else []
        out.append((i, row, model, [*args, "--json"]))
    return out


def layer_rows(rows: list[dict[str, Any]], folder: Path) -> list[LayerRow]:
    """Each MoE decode row's `c`: its time less the dense band's midpoint's, over its MoE layers."""
    from ggprof import calibration
    from ggprof.model.spec import load_model
    from ggprof.physics.moe import moe_layers

    out = []
    with calibration.using_moe(None):
        for i, row, model, args in judged_rows(rows, folder):
            answer = ggprof([*args, "--tg", f"{row['tok_s']:g}"])
            if not answer or not answer.get("expected_tok_s_low"):
                continue
            if "no published results for" in answer.get("expected_basis", ""):
                continue  # the dense band of its weights' type is not fitted: no reference to be over
            mid = (answer["expected_tok_s_low"] * answer["expected_tok_s_high"]) ** 0.5
            layers = moe_layers(load_model(model))
            c = (1 / row["tok_s"] - 1 / mid) / layers
            label = f"row {i}: {row['model'][:30]} {row['quant']} on {row['profile']} ({backend_of(row)}) {row['test']}"
            out.append(LayerRow(device=row["profile"], label=label, layer_s=c))
    return out


def fit_without(found: list[LayerRow], devices: str) -> MoeLayerFit | None:
    """The fit made without the rows of `devices` (a comma-separated list of profiles)."""
    return held_out(found, set(devices.split(",")), WHAT)


def judge(rows: list[dict[str, Any]], folder: Path, found: list[LayerRow]) -> list[tuple[str, str, str, str, str]]:
    """(label, honest, slowed, honest with no MoE term, slowed with none) of each MoE row, each
    judged by the fit made without its device."""
    from ggprof import calibration

    out: list[tuple[str, str, str, str, str]] = []
    for i, row, _, args in judged_rows(rows, folder):
        verdicts: list[str] = []
        for fit in (fit_without(found, row["profile"]), None):
            with calibration.using_moe(fit):
                for slowed in (1.0, SLOWED):
                    answer = ggprof([*args, "--tg", f"{row['tok_s'] / slowed:.4g}"])
                    verdicts.append(answer["verdict"] if answer else "refused")
        label = f"row {i}: {row['model'][:28]} {row['quant']} on {row['profile']} ({backend_of(row)}) {row['test']}"
        h, s, h0, s0 = verdicts
        out.append((label, h, s, h0, s0))
    return out


def fit_text(fit: MoeLayerFit | None, found: list[LayerRow]) -> str:
    if fit is None:
        return f"{WHAT}: too few devices ({len({r.device for r in found})})"
    lines = [
        f"{WHAT}: {fit.centre_s * 1e6:.0f} us ({fit.low_s * 1e6:.0f}-{fit.high_s * 1e6:.0f} us), {fit.rows} rows on "
        f"{fit.devices} devices, median held-out error {fit.held_out_error_s * 1e6:.0f} us"
    ]
    lines += [f"  {r.layer_s * 1e6:7.0f} us  {r.label}" for r in found]
    lines += [f"  left out: {x}" for x in fit.left_out]
    return "\n".join(lines)


def table(judged: list[tuple[str, str, str, str, str]], show_rows: bool) -> str:
    lines = []
    if show_rows:
        lines += [
            f"{label:<90} {h:<10} slowed {s:<10} | no term: {h0:<10} slowed {s0}" for label, h, s, h0, s0 in judged
        ]
        lines.append("")
    n = len(judged)

    def pct(k: int) -> str:
        return f"{k / n:.0%}" if n else "-"

    for name, h_at, s_at in (("with the MoE term", 1, 2), ("no MoE term", 3, 4)):
        imp = sum(j[h_at] == "impossible" for j in judged)
        sus = sum(j[h_at] == "suspicious" for j in judged)
        caught = sum(j[s_at] in ("suspicious", "impossible") for j in judged)
        lines.append(
            f"{name:<18} rows {n:>3}  impossible {pct(imp):>4}  suspicious {pct(sus):>4}  "
            f"slowed caught {pct(caught):>4}"
        )
    return "\n".join(lines)


def write_fit() -> MoeLayerFit | None:
    """Fit on every row and write src/ggprof/calibration/moe-fits.json."""
    from ggprof import calibration

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GGPROF_CACHE_DIR"] = str(Path(tmp) / "cache")
        fit = fit_layer_cost(layer_rows(load_rows(), Path(tmp)), WHAT)
    if fit is not None:
        calibration.MOE_FITS_PATH.write_text(fit.to_json())
        calibration.committed_moe.cache_clear()
    return fit


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", action="store_true", help="print every row's verdicts")
    ap.add_argument("--write", action="store_true", help="refit on every row and write moe-fits.json")
    ap.add_argument("--out", type=Path, help="also write the output to FILE")
    args = ap.parse_args()
    if args.write:
        write_fit()
    rows = load_rows()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GGPROF_CACHE_DIR"] = str(Path(tmp) / "cache")  # this host's measurements never read
        found = layer_rows(rows, Path(tmp))
        judged = judge(rows, Path(tmp), found)
    text = f"{fit_text(fit_layer_cost(found, WHAT), found)}\n\nleave one device out\n{table(judged, args.rows)}"
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
