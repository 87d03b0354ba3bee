"""`ggprof fit`: the ranking as JSON and as a table that fits 100 columns."""

from __future__ import annotations

import math
import os
import textwrap
from pathlib import Path
from typing import Any

from ggprof.pipelines.choose import Assessed, ChoiceReport
from ggprof.pipelines.placements import FIT_TARGET_BYTES, MIB, Placed
from ggprof.report.host import device_dict
from ggprof.units import clean_name, fmt_bytes, fmt_count, fmt_rate, sig3

WIDTH = 100
POOLS = {"gpu": "GPU", "cpu": "RAM"}  # a placement's memory pools as named beside a GPU
QUANT_MAX = 12  # the widest quant label shown whole (UD-IQ2_XXS, MXFP4_MOE)


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
        "n_cpu_moe": f.n_cpu_moe,
        "flags": f.flags,
        "placements": [placed_dict(x) for x in f.placements],
        "llama_fit": placed_dict(f.llama_fit) if f.llama_fit else None,
        "max_ctx": p.max_ctx_fits,
        "context_length": s.context_length,
        "pick": f.pick,
        "why_not": f.why_not,
    }


def placed_dict(x: Placed) -> dict[str, Any]:
    tg, pp, p = x.tg_tok_s, x.pp_tok_s, x.prediction
    return {
        "flags": x.flags,
        "n_gpu_layers": x.n_gpu_layers,
        "n_cpu_moe": x.n_cpu_moe,
        "fits": x.fits,
        "expected_tok_s_low": tg[0] if tg else None,
        "expected_tok_s_high": tg[1] if tg else None,
        "expected_basis": p.expected.basis if p and p.expected else None,
        "prefill_tok_s_low": pp[0] if pp else None,
        "prefill_tok_s_high": pp[1] if pp else None,
        "max_ctx": p.max_ctx_fits if p else None,
        "memory": [
            {"pool": m.pool, "required_bytes": m.required_bytes, "available_bytes": m.available_bytes, "verdict": v}
            for m, v in ((m, m.verdict) for m in x.memory)
        ],
    }


def ram_dict(r: ChoiceReport) -> dict[str, Any] | None:
    """The RAM holding what a GPU does not: its size and bandwidth, each with its source."""
    cpu = r.target.cpu if r.target.device.is_discrete_gpu else None
    if cpu is None:
        return None
    bw = cpu.bandwidth
    return {
        "memory_bytes": cpu.memory_bytes,
        "memory_source": cpu.memory_source,
        "bandwidth_bytes_per_s": bw.value if bw else None,
        "bandwidth_source": bw.source if bw else None,
        "bandwidth_detail": bw.detail if bw else None,
    }


