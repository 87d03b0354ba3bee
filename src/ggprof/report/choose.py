"""`ggprof fit`: the ranking as JSON and as a table that fits 100 columns."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

from ggprof.pipelines.choose import Assessed, ChoiceReport
from ggprof.report.host import device_dict
from ggprof.units import clean_name, fmt_bytes, fmt_count, sig3

WIDTH = 100


def shown_path(path: Path) -> str:
    """A path as shown: under the home folder as ~/..., cleaned and cut."""
    text, home = str(path), str(Path.home())
    if home and home != os.sep and (text == home or text.startswith(home + os.sep)):
        text = "~" + text[len(home) :]
    return clean_name(text, 120)


def assessed_dict(f: Assessed) -> dict[str, Any]:
    p, s = f.prediction, f.spec
    return {
        "path": str(f.candidate.path),
        "name": f.candidate.name,
        "store": f.candidate.store,
        "architecture": s.architecture,
        "quant_label": s.quant_label,
        "bits_per_weight": f.bits_per_weight,
        "label_note": f.label_note,
        "n_params": s.n_params,
        "file_size_bytes": s.file_size_bytes,
        "fits": f.fits,
        "n_gpu_layers": f.n_gpu_layers,
        "split_over_rpc": f.split,
        "needed_bytes": f.needed_bytes,
        "available_bytes": f.available_bytes,
        "decode_ceiling_tok_s": p.decode_ceiling_tok_s,
        "expected_tok_s_low": f.expected_low_tok_s,
        "expected_tok_s_high": f.expected_high_tok_s,
        "expected_basis": p.expected.basis if p.expected else None,
        "compute_roof_note": p.roof_note,
        "ttft_ms": f.ttft_ms,
        "prefill_tok_s_low": f.prefill_tok_s[0] if f.prefill_tok_s else None,
        "prefill_tok_s_high": f.prefill_tok_s[1] if f.prefill_tok_s else None,
        "prefill_ceiling_tok_s": f.prefill_ceiling_tok_s,
        "prefill_basis": f.prefill_basis,
        "fastest": f.fastest,
        "max_ctx": p.max_ctx_fits,
        "context_length": s.context_length,
        "pick": f.pick,
        "why_not": f.why_not,
    }


def choose_dict(r: ChoiceReport) -> dict[str, Any]:
    pick = next((f for f in r.models if f.pick), None)
    return {
        "ctx": r.options.ctx,
        "min_tok_s": r.options.min_tok_s,
        "device": device_dict(r.target.device),
        "device_description": r.target.description,
        "best": str(pick.candidate.path) if pick else None,
        "fastest": next((str(f.candidate.path) for f in r.models if f.fastest), None),
        "models": [assessed_dict(f) for f in r.models],
        "skipped": [{"path": str(s.path), "reason": s.reason} for s in r.skipped],
        "scanned": [{"store": loc.store, "path": str(loc.path), "exists": loc.exists} for loc in r.scanned],
    }


def _tok_s(f: Assessed) -> str:
    lo, hi = f.expected_low_tok_s, f.expected_high_tok_s
    return f"{_n(lo)}-{_n(hi)}" if lo is not None and hi is not None else "?"


def _n(x: float) -> str:
    """A speed in a column: 3 significant digits, 10,000 and more as 43.7k."""
    return fmt_count(x) if x >= 1e4 else sig3(x)


def _pp(f: Assessed) -> str:
    """The expected prefill (the band's ends), or its ceiling marked as one (`<=`) where no band
    says what llama.cpp reaches on this backend."""
    if f.prefill_tok_s is not None:
        return f"{_n(f.prefill_tok_s[0])}-{_n(f.prefill_tok_s[1])}"
    return f"<={_n(f.prefill_ceiling_tok_s)}" if f.prefill_ceiling_tok_s is not None else "?"


def _where(f: Assessed) -> str:
    if not f.fits:
        return "no"
    if f.split:
        return "RPC"
    if not f.prediction.device.is_discrete_gpu:
        return "yes"
    return "VRAM" if f.n_gpu_layers > f.spec.n_layers else ("RAM" if f.n_gpu_layers == 0 else "split")


def choose_text(r: ChoiceReport) -> str:
    d, o = r.target.device, r.options
    lines = [
        clean_name(
            f"ggprof fit: {len(r.models)} model(s) on {d.name} [{d.backend}], context {o.ctx:,} tokens, "
            f"--min-tok-s {o.min_tok_s:g}",
            WIDTH,
        ),
        *textwrap.wrap(clean_name(f"device: {r.target.description}", 400), WIDTH, subsequent_indent="  "),
        "",
        f"  {'model':<30} {'quant':<7} {'bpw':>5} {'size':>8} {'fits':>5} {'-ngl':>4} {'tok/s':>11} "
        f"{'pp512':>11} {'max ctx':>8}",
    ]
    for f in r.models:
        mark = "*" if f.pick else ("+" if f.fastest else " ")
        ngl = "all" if f.n_gpu_layers > f.spec.n_layers else str(f.n_gpu_layers)
        max_ctx = f.prediction.max_ctx_fits
        lines.append(
            f"{mark} {clean_name(f.candidate.name, 30):<30} {clean_name(f.spec.quant_label or '?', 7):<7} "
            f"{f.bits_per_weight:5.2f} {fmt_bytes(f.spec.file_size_bytes, binary=False):>8} {_where(f):>5} "
            f"{ngl:>4} {_tok_s(f):>11} {_pp(f):>11} {(f'{max_ctx:,}' if max_ctx is not None else '?'):>8}"
        )
        notes = [f.label_note] if f.label_note else []
        if f.prediction.roof is not None and f.prediction.roof_note:
            notes.append(f.prediction.roof_note)
        if f.split and f.prediction.split is not None:
            notes.append(f"split over RPC: the pace is set by {f.prediction.split.pace}")
        notes += (
            [f"why not: {f.why_not}"] if f.why_not else ["the pick: the largest model that fits and is fast enough"]
        )
        if f.fastest:
            notes.append("the fastest that fits at this context")
        lines += [clean_name(f"    {n}", WIDTH) for n in notes]
    if not r.models:
        lines.append("  (no readable GGUF model)")
    lines.append("tok/s: expected decode at a full context; pp512: expected prefill of a 512-token prompt")
    lines.append("(<=: its compute ceiling only); GB = 1e9 bytes; * the pick, + the fastest that fits")
    basis = next((f.prefill_basis for f in r.models if f.prefill_basis), None)
    if basis:
        shown = textwrap.shorten(clean_name(f"pp512 from: {basis}", 600), 2 * WIDTH - 10, placeholder=" ...")
        lines += textwrap.wrap(shown, WIDTH, subsequent_indent="  ")
    unroofed = [f for f in r.models if f.prediction.roof is None and f.prediction.roof_note]
    if unroofed:
        lines.append(
            clean_name(
                f"{len(unroofed)} of {len(r.models)} rest on bandwidth alone: no compute roof measured here "
                "(`ggprof profile MODEL` measures one)",
                WIDTH,
            )
        )
    for s in r.skipped:
        lines.append(clean_name(f"skipped {shown_path(s.path)}", WIDTH))
        lines += textwrap.wrap(clean_name(s.reason, 300), WIDTH, initial_indent="    ", subsequent_indent="    ")
    for loc in r.scanned:
        state = "scanned" if loc.exists else "not found"
        lines.append(clean_name(f"{state}: {loc.store} {shown_path(loc.path)}", WIDTH))
    return "\n".join(lines)
