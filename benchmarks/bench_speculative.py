"""Published speculative-decoding results (benchmarks/data/speculative-results.jsonl: a draft
model, the model's own MTP heads, an n-gram lookup) judged by `ggprof check`, three ways a row:

  (a) plain    `check MODEL --tg PLAIN --device P --backend B` (no drafting options);
  (b) drafted  the same with `--tg SPEC --spec-type T --spec-draft-n-max N` (`-md DRAFT` for a
               draft model) and `--draft-acceptance A` where the row states one rate;
  (c) inflated (b)'s options with `--tg 1.25 x (N + 1) x` the plain ceiling of (a)'s prediction
               JSON: more tokens a target pass than N drafts allow, which must be IMPOSSIBLE.

Each row runs in this process through ggprof's own CLI on a header of its model's published
shape (tests/ggufs.py's writer and shapes, the quant's type mix as llama-quant.cpp makes it; the
data section a hole) and its device's profile (the row's `profile`, several GPUs with the row's
split). The fitted part, the speed fits' levels, is left out by device: each row is judged by
fits made without its devices' published results (benchmarks/calibrate.py's leave one device
out), and so is a MoE layer's fixed time (bench_moe.py). This host's measured bandwidth is never
read (an empty cache). A row with `skip` set (no profile, no quant, a fork) is counted and named,
not judged.

Targets (issue 61): honest rows (a and b) 0% IMPOSSIBLE and at most 5% SUSPICIOUS; every
inflated claim IMPOSSIBLE.

    python benchmarks/bench_speculative.py [--rows] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "speculative-results.jsonl"
DATASET = ROOT / "benchmarks" / "data" / "llama-cpp-results.jsonl"
sys.path.insert(0, str(ROOT / "tests"))  # the header writer and shapes the tests use

import gguf  # noqa: E402
from ggufs import (  # noqa: E402
    LLAMA_3_1_8B_F16,
    LLAMA_3_2_1B,
    QWEN25_CODER_0_5B,
    QWEN25_CODER_1_5B,
    QWEN25_CODER_3B,
    QWEN25_CODER_32B,
    QWEN36_27B,
    QWEN36_35B_A3B,
    Shape,
    write_model,
)

from ggprof.calibration.placements import ShareRow, fit_share  # noqa: E402
from ggprof.physics.shares import ShareFit  # noqa: E402

INFLATE = 1.25
T = gguf.GGMLQuantizationType
# model names as the rows print them -> shapes (Qwen3.8-27B ships Qwen3.6-27B's shape and its MTP
# block: the README's "17GB of weights" at Q4_K_M, and bench_placements.py's shape of it)
SHAPES: dict[str, Shape] = {
    "qwen3.6-27b": QWEN36_27B,
    "qwen3.8-27b": QWEN36_27B,
    "qwen3.6-35b-a3b": QWEN36_35B_A3B,
    "llama-3.1-8b": LLAMA_3_1_8B_F16,
    "llama-3.2-1b": LLAMA_3_2_1B,
    "qwen2.5-coder-32b": QWEN25_CODER_32B,
    "qwen2.5-coder-3b": QWEN25_CODER_3B,
    "qwen2.5-coder-1.5b": QWEN25_CODER_1_5B,
    "qwen2.5-coder-0.5b": QWEN25_CODER_0_5B,
}
# a quant's types: (most tensors, the output layer, attn_v and ffn_down on llama-quant.cpp's
# use_more_bits layers); unsloth's UD-*_K_XL taken as the K-quant it extends, Q4_K_L as Q4_K_M
# with a Q8_0 output, NVFP4 with a Q6_K output as the K-quants keep it
MIXES: tuple[tuple[str, tuple[Any, Any, Any]], ...] = (
    ("Q3_K", (T.Q3_K, T.Q6_K, T.Q4_K)),
    ("Q4_K_L", (T.Q4_K, T.Q8_0, T.Q6_K)),
    ("Q4_K", (T.Q4_K, T.Q6_K, T.Q6_K)),
    ("Q5_K", (T.Q5_K, T.Q6_K, T.Q6_K)),
    ("Q6_K", (T.Q6_K, T.Q6_K, T.Q6_K)),
    ("Q8", (T.Q8_0, T.Q8_0, T.Q8_0)),
    ("Q4_0", (T.Q4_0, T.Q6_K, T.Q4_0)),
    ("NVFP4", (T.NVFP4, T.Q6_K, T.NVFP4)),
    ("F16", (T.F16, T.F16, T.F16)),
)

# llama-quant.cpp (llama_tensor_get_type): a tensor whose rows are not whole blocks of 256 falls back
# from a K-quant to the legacy type of about its size (the 0.5B's 896-wide rows)
FALLBACK = {T.Q3_K: T.IQ4_NL, T.Q4_K: T.Q5_0, T.Q5_K: T.Q5_1, T.Q6_K: T.Q8_0}


@dataclass
class Judged:
    row: dict[str, Any]
    kind: str  # draft model, MTP, n-gram
    plain: str = ""
    drafted: str = ""
    inflated: str = ""
    ceiling: float = 0.0
    skipped: str = ""  # why the row was not judged


def kind_of(spec_type: str) -> str:
    return "MTP" if "mtp" in spec_type else "n-gram" if "ngram" in spec_type else "draft model"


def spec_type_of(row: dict[str, Any]) -> str:
    t = row["spec_type"]
    return "draft-mtp" if "mtp" in t else t.split()[0]


def shape_for(model: str, quant: str | None) -> Shape | None:
    """The published shape of `model` at `quant`'s type mix (None: no shape, or no quant)."""
    name = model.lower().replace("meta-", "")
    key = next((k for k in SHAPES if name.startswith(k)), None)
    if key is None or not quant:
        return None
    q = quant.upper().replace("UD-", "").replace("UNSLOTH DYNAMIC ", "")
    mix = next((m for prefix, m in MIXES if q.startswith(prefix)), None)
    if mix is None:
        return None
    base, head, more = mix
    if SHAPES[key].n_embd % 256:  # rows not whole K-quant blocks: llama-quant.cpp's fallback types
        base, head, more = (FALLBACK.get(t, t) for t in (base, head, more))
    return replace(SHAPES[key], qtype=base, head_qtype=head, more_bits_qtype=more, file_type=None)