def choose_dict(r: ChoiceReport) -> dict[str, Any]:
    pick = next((f for f in r.models if f.pick), None)
    return {
        "ctx": r.options.ctx,
        "min_tok_s": r.options.min_tok_s,
        "rank_by": r.options.rank_by,
        "device": device_dict(r.target.device),
        "device_description": r.target.description,
        "ram": ram_dict(r),
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
        return _range(*f.prefill_tok_s)
    return f"<={_n(f.prefill_ceiling_tok_s)}" if f.prefill_ceiling_tok_s is not None else "?"


def _where(f: Assessed) -> str:
    if not f.fits:
        return "no"
    if f.split:
        return "RPC"
    if not f.prediction.device.is_discrete_gpu:
        return "yes"
    if f.n_cpu_moe and f.n_gpu_layers:
        return "exps"
    return "VRAM" if f.n_gpu_layers > f.spec.n_layers else ("RAM" if f.n_gpu_layers == 0 else "split")


def ram_line(r: ChoiceReport) -> str | None:
    """The RAM beside a GPU: its size and bandwidth, and where each came from."""
    cpu = r.target.cpu if r.target.device.is_discrete_gpu else None
    if cpu is None:
        return None
    size = fmt_bytes(cpu.memory_bytes, binary=False) if cpu.memory_bytes else "size unknown"
    size += f" ({cpu.memory_source})" if cpu.memory_bytes and cpu.memory_source else ""
    bw = cpu.bandwidth
    speed = f"{fmt_rate(bw.value)} ({bw.describe()})" if bw else "unknown (--ram-bandwidth GB/s gives it)"
    return f"RAM: {size}, bandwidth {speed}"


def placement_lines(f: Assessed, rank_by: str) -> list[str]:
    """A GPU model's placements, best first, as flags to paste with their speeds and memory."""
    if len(f.placements) < 2 and (f.llama_fit is None or f.llama_fit.flags == f.flags):
        return [f"flags: {f.flags}"] if f.flags else []
    width = max(len(x.flags) for x in f.placements)
    by = "prefill" if rank_by == "pp" else "decode"
    lines = [f"placements, fastest {by} first (tok/s at a full context; pp512; memory):"]
    for i, x in enumerate(f.placements, 1):
        mark = f"{i}." if x.fits else "- "
        lines.append(f"  {mark:<3} {x.flags:<{width}}  {_placed_speeds(x)}")
    fit = f.llama_fit
    best = f.placements[0] if f.placements and f.placements[0].fits else None
    if fit is not None and (best is None or fit.flags != best.flags):
        tg, gpu = fit.tg_tok_s, fit.memory[0]
        free = (gpu.total_bytes or 0) - gpu.required_bytes
        lines.append(
            f"llama.cpp --fit would choose: {fit.flags}{f' ({_n(tg[0])}-{_n(tg[1])} tok/s)' if tg else ''}: "
            f"its rule leaves {FIT_TARGET_BYTES // MIB:,} MiB of the GPU free (here {fmt_bytes(free, binary=False)}), "
            "ggprof keeps what the device says is usable"
        )
    return lines


def _placed_speeds(x: Placed) -> str:
    pools = "  ".join(f"{POOLS.get(m.pool, m.pool)} {fmt_bytes(m.required_bytes, binary=False)}" for m in x.memory)
    if not x.fits:
        short = next((m for m in x.memory if m.verdict not in ("fits", "tight")), x.memory[0])
        usable = fmt_bytes(short.available_bytes, binary=False) if short.available_bytes else "?"
        needs = fmt_bytes(short.required_bytes, binary=False)
        return f"does not fit: {POOLS.get(short.pool, short.pool)} {needs} of {usable} usable"
    tg, pp = x.tg_tok_s, x.pp_tok_s
    speed = f"tg {_n(tg[0])}-{_n(tg[1])}" if tg else "tg ? (RAM bandwidth unknown)"
    return f"{speed}  pp {_range(*pp)}  {pools}" if pp else f"{speed}  {pools}"


def _range(low: float, high: float) -> str:
    """A prefill band; both ends at the ceiling (reading the weights once a batch) is that ceiling."""
    return f"<={_n(high)}" if math.isclose(low, high, rel_tol=1e-9) else f"{_n(low)}-{_n(high)}"


def choose_text(r: ChoiceReport) -> str:
    d, o = r.target.device, r.options
    # the quant label whole (MXFP4_MOE, UD-Q4_K_XL): its column takes what it needs from the name's
    qw = min(max([7, *(len(clean_name(f.spec.quant_label or "?", QUANT_MAX)) for f in r.models)]), QUANT_MAX)
    nw = 30 - (qw - 7)
    ram = ram_line(r)
    lines = [
        clean_name(
            f"ggprof fit: {len(r.models)} model(s) on {d.name} [{d.backend}], context {o.ctx:,} tokens, "
            f"--min-tok-s {o.min_tok_s:g}",
            WIDTH,
        ),
        *textwrap.wrap(clean_name(f"device: {r.target.description}", 400), WIDTH, subsequent_indent="  "),
        *(textwrap.wrap(clean_name(ram, 400), WIDTH, subsequent_indent="  ") if ram else []),
        "",
        f"  {'model':<{nw}} {'quant':<{qw}} {'bpw':>5} {'size':>8} {'fits':>5} {'-ngl':>4} {'tok/s':>11} "
        f"{'pp512':>11} {'max ctx':>8}",
    ]
    for f in r.models:
        mark = "*" if f.pick else ("+" if f.fastest else " ")
        ngl = "all" if f.n_gpu_layers > f.spec.n_layers else str(f.n_gpu_layers)
        max_ctx = f.prediction.max_ctx_fits
        lines.append(
            f"{mark} {clean_name(f.candidate.name, nw):<{nw}} {clean_name(f.spec.quant_label or '?', qw):<{qw}} "
            f"{f.bits_per_weight:5.2f} {fmt_bytes(f.spec.file_size_bytes, binary=False):>8} {_where(f):>5} "
            f"{ngl:>4} {_tok_s(f):>11} {_pp(f):>11} {(f'{max_ctx:,}' if max_ctx is not None else '?'):>8}"
        )
        notes = [f.label_note] if f.label_note else []
        notes += placement_lines(f, o.rank_by)
        if f.prediction.roof is not None and f.prediction.roof_note:
            notes.append(f.prediction.roof_note)
        if f.split and f.prediction.split is not None:
            notes.append(f"split over RPC: the pace is set by {f.prediction.split.pace}")
        notes += (
            [f"why not: {f.why_not}"] if f.why_not else ["the pick: the largest model that fits and is fast enough"]
        )
        if f.fastest:
            notes.append("the fastest that fits at this context")
        for n in notes:  # wrapped, not cut: a flag or a figure at the end is what the line is for
            lines += textwrap.wrap(clean_name(n, 400), WIDTH, initial_indent="    ", subsequent_indent="        ")
    if not r.models:
        lines.append("  (no readable GGUF model)")
    lines.append("tok/s: expected decode at a full context; pp512: expected prefill of a 512-token prompt")
    lines.append("(<=: its compute ceiling only); GB = 1e9 bytes; * the pick, + the fastest that fits")
    if any(x.in_ram for f in r.models for x in f.placements):
        lines.append("exps: the experts of some layers in RAM (-ncmoe; every layer's: -cmoe); pp counts copying")
        lines.append(
            "what RAM holds to the GPU over its link once per batch of -ub tokens (a larger -ub, fewer copies)"
        )
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
