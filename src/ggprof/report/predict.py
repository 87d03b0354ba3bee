"""`ggprof predict`: the Prediction as JSON and as text."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ggprof.model.spec import ModelSpec
from ggprof.physics.devices import DeviceSplit
from ggprof.physics.roofline import MemoryFit, Prediction
from ggprof.physics.rpc import Hop, Split
from ggprof.units import clean, fmt_bytes, fmt_flops, pct, sig3


def predict_dict(spec: ModelSpec, p: Prediction, device_note: str) -> dict[str, Any]:
    d, e = p.device, p.expected
    mem = p.memory[0]
    return {
        "model": str(spec.path),
        "device_id": d.id,
        "device_name": d.name,
        "backend": d.backend,
        "device_description": device_note,
        "bandwidth_bytes_per_s": p.bandwidth_bytes_per_s,
        "bandwidth_source": d.bandwidth.source if d.bandwidth else None,
        "bandwidth_detail": d.bandwidth.detail if d.bandwidth else None,
        "peak_flops_per_s": p.peak_flops,
        "peak_flops_source": d.peak_flops.describe() if d.peak_flops else None,
        "depth": p.inputs.depth,
        "prompt_tokens": p.inputs.prompt,
        "gen_tokens": p.inputs.gen,
        "ctx": p.inputs.ctx,
        "batch": p.inputs.batch,
        "cache_type_k": p.inputs.cache_type_k,
        "cache_type_v": p.inputs.cache_type_v,
        "n_gpu_layers": p.inputs.n_gpu_layers,
        "decode_bytes_per_token": p.decode_bytes_per_token,
        "kv_bytes_per_token": p.kv_bytes_per_token,
        "kv_bytes_at_depth": p.kv_bytes_at_depth,
        "bytes_per_token_at_depth": p.decode_bytes_per_token + p.kv_bytes_at_depth,
        "decode_ceiling_tok_s": p.decode_ceiling_tok_s,
        "tpot_floor_ms": p.tpot_floor_ms,
        "expected_tok_s_low": e.low_tok_s if e else None,
        "expected_tok_s_high": e.high_tok_s if e else None,
        "efficiency_band": [p.band.low, p.band.high] if p.band else None,
        "efficiency_band_source": p.band.source if p.band else None,
        "expected_basis": e.basis if e else None,
        "compute_roof_tok_s": [p.roof.low_tok_s, p.roof.high_tok_s] if p.roof else None,
        "compute_roof_note": p.roof_note,
        "depth_table": [
            {
                "depth": r.depth,
                "kv_bytes": r.kv_bytes,
                "decode_ceiling_tok_s": r.decode_ceiling_tok_s,
                "tpot_floor_ms": r.tpot_floor_ms,
            }
            for r in p.depth_table
        ],
        "prefill_flops": p.prefill_flops,
        "prefill_flops_per_token": p.prefill_flops_per_token,
        "prefill_ceiling_tok_s": p.prefill_ceiling_tok_s,
        "prefill_expected_tok_s_low": p.prefill_expected_tok_s[0] if p.prefill_expected_tok_s else None,
        "prefill_expected_tok_s_high": p.prefill_expected_tok_s[1] if p.prefill_expected_tok_s else None,
        "prefill_band_source": p.prefill_band.source if p.prefill_band else None,
        "ttft_floor_ms": p.ttft_floor_ms,
        "e2e_floor_ms": p.e2e_floor_ms,
        "ridge_flops_per_byte": p.ridge_flops_per_byte,
        "prefill_intensity_flops_per_byte": p.prefill_intensity_flops_per_byte,
        "decode_intensity_flops_per_byte": p.decode_intensity_flops_per_byte,
        "memory_required_bytes": mem.required_bytes,
        "memory_available_bytes": mem.available_bytes,
        "fits": mem.fits,
        "fit": mem.verdict,
        "memory_pools": [_fit_dict(f) for f in p.memory],
        "max_ctx_fits": p.max_ctx_fits,
        "batch_max": p.batch_max,
        "spill_bytes": p.spill_bytes,
        "cache_spill_bytes": p.cache_spill_bytes,
        "spill": p.device.spill,
        "token_parts": p.parts.as_dict() if p.parts is not None else None,
        "offload": {
            "gpu_layers": len(p.placement.gpu_layers),
            "output_on_gpu": p.placement.output_on_gpu,
            "gpu_weight_bytes": p.placement.gpu_weight_bytes,
            "cpu_weight_bytes": p.placement.cpu_weight_bytes,
        },
        "rules": list(p.rules),
        "split": split_dict(p.split) if p.split else None,
        "devices": devices_dict(p.devices) if p.devices else None,
    }


def devices_dict(split: DeviceSplit) -> dict[str, Any]:
    """Several GPUs: each memory's bytes, bandwidth (with its source) and seconds, each exchange."""
    return {
        "split_mode": split.mode,
        "run_in": "sequence" if split.mode == "layer" else "parallel",
        "shares": list(split.shares),
        "shares_source": split.shares_source,
        "memories": [
            {
                "label": t.label,
                "device": t.device.name,
                "profile": t.device.profile_id,
                "layers": list(t.layers),
                "output_layer": t.output,
                "weight_bytes": t.weight_bytes,
                "kv_bytes_per_token": t.kv_bytes,
                "read_bytes_per_token": t.read_bytes,
                "parallel_bytes_per_token": t.parallel_bytes,
                "bandwidth_bytes_per_s": t.bandwidth_bytes_per_s,
                "bandwidth_source": t.device.bandwidth.describe() if t.device.bandwidth else None,
                "floor_s_per_token": t.seconds,
            }
            for t in split.terms
        ],
        "exchanges": [
            {
                "what": s.what,
                "transfers_per_token": s.count,
                "transfers_per_token_slow": s.slow_count if s.slow_count is not None else s.count,
                "bytes_each": s.bytes_each,
                "latency_s": [s.latency_s[0], s.latency_s[1]],
                "link_bytes_per_s": s.bytes_per_s,
                "link_source": s.source,
                "floor_s_per_token": s.seconds(),
            }
            for s in split.syncs
        ],
        "parallel_s_per_token": split.parallel_s,
        "sequential_s_per_token": split.sequential_s,
        "exchange_s_per_token": split.sync_s(),
        "floor_s_per_token": split.floor_s,
        "pace": split.pace(),
    }


