"""`ggprof plan`: the capacity method, each step with its figures, as JSON and as text."""

from __future__ import annotations

import textwrap
from typing import Any

from ggprof.model.spec import ModelSpec
from ggprof.physics.serving import UNLIMITED, Plan
from ggprof.units import clean, fmt_bytes, fmt_rate, sig3


def plan_dict(spec: ModelSpec, p: Plan, device_note: str, alone: str | None = None) -> dict[str, Any]:
    i = p.inputs
    return {
        "model": str(spec.path),
        "device_id": p.device.id,
        "device_name": p.device.name,
        "device_description": device_note,
        "qps": i.qps,
        "prompt_tokens": i.prompt,
        "gen_tokens": i.gen,
        "ctx": i.context,
        "tpot_slo_ms": i.tpot_slo_ms,
        "ttft_slo_ms": i.ttft_slo_ms,
        "ttft_ms": p.ttft_ms,
        "ttft_source": p.ttft_source,
        "request_s": p.request_s,
        "concurrency": p.concurrency,
        "kv_bytes_per_sequence": p.kv_bytes_per_sequence,
        "kv_bytes_total": p.kv_bytes_total,
        "weights_bytes": p.weights_bytes,
        "buffer_bytes": p.buffer_bytes,
        "memory_per_device_bytes": p.memory_per_device_bytes,
        "bandwidth_bytes_per_s": None if p.split_over_rpc else p.device.bandwidth_bytes_per_s,  # a split: per shard
        "tpot_floor_ms": p.tpot_floor_ms,
        "batch_limits": {k: (None if v >= UNLIMITED else v) for k, v in p.batch_limits.items()},
        "group_size": p.group_size,
        "split_over_rpc": p.split_over_rpc,
        "why_split": alone,
        "shards": [
            {
                "label": sh.label,
                "device_name": sh.device.name,
                "usable_bytes": sh.usable_bytes,
                "weight_bytes": sh.weight_bytes,
                "kv_share": sh.kv_share,
                "bandwidth_bytes_per_s": sh.device.bandwidth_bytes_per_s,
            }
            for sh in p.shards
        ],
        "links": [{"label": w.label, "link": w.link.name, "returns_logits": w.returns_logits} for w in p.wires],
        "network_ms": p.network_ms,
        "batch_per_device": p.batch_per_group,
        "step_time_ms": p.step_time_ms,
        "ridge_flops_per_byte": p.ridge_flops_per_byte,
        "intensity_flops_per_byte": p.intensity_flops_per_byte,
        "below_ridge": p.below_ridge,
        "devices_needed": p.devices_needed,
        "binding_constraint": p.binding_constraint,
    }


def gb(n: float) -> str:
    return fmt_bytes(n, binary=False)


def _limit(n: int) -> str:
    return "no limit" if n >= UNLIMITED else f"{n:,}"


def plan_text(spec: ModelSpec, p: Plan, device_note: str, alone: str | None = None) -> str:
    i, d = p.inputs, p.device
    need = max(round(p.concurrency + 0.4999), 1)
    if p.split_over_rpc:
        parts = ", ".join(f"{clean(sh.device.name)} ({clean(sh.label)}) {gb(sh.usable_bytes)}" for sh in p.shards)
        group = f" (split over RPC: {parts}, each its layers' KV)"
    elif p.group_size > 1:
        group = (
            f" (the weights need {p.group_size} devices: llama.cpp splits the layers over them, which adds "
            "memory, not speed)"
        )
    else:
        group = ""
    holds = "usable memory" if p.split_over_rpc else f"a device holds {gb(p.memory_per_device_bytes)} usable"
    if p.split_over_rpc:
        rate = f"over the split (its links {sig3(p.network_ms)} ms of it)"
    else:
        rate = f"at {fmt_rate(d.bandwidth_bytes_per_s or 0)}" + (", device after device" if p.group_size > 1 else "")
    ridge = (
        f"intensity {sig3(p.intensity_flops_per_byte)} FLOP/byte, "
        + ("below" if p.below_ridge else "above")
        + f" the ridge {sig3(p.ridge_flops_per_byte)}: "
        + ("bandwidth-bound" if p.below_ridge else "compute-bound")
        if p.ridge_flops_per_byte
        else f"intensity {sig3(p.intensity_flops_per_byte)} FLOP/byte (no peak FLOP/s known: ridge unknown)"
    )
    if p.split_over_rpc:
        machines = " + ".join(f"{clean(sh.device.name)} ({clean(sh.label)})" for sh in p.shards)
        answer = f"{p.groups} x the split ({machines}): {p.devices_needed} devices"
    else:
        answer = f"{p.devices_needed} x {clean(d.name)}"
    steps = [
        f"1. Little's law: a request stays TTFT {sig3(p.ttft_ms)} ms ({p.ttft_source}) + {i.gen:,} x "
        f"{i.tpot_slo_ms:g} ms = {sig3(p.request_s)} s; {i.qps:g} requests/s x {sig3(p.request_s)} s = "
        f"{sig3(p.concurrency)} in flight.",
        f"2. Memory: KV {gb(p.kv_bytes_per_sequence)} per sequence at {i.context:,} tokens x {need:,} = "
        f"{gb(p.kv_bytes_total)}, + weights {gb(p.weights_bytes)} + buffers {gb(p.buffer_bytes)} = "
        f"{gb(p.kv_bytes_total + p.weights_bytes + p.buffer_bytes)}; {holds}{group}: "
        f"up to {_limit(p.batch_limits['memory'])} sequences per copy of the model.",
        f"3. Bandwidth: a step at batch {p.batch_per_group:,} reads {gb(p.weights_read_bytes)} of weights + "
        f"{p.batch_per_group:,} x {gb(p.kv_read_bytes_per_sequence)} of KV: {sig3(p.step_time_ms)} ms {rate}, "
        f"within the {i.tpot_slo_ms:g} ms TPOT SLO "
        f"(floor {sig3(p.tpot_floor_ms)} ms at batch 1); bandwidth allows up to {_limit(p.batch_limits['bandwidth'])}"
        f" sequences, compute {_limit(p.batch_limits['compute'])}; {ridge}.",
        f"4. Answer: {answer}, batch {p.batch_per_group:,} each; binding constraint: "
        f"{p.binding_constraint} (it allows {_limit(p.batch_limits[p.binding_constraint])} sequences per copy).",
    ]
    on = "split over RPC" if p.split_over_rpc else clean(d.name)
    lines = [f"ggprof plan: {clean(spec.path.name)} on {on} ({clean(device_note)})"[:100]]
    if alone:
        lines += textwrap.wrap(f"One device does not suffice ({clean(alone)}): planned over the split.", 100)
    for step in steps:
        lines += textwrap.wrap(step, 100, subsequent_indent="   ")
    return "\n".join(lines)