def draft_shape(row: dict[str, Any]) -> Shape | None:
    """A draft model's shape from the row's `draft` (`Llama-3.2-1B-Instruct Q8_0`)."""
    name, _, quant = row["draft"].rpartition(" ")
    return shape_for(name, quant)


def backend_of(row: dict[str, Any]) -> str:
    b = row["backend"].lower()
    return next((x for x in ("cuda", "rocm", "vulkan", "metal") if x in b), "cpu")


def base_args(row: dict[str, Any], model: Path) -> list[str]:
    args = ["check", str(model), "--device", row["profile"], "--backend", backend_of(row), "--json"]
    if row["split_mode"]:
        args += ["-sm", row["split_mode"]]
    if row["tensor_split"]:
        args += ["-ts", row["tensor_split"]]
    found = re.search(r"\bb(\d{4,})", row["build"] or "")
    return args + (["--build", found.group(1)] if found else [])


def drafting_args(row: dict[str, Any], draft: Path | None) -> list[str]:
    args = ["--spec-type", spec_type_of(row)]
    args += ["--spec-draft-n-max", str(row["n_max"])] if row["n_max"] else []
    args += ["-md", str(draft)] if draft else []
    return args + (["--draft-acceptance", f"{row['acceptance']:g}"] if row["acceptance"] is not None else [])


def ggprof(args: list[str]) -> dict[str, Any]:
    from ggprof.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        main(args)
    try:
        answer: dict[str, Any] = json.loads(out.getvalue())
    except json.JSONDecodeError:
        return {"verdict": f"refused: {err.getvalue().strip()[:300]}"}
    return answer