def split_dict(split: Split) -> dict[str, Any]:
    """An RPC split: each device's layers and bytes, each hop's bytes and time, the pace."""
    members = split.members

    def hop(h: Hop) -> dict[str, Any]:
        link = members[h.member].link
        return {
            "label": members[h.member].label,
            "link": link.name if link else None,
            "rtt_s": link.rtt_s if link else None,
            "link_source": link.throughput.describe() if link else None,
            "layers": list(h.layers),
            "returns_logits": h.output,
            "sent_bytes_per_token": h.sent_bytes,
            "returned_bytes_per_token": h.returned_bytes,
            "network_s_per_token": h.network_s,
        }

    def alone(i: int) -> float | None:
        measured = members[i].measured
        return measured.value if measured else None

    return {
        "devices": [
            {
                "label": members[d.member].label,
                "device": members[d.member].device.name,
                "backend": members[d.member].device.backend,
                "remote": members[d.member].remote,
                "layers": list(d.layers),
                "output_layer": d.output,
                "weight_bytes": d.weight_bytes,
                "read_bytes_per_token": d.read_bytes,
                "floor_s_per_token": d.seconds,
                "measured_alone_bytes_per_s": alone(d.member),
            }
            for d in split.decode.devices
        ],
        "hops": [hop(h) for h in split.decode.hops],
        "device_s_per_token": split.decode.device_s,
        "network_s_per_token": split.decode.network_s,
        "expected_tok_s": 1 / split.band.expected_s if split.band else None,
        "prefill_expected_tok_s": split.prefill_expected_tok_s,
        "pace": split.pace,
        # what a token would add: each remote stretch's graph sent again (builds without graph
        # reuse), MoE experts kept on the main host inside the remote layers
        "graph_resend_bytes_per_token": split.graph_resend[0],
        "graph_resend_s_per_token": split.graph_resend[1],
        "experts_on_host_round_trips_per_token": split.experts_on_host[0],
        "experts_on_host_s_per_token": split.experts_on_host[1],
    }


def _fit_dict(f: MemoryFit) -> dict[str, Any]:
    """A memory pool as JSON: MemoryFit's fields, the buffers marked as an estimate, the verdict as `fit`."""
    d = asdict(f)
    d["compute_buffer_bytes_estimate"] = d.pop("compute_buffer_bytes")
    d["fit"] = d.pop("verdict")
    return d


def _tps(x: float | None) -> str:
    return "unknown" if x is None else f"{sig3(x)} tok/s"


