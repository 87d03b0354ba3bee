"""A model split over machines as a Prediction: the split planned (ggprof.physics.rpc) and
given the shape one device's prediction has (ggprof.physics.roofline), so that every report
and verdict reads a split as it reads one device."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ggprof.errors import BadInputError
from ggprof.figures import Figure
from ggprof.machine.device import Device, EfficiencyBand
from ggprof.model.spec import ModelSpec
from ggprof.physics.devices import SPLIT_MODES, DeviceSplit, plan_devices
from ggprof.physics.devices import split_rules as devices_rules
from ggprof.physics.moe import MoeLayerFit, moe_band, moe_layers
from ggprof.physics.placement import Placement
from ggprof.physics.roofline import (
    DepthRow,
    MemoryFit,
    PredictInputs,
    Prediction,
    compute_buffer_bytes,
    depth_points,
    device_memory,
    memory_fit,
    predict,
    prefill_flops,
)
from ggprof.physics.rpc import Member, Split, chain_time, plan_split
from ggprof.units import fmt_bytes, fmt_rate


def predict_over(
    spec: ModelSpec,
    members: Sequence[Member],
    bands: Sequence[EfficiencyBand | None],
    inputs: PredictInputs,
    *,
    tensor_split: Sequence[float] = (),
) -> Prediction:
    """The prediction for `spec` split over `members` (the main host's CPU first, as llama.cpp
    orders them) with each one's band: a Prediction as one device's is, whose device is the
    split (its bandwidth and peak derived from the split's step) and whose `split` holds each
    device's and each hop's term."""
    host_cpu = members[0].device
    if tensor_split and len(tensor_split) != len(members) - 1:
        raise BadInputError(f"--tensor-split: {len(members) - 1} shares, one per device of the split")
    flops = prefill_flops(spec, inputs.prompt, inputs.depth, n_batch=inputs.n_batch)

    def plan(depth: int) -> Split:
        return plan_split(
            spec,
            members,
            bands,
            n_gpu_layers=inputs.n_gpu_layers,
            tensor_split=tensor_split,
            depth=depth,
            prompt=inputs.prompt,
            n_ubatch=inputs.n_ubatch,
            prefill_flops=flops,
            cache_type_k=inputs.cache_type_k,
            cache_type_v=inputs.cache_type_v,
        )

    split = plan(inputs.depth)
    floor = split.decode.floor_s
    if floor == float("inf"):
        unknown = [members[d.member] for d in split.decode.devices if d.seconds == float("inf")]
        names = ", ".join(f"{m.device.name} ({m.label})" for m in unknown)
        raise BadInputError(
            f"the bandwidth of {names} is unknown: run `ggprof host` for this host's CPU, or give "
            "--rpc-device PROFILE@LINK"
        )
    read = sum(d.read_bytes for d in split.decode.devices)
    names = " + ".join(dict.fromkeys(f"{m.device.name} ({m.label})" for m in members[1:]))
    device = Device(
        id="rpc:" + "+".join(dict.fromkeys(m.device.id for m in members)),
        name=f"RPC split: {names}",
        backend="rpc",
        bandwidth=Figure(read / floor, "derived", f"the split's step: {split.pace}"),
        peak_flops=Figure(flops / split.prefill_floor_s, "derived", "the split's prompt floor")
        if split.prefill_floor_s
        else None,
        memory_bytes=sum(m.free_bytes or m.device.memory_bytes or 0 for m in members[1:]) or None,
    )
    # the fields a split shares with one device (FLOPs, KV per token), predicted on the split's
    # own derived figures; its terms replace the rest
    base = predict(spec, device, inputs, band=None)
    holding = {d.member for d in split.decode.devices if d.layers or d.output}
    band = split.band.as_band(_band_source(members, bands, holding)) if split.band else None
    remote_layers = tuple(il for il, m in enumerate(split.per_layer) if m != 0)
    held = {d.member: d.weight_bytes for d in split.decode.devices}
    placement = Placement(
        gpu_layers=remote_layers,
        output_on_gpu=split.output != 0,
        gpu_weight_bytes=sum(b for m, b in held.items() if m != 0),
        cpu_weight_bytes=held.get(0, 0),
        gpu_decode_bytes=sum(d.read_bytes for d in split.decode.devices if d.member != 0),
        cpu_decode_bytes=sum(d.read_bytes for d in split.decode.devices if d.member == 0),
    )
    table = tuple(_depth_row(spec, members, split, d, inputs) for d in depth_points(spec))
    return replace(
        base,
        device=device,
        cpu=host_cpu,
        band=band,
        placement=placement,
        decode_seconds_per_token=floor,
        prefill_seconds=split.prefill_floor_s,
        peak_flops=device.peak_flops.value if device.peak_flops else None,
        depth_table=table,
        memory=_memory(spec, members, split, inputs),
        max_ctx_fits=None,
        batch_max=None,
        rules=(*base.rules, *split_rules(split)),
        split=split,
    )


def _band_source(members: Sequence[Member], bands: Sequence[EfficiencyBand | None], holding: set[int]) -> str:
    """In words: what each device holding layers is taken at."""
    measured = [m for i, m in enumerate(members) if m.measured is not None and i in holding]
    used = {
        m.device.backend: b
        for i, (m, b) in enumerate(zip(members, bands, strict=True))
        if b is not None and m.measured is None and i in holding
    }
    parts = [f"{name} {b.low:.0%}-{b.high:.0%}" for name, b in used.items()]
    parts += [f"{m.label} measured alone at {fmt_rate(m.measured.value)}" for m in measured if m.measured]
    return f"each device at {', '.join(parts)}, plus every hop's round trip and fixed cost"


def _depth_row(spec: ModelSpec, members: Sequence[Member], split: Split, depth: int, inputs: PredictInputs) -> DepthRow:
    t = chain_time(
        spec,
        members,
        split.per_layer,
        split.output,
        depth=depth,
        cache_type_k=inputs.cache_type_k,
        cache_type_v=inputs.cache_type_v,
    )
    kv = sum(spec.kv_layer_bytes_at(depth, inputs.cache_type_k, inputs.cache_type_v))
    return DepthRow(depth=depth, kv_bytes=kv, decode_ceiling_tok_s=1 / t.floor_s, tpot_floor_ms=t.floor_s * 1e3)


def _memory(spec: ModelSpec, members: Sequence[Member], split: Split, inputs: PredictInputs) -> tuple[MemoryFit, ...]:
    per_layer_kv = spec.kv_layer_bytes_at(inputs.ctx, inputs.cache_type_k, inputs.cache_type_v)
    out = []
    for d in split.decode.devices:
        m = members[d.member]
        kv = sum(b for il, b in enumerate(per_layer_kv) if split.per_layer[il] == d.member)
        compute = compute_buffer_bytes(spec, inputs.ctx, inputs.n_ubatch, inputs.flash_attn) if d.layers else 0
        avail, total = (m.free_bytes, m.free_bytes) if m.free_bytes else device_memory(m.device)
        out.append(memory_fit(f"{m.device.name} ({m.label})", d.weight_bytes, kv, compute, avail, total))
    return tuple(out)


def split_rules(split: Split) -> tuple[str, ...]:
    """The split in words: who holds which layers, what each hop moves, what sets the pace."""
    lines = []
    for d in split.decode.devices:
        m = split.members[d.member]
        if not d.layers and not d.output:
            continue
        layers = f"layers {d.layers[0]}-{d.layers[-1]}" if d.layers else "no layers"
        out = " + output" if d.output else ""
        lines.append(
            f"rpc: {m.device.name} ({m.label}) holds {layers}{out}: {fmt_bytes(d.weight_bytes, binary=False)}, "
            f"reads {fmt_bytes(d.read_bytes, binary=False)} a token"
        )
    for h in split.decode.hops:
        m = split.members[h.member]
        assert m.link is not None
        lines.append(
            f"rpc: hop to {m.label} over {m.link.name} ({fmt_rate(m.link.throughput_bytes_per_s)}, "
            f"{m.link.rtt_s * 1e3:.2g} ms round trip): sends {fmt_bytes(h.sent_bytes, binary=False)}, "
            f"gets back {fmt_bytes(h.returned_bytes, binary=False)}{' of logits' if h.output else ''} a token"
        )
    lines.append(f"rpc: the pace is set by {split.pace}")
    return tuple(lines)


# -- several GPUs of one machine (ggprof.physics.devices) ------------------------------------
def predict_devices(
    spec: ModelSpec,
    gpus: Sequence[tuple[str, Device]],
    cpu: Device | None,
    bands: Sequence[EfficiencyBand | None],
    inputs: PredictInputs,
    moe: MoeLayerFit | None = None,
) -> Prediction:
    """The prediction for `spec` over several GPUs (llama.cpp's names and devices, in its order,
    each with its backend's band in `bands`, then the CPU's), as one device's is: its device the
    GPUs together (bandwidth and peak derived from the split's step), its `devices` each
    memory's and each exchange's term."""
    mode = inputs.split_mode if inputs.split_mode in SPLIT_MODES else "layer"

    def plan(depth: int) -> DeviceSplit:
        kv = spec.kv_layer_bytes_at(depth, inputs.cache_type_k, inputs.cache_type_v)
        state = spec.state_layer_bytes()
        return plan_devices(
            spec,
            gpus,
            cpu,
            mode=mode,
            tensor_split=inputs.tensor_split,
            n_gpu_layers=inputs.n_gpu_layers,
            n_cpu_moe=inputs.n_cpu_moe,
            overrides=inputs.tensor_buft_overrides,
            no_kv_offload=inputs.no_kv_offload,
            kv_layer_bytes=[b + 2 * r for b, r in zip(kv, state, strict=True)],
        )

    split = plan(inputs.depth)
    floor = split.floor_s
    read = sum(t.read_bytes for t in split.terms)
    peaks = [d.peak_flops.value if d.peak_flops else 0.0 for _, d in gpus]
    first = gpus[0][1]
    models = list(dict.fromkeys(d.name for _, d in gpus))
    names = f"{len(gpus)} x {models[0]}" if len(models) == 1 else " + ".join(models)
    device = replace(
        first,
        id="+".join(d.id for _, d in gpus),
        name=f"{names} (-sm {mode})",
        bandwidth=Figure(read / floor, "derived", f"the split's step: {split.pace()}"),
        peak_flops=Figure(sum(peaks), "derived", "the GPUs' peaks together") if all(peaks) else None,
        vector_flops=None,
        int_dot_ops=None,
        memory_bytes=sum(d.memory_bytes or 0 for _, d in gpus) or None,
        memory_available_bytes=None,
        spill=None,  # each GPU's own memory decides a spill, not their sum
    )
    one = replace(inputs, n_gpu_layers=None, n_cpu_moe=0, tensor_buft_overrides=(), no_kv_offload=False)
    base = predict(spec, device, one, band=None)
    term_bands = [*bands[: len(gpus)], *([bands[len(gpus)]] if len(split.terms) > len(gpus) else [])]
    term_bands = [  # each GPU's MoE layers at their kernels' fixed time
        moe_band(b, t.seconds, moe_layers(spec, set(t.layers), inputs.n_cpu_moe), moe)
        if b is not None and t.label != "CPU"
        else b
        for t, b in zip(split.terms, term_bands, strict=True)
    ]
    expected = split.expected_s(term_bands)
    exchanges = "; ".join(
        dict.fromkeys(
            f"{s.latency_s[0] * 1e6:.0f}-{s.latency_s[1] * 1e6:.0f} us"
            + (" a network round trip" if "RPC[" in s.what else "")
            for s in split.syncs
        )
    )
    source = f"each GPU at its backend's band ({_bands_text(gpus, bands)})" + (
        f", plus every exchange at {exchanges}" if exchanges else ""
    )
    band = EfficiencyBand(low=floor / expected[1], high=floor / expected[0], source=source) if expected else None
    gpu_terms = split.gpus
    placement = Placement(
        gpu_layers=tuple(sorted({il for t in gpu_terms for il in t.layers})),
        output_on_gpu=any(t.output for t in gpu_terms),
        gpu_weight_bytes=sum(t.weight_bytes for t in gpu_terms),
        cpu_weight_bytes=sum(t.weight_bytes for t in split.terms if t.label == "CPU"),
        gpu_decode_bytes=sum(t.read_bytes - t.kv_bytes for t in gpu_terms),
        cpu_decode_bytes=sum(t.read_bytes - t.kv_bytes for t in split.terms if t.label == "CPU"),
    )
    table = tuple(
        DepthRow(
            depth=d,
            kv_bytes=sum(spec.kv_layer_bytes_at(d, inputs.cache_type_k, inputs.cache_type_v)),
            decode_ceiling_tok_s=1 / plan(d).floor_s,
            tpot_floor_ms=plan(d).floor_s * 1e3,
        )
        for d in depth_points(spec)
    )
    return replace(
        base,
        inputs=inputs,
        device=device,
        cpu=cpu,
        band=band,
        placement=placement,
        kv_bytes_at_depth=sum(t.kv_bytes for t in split.terms),
        decode_seconds_per_token=floor,
        prefill_seconds=_prefill_over(split, base.prefill_flops, inputs),
        depth_table=table,
        memory=_memory_of(spec, plan(inputs.ctx), inputs),
        max_ctx_fits=None,
        batch_max=None,
        rules=(*spec.decode_rules(), *devices_rules(split)),
        devices=split,
    )


def _bands_text(gpus: Sequence[tuple[str, Device]], bands: Sequence[EfficiencyBand | None]) -> str:
    used = {d.backend: b for (_, d), b in zip(gpus, bands, strict=False) if b is not None}
    return ", ".join(f"{name} {b.low:.0%}-{b.high:.0%}" for name, b in used.items()) or "none known"


def _prefill_over(split: DeviceSplit, flops: float, inputs: PredictInputs) -> float | None:
    """The prompt's floor: its FLOPs at the GPUs' peaks together (llama.cpp pipelines a layer
    split's micro-batches; a row or tensor split shares each one), never below each memory
    reading its weights once per micro-batch."""
    peaks = [t.device.peak_flops.value if t.device.peak_flops else 0.0 for t in split.gpus]
    if not inputs.prompt or not all(peaks):
        return None
    n_ub = -(-inputs.prompt // inputs.n_ubatch)
    reads = [t.weight_bytes * n_ub / t.bandwidth_bytes_per_s for t in split.terms if t.bandwidth_bytes_per_s]
    return max(flops / sum(peaks), *reads)


def _memory_of(spec: ModelSpec, at_ctx: DeviceSplit, inputs: PredictInputs) -> tuple[MemoryFit, ...]:
    """Each GPU's weights, its KV at the context (`at_ctx`: the split at that depth) and a
    compute buffer; the CPU's part of RAM."""
    out = []
    for t in at_ctx.terms:
        compute = compute_buffer_bytes(spec, inputs.ctx, inputs.n_ubatch, inputs.flash_attn) if t.label != "CPU" else 0
        avail, total = device_memory(t.device)
        out.append(memory_fit(t.name, t.weight_bytes, t.kv_bytes, compute, avail, total))
    return tuple(out)