def judge_row(row: dict[str, Any], folder: Path, i: int) -> Judged:
    from ggprof.physics.speculative import default_n_max

    kind_spec = spec_type_of(row)
    j = Judged(row=row, kind=kind_of(kind_spec))
    shape = shape_for(row["model"], row["quant"])
    drafter = draft_shape(row) if kind_spec.startswith("draft-") and kind_spec != "draft-mtp" else None
    j.skipped = row["skip"] or ("" if shape else "no shape for the model or its quant")
    if j.skipped:
        return j
    model = write_model(folder / f"row{i}.gguf", shape)[0]  # type: ignore[arg-type]
    draft = write_model(folder / f"draft{i}.gguf", drafter)[0] if drafter else None
    base = base_args(row, model)
    plain = ggprof([*base, "--tg", f"{row['tg_tok_s_plain']:g}"])
    j.plain, j.ceiling = plain["verdict"], (plain.get("decode_ceiling_tok_s") or 0.0)
    spec = [*base, *drafting_args(row, draft)]
    j.drafted = ggprof([*spec, "--tg", f"{row['tg_tok_s_spec']:g}"])["verdict"]
    n = row["n_max"] or default_n_max(kind_spec)
    j.inflated = ggprof([*spec, "--tg", f"{INFLATE * (n + 1) * j.ceiling:.6g}"])["verdict"]
    return j


REACH = "the share of the modelled speed-up over plain decode published runs reach"


def reach_rows(rows: list[dict[str, Any]], folder: Path) -> list[ShareRow]:
    """Each row that states its acceptance: its measured speed-up (drafted over plain) over the
    verify-step model's at that acceptance (no fitted reach: the model as it is), by device."""
    from ggprof import calibration

    out = []
    with calibration.using_reach(None):
        for i, row in enumerate(rows):
            shape = shape_for(row["model"], row["quant"])
            if row["skip"] or shape is None or row["acceptance"] is None:
                continue
            kind_spec = spec_type_of(row)
            drafter = draft_shape(row) if kind_spec.startswith("draft-") and kind_spec != "draft-mtp" else None
            model = write_model(folder / f"row{i}.gguf", shape)[0]
            draft = write_model(folder / f"draft{i}.gguf", drafter)[0] if drafter else None
            base = base_args(row, model)
            plain = ggprof([*base, "--tg", f"{row['tg_tok_s_plain']:g}"])
            spec = ggprof([*base, *drafting_args(row, draft), "--tg", f"{row['tg_tok_s_spec']:g}"])
            modelled = spec["expected_tok_s_high"] / plain["expected_tok_s_high"]
            measured = row["tg_tok_s_spec"] / row["tg_tok_s_plain"]
            label = f"row {i}: {row['model'][:24]} {row['quant']} on {row['profile']}, n={row['n_max']}"
            out.append(ShareRow(machine=row["profile"], label=label, share=measured / modelled))
    return out


def reach_without(found: list[ShareRow], devices: str) -> ShareFit | None:
    """The reach fitted on the rows of machines that share no device with `devices`."""
    mine = set(devices.split(","))
    return fit_share([r for r in found if not mine & set(r.machine.split(","))], REACH)


def judge_all(rows: list[dict[str, Any]], folder: Path, found: list[ShareRow]) -> list[Judged]:
    """Every row, each judged by fits made without its devices (leave one device out): the speed
    fits and the speed-up's reach."""
    import bench_moe

    from ggprof import calibration
    from ggprof.pipelines.calibrate import References, load_dataset, points_of, regress_points
    from ggprof.plugins import extensions

    points = points_of(load_dataset(DATASET, extensions().profiles), References(folder / "reference"))
    moe_found = bench_moe.layer_rows(bench_moe.load_rows(), folder)
    fits: dict[str, Any] = {}
    out = []
    for i, row in enumerate(rows):
        devices = row["profile"] or ""
        if devices not in fits and not row["skip"]:
            held_out = points
            for device in set(devices.split(",")):
                held_out = held_out.without(device)
            fits[devices] = regress_points(held_out, dataset="leave the row's devices out")
        if devices in fits:
            with (
                calibration.using(fits[devices]),
                calibration.using_reach(reach_without(found, devices)),
                calibration.using_moe(bench_moe.fit_without(moe_found, devices)),
            ):
                out.append(judge_row(row, folder, i))
        else:
            out.append(judge_row(row, folder, i))
    return out