def predict_text(spec: ModelSpec, p: Prediction, device_note: str) -> str:
    d, i = p.device, p.inputs
    bw, e = d.bandwidth, p.expected
    lines = [
        f"{clean(spec.path.name)} on {clean(d.name)} [{d.backend}]"[:80],
        _row("device", clean(device_note)),
        _row("bandwidth", f"{sig3(p.bandwidth_bytes_per_s / 1e9)} GB/s [{clean(bw.describe()) if bw else ''}]"),
        _row(
            "decode",
            f"reads {fmt_bytes(p.decode_bytes_per_token, binary=False)} of weights + "
            f"{fmt_bytes(p.kv_bytes_at_depth, binary=False)} KV at depth {i.depth:,}",
        ),
        _row("", f"ceiling {_tps(p.decode_ceiling_tok_s)}, TPOT floor {sig3(p.tpot_floor_ms)} ms"),
    ]
    if p.band and e and p.roof is not None and e.basis.startswith("compute roof"):
        lines.append(_row("", f"expected {sig3(e.low_tok_s)}-{_tps(e.high_tok_s)} ({clean(e.basis)})"))
    elif p.band and e:
        lines.append(
            _row(
                "",
                f"expected {sig3(e.low_tok_s)}-{_tps(e.high_tok_s)} ({p.band.low:.0%}-{p.band.high:.0%} of "
                f"the ceiling: {clean(p.band.source)})",
            )
        )
    if p.roof_note:
        lines.append(_row("", clean(p.roof_note)))
    lines.append(
        _row(
            "by depth",
            " | ".join(f"{r.depth:,}: {sig3(r.decode_ceiling_tok_s)}" for r in p.depth_table)
            + f" tok/s ({i.cache_type_k}/{i.cache_type_v} KV)",
        )
    )
    flops_src = f" [{clean(d.peak_flops.describe())}]" if d.peak_flops else ""
    lines.append(
        _row(
            "prefill",
            f"{i.prompt:,} tokens: {fmt_flops(p.prefill_flops)} ({fmt_flops(p.prefill_flops_per_token)} per token)",
        )
    )
    if p.peak_flops:
        lines.append(_row("", f"peak {sig3(p.peak_flops / 1e12)} TFLOP/s{flops_src}"))
        lines.append(_row("", f"ceiling {_tps(p.prefill_ceiling_tok_s)}, TTFT floor {sig3(p.ttft_floor_ms or 0)} ms"))
        if p.prefill_band and (x := p.prefill_expected_tok_s):
            b = p.prefill_band
            lines.append(
                _row("", f"expected {sig3(x[0])}-{_tps(x[1])} ({pct(b.low)}-{pct(b.high)}: {clean(b.source)})")
            )
        ridge = p.ridge_flops_per_byte or 0
        lines.append(
            _row(
                "roofline",
                f"ridge {sig3(ridge)} FLOP/byte; prefill {sig3(p.prefill_intensity_flops_per_byte)}"
                f" ({_roof(p.prefill_intensity_flops_per_byte, ridge)}), decode at batch "
                f"{i.batch} {sig3(p.decode_intensity_flops_per_byte)} "
                f"({_roof(p.decode_intensity_flops_per_byte, ridge)})",
            )
        )
        lines.append(
            _row("latency", f"{i.prompt:,} + {i.gen:,} tokens: end-to-end floor {sig3((p.e2e_floor_ms or 0) / 1e3)} s")
        )
    else:
        lines.append(_row("", "no peak FLOP/s known for this device: prefill ceiling unknown (--flops TFLOPS)"))
    for f in p.memory:
        avail = fmt_bytes(f.available_bytes, binary=False) if f.available_bytes else "unknown"
        lines.append(
            _row(
                "memory" if f is p.memory[0] else "",
                f"{f.pool}: {fmt_bytes(f.required_bytes, binary=False)}"
                f" needed (weights, KV at ctx {i.ctx:,}, buffers) of {avail} available: "
                f"{f.verdict.replace('_', ' ')}",
            )
        )
    if p.max_ctx_fits is not None:
        lines.append(
            _row(
                "",
                f"largest context that fits {p.max_ctx_fits:,}; sequences of {i.ctx:,} at once (B_max) {p.batch_max:,}",
            )
        )
    for rule in p.rules:
        lines.append(_row("rule", clean(rule)))
    return "\n".join(_wrap(line) for line in lines)


def _roof(intensity: float, ridge: float) -> str:
    return "compute-bound" if intensity >= ridge else "bandwidth-bound"


def _row(label: str, text: str) -> str:
    return f"  {label:<10}{text}"


def _wrap(line: str) -> str:
    import textwrap

    if len(line) <= 80:
        return line
    first, *rest = textwrap.wrap(line, 80, subsequent_indent=" " * 12)
    return "\n".join([first, *rest])