def reach_text(fit: ShareFit | None, found: list[ShareRow]) -> str:
    if fit is None:
        return f"reach: too few machines ({len({r.machine for r in found})})"
    lines = [
        f"reach ({fit.what}): {fit.share:.0%} ({fit.low:.0%}-{fit.high:.0%}), {fit.rows} rows on {fit.machines} "
        f"machines, median held-out error {fit.held_out_error:.0%}"
    ]
    lines += [f"  {r.share:6.0%}  {r.label}" for r in found]
    lines += [f"  left out: {x}" for x in fit.left_out]
    return "\n".join(lines)


def write_reach() -> ShareFit | None:
    """Fit the reach on every row and write src/ggprof/calibration/speculative-fits.json."""
    from ggprof import calibration

    rows = load_rows()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GGPROF_CACHE_DIR"] = str(Path(tmp) / "cache")
        fit = fit_share(reach_rows(rows, Path(tmp)), REACH)
    if fit is not None:
        calibration.SPECULATIVE_FITS_PATH.write_text(fit.to_json())
        calibration.committed_reach.cache_clear()
    return fit


def load_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def baseline(row: dict[str, Any]) -> tuple[Any, ...]:
    """What names a plain run: its source, device, model, quant and speed."""
    return row["source"], row["profile"], row["model"], row["quant"], row["tg_tok_s_plain"]


def pct(k: int, n: int) -> str:
    return f"{k / n:.0%}" if n else "-"


def table(judged: list[Judged], show_rows: bool) -> str:
    lines = []
    if show_rows:
        for j in judged:
            r = j.row
            what = f"{r['model'][:20]:<20} {(r['quant'] or '?')[:12]:<12} {r['profile'] or '-':<24} n={r['n_max']}"
            speeds = f"{r['tg_tok_s_plain']:g} -> {r['tg_tok_s_spec']:g}"
            verdicts = f"plain {j.plain:<10} drafted {j.drafted:<10} inflated {j.inflated}"
            lines.append(f"{what:<64} {speeds:<14} " + (f"skipped: {j.skipped}" if j.skipped else verdicts))
        lines.append("")
    lines.append(
        f"{'spec type':<12} {'rows':>4} {'judged':>6} {'impossible':>10} {'suspicious':>10} {'inflated caught':>15}"
    )
    by: dict[str, list[Judged]] = defaultdict(list)
    for j in judged:
        by[j.kind].append(j)
    for kind in ("draft model", "MTP", "n-gram", "all"):
        mine = judged if kind == "all" else by[kind]
        done = [j for j in mine if not j.skipped]
        # a baseline two rows share (one plain run, drafted at n-max 2 and 3) is one result
        plains = {baseline(j.row): j.plain for j in done}
        honest = [*plains.values(), *(j.drafted for j in done)]
        imp = sum(v == "impossible" for v in honest)
        sus = sum(v == "suspicious" for v in honest)
        caught = sum(j.inflated == "impossible" for j in done)
        lines.append(
            f"{kind:<12} {len(mine):>4} {len(done):>6} {pct(imp, len(honest)):>10} {pct(sus, len(honest)):>10} "
            f"{pct(caught, len(done)):>15}"
        )
    lines.append(
        "(impossible and suspicious: of the honest verdicts, each drafted result and each plain baseline once, "
        "though rows drafting at several n-max share it)"
    )
    skipped = [j for j in judged if j.skipped]
    lines += ["", f"skipped ({len(skipped)}):"] + [
        f"  {j.row['model']} on {j.row['hardware']}: {j.skipped}" for j in skipped
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", action="store_true", help="print every row's verdicts")
    ap.add_argument("--out", type=Path, help="also write the output to FILE")
    ap.add_argument("--write", action="store_true", help="refit the reach on every row and write speculative-fits.json")
    args = ap.parse_args()
    if args.write:
        write_reach()
    rows = load_rows()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GGPROF_CACHE_DIR"] = str(Path(tmp) / "cache")  # this host's measurements never read
        found = reach_rows(rows, Path(tmp))
        judged = judge_all(rows, Path(tmp), found)
    text = f"{reach_text(fit_share(found, REACH), found)}\n\nleave one device out\n{table(judged, args.rows)}"
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
