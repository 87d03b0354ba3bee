"""Memory fit: what each pool (a GPU's memory, the CPU's RAM) must hold for a placement at a
context (its weights, its layers' KV cache, llama.cpp's compute buffer), whether it fits, and the
largest context and batch that fit. Pure functions, no I/O; the figures: docs/physics.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ggprof.llamacpp import N_UBATCH
from ggprof.machine.device import Device
from ggprof.model.spec import ModelSpec
from ggprof.physics.placement import Placement, placement

if TYPE_CHECKING:
    from ggprof.physics.roofline import PredictInputs

GPU_RESERVE_FRACTION = 0.05  # driver, context and fragmentation headroom on a GPU
DEFAULT_N_UBATCH = N_UBATCH


@dataclass(frozen=True, kw_only=True)
class MemoryFit:
    pool: str  # "gpu" or "cpu" (unified memory: one pool)
    required_bytes: int
    weight_bytes: int
    kv_bytes: int
    compute_buffer_bytes: int
    available_bytes: int | None
    total_bytes: int | None
    verdict: str  # fits | tight | does_not_fit | unknown

    @property
    def fits(self) -> bool | None:
        return None if self.verdict == "unknown" else self.verdict == "fits"


def compute_buffer_bytes(spec: ModelSpec, ctx: int, n_ubatch: int = DEFAULT_N_UBATCH, flash_attn: str = "auto") -> int:
    """An estimate of llama.cpp's compute buffer: activations of one ubatch, the attention
    scores of one layer (n_ubatch x ctx x heads, f32; not with flash attention on) and the
    logits (vocab x 4 bytes)."""
    ub = min(n_ubatch, ctx) or 1
    ff = max(
        (t.shape[1] for t in spec.tensors if t.name.endswith("ffn_up.weight") and len(t.shape) > 1),
        default=4 * spec.n_embd,
    )
    activations = ub * (8 * spec.n_embd + 3 * ff) * 4
    scores = 0 if flash_attn == "on" else ub * ctx * spec.n_heads * 4
    return activations + scores + spec.vocab_size * 4 * ub


def memory_fit(
    pool: str, weight_bytes: int, kv_bytes: int, compute_bytes: int, available: int | None, total: int | None
) -> MemoryFit:
    required = weight_bytes + kv_bytes + compute_bytes
    if available is None and total is None:
        verdict = "unknown"
    elif required <= (available if available is not None else total or 0):
        verdict = "fits"
    elif total is not None and required <= total:
        verdict = "tight"
    else:
        verdict = "does_not_fit"
    return MemoryFit(
        pool=pool,
        required_bytes=required,
        weight_bytes=weight_bytes,
        kv_bytes=kv_bytes,
        compute_buffer_bytes=compute_bytes,
        available_bytes=available,
        total_bytes=total,
        verdict=verdict,
    )


def device_memory(d: Device) -> tuple[int | None, int | None]:
    """(available, total) bytes of a device's pool; a GPU keeps a small reserve."""
    total = d.memory_bytes
    if not d.is_discrete_gpu:
        return d.memory_available_bytes or total, total
    avail = d.memory_available_bytes or (int(total * (1 - GPU_RESERVE_FRACTION)) if total else None)
    return avail, total


def kv_split(
    spec: ModelSpec, inputs: PredictInputs, place: Placement, tokens: int, state_passes: int = 1
) -> tuple[int, int]:
    """KV bytes at `tokens` of context held by the offloaded layers, and by the rest; with a
    recurrent layer's state (ggprof.model.hybrid) `state_passes` times: once held, twice moved
    by a decode step (read, then written back)."""
    on_gpu = set() if inputs.no_kv_offload else set(place.gpu_layers)  # -nkvo: every layer's KV in RAM
    kv = spec.kv_layer_bytes_at(tokens, inputs.cache_type_k, inputs.cache_type_v)
    per_layer = [b + state_passes * r for b, r in zip(kv, spec.state_layer_bytes(), strict=True)]
    gpu = sum(b for il, b in enumerate(per_layer) if il in on_gpu)
    return gpu, sum(per_layer) - gpu


def memory_pools(
    spec: ModelSpec, device: Device, cpu: Device | None, place: Placement, inputs: PredictInputs
) -> tuple[MemoryFit, ...]:
    batch = max(inputs.batch, 1)
    kv_gpu, kv_cpu = (b * batch for b in kv_split(spec, inputs, place, inputs.ctx))
    compute = inputs_compute_buffer(spec, inputs, inputs.ctx)
    if not device.is_discrete_gpu:
        avail, total = device_memory(device)
        return (
            memory_fit(
                "cpu" if device.backend == "cpu" else "unified", place.cpu_weight_bytes, kv_cpu, compute, avail, total
            ),
        )
    fits = [memory_fit("gpu", place.gpu_weight_bytes, kv_gpu, compute, *device_memory(device))]
    if place.cpu_weight_bytes or kv_cpu:
        avail, total = device_memory(cpu) if cpu else (None, None)
        fits.append(memory_fit("cpu", place.cpu_weight_bytes, kv_cpu, 0, avail, total))
    return tuple(fits)


def inputs_compute_buffer(spec: ModelSpec, inputs: PredictInputs, ctx: int) -> int:
    return compute_buffer_bytes(spec, ctx, inputs.n_ubatch, inputs.flash_attn)


def max_context(
    spec: ModelSpec, inputs: PredictInputs, place: Placement, available: int, cpu_available: int | None = None
) -> int:
    """The largest context (<= the model's, or inputs.ctx if larger) that fits every pool: on a
    GPU its layers' weights + their KV + the buffers within `available`, and the layers left in
    RAM with their own KV within `cpu_available` (when known); elsewhere one pool holds all."""
    hi = max(spec.context_length, inputs.ctx)
    split = bool(place.gpu_layers) or place.gpu_weight_bytes > 0

    def fits(ctx: int) -> bool:
        kv_gpu, kv_cpu = kv_split(spec, inputs, place, ctx)
        buffers = inputs_compute_buffer(spec, inputs, ctx)
        if not split:
            return place.cpu_weight_bytes + kv_gpu + kv_cpu + buffers <= available
        in_ram = cpu_available is None or place.cpu_weight_bytes + kv_cpu <= cpu_available
        return place.gpu_weight_bytes + kv_gpu + buffers <= available and in_ram

    if not fits(1):
        return 0
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def batch_max(spec: ModelSpec, inputs: PredictInputs, weight_bytes: int, available: int) -> int:
    """B_max = (memory - weights - reserve) / (KV per token x L): sequences of inputs.ctx tokens that fit."""
    per_sequence = spec.kv_bytes_at(inputs.ctx, inputs.cache_type_k, inputs.cache_type_v)
    per_sequence += spec.state_bytes_per_sequence or 0
    free = available - weight_bytes - inputs_compute_buffer(spec, inputs, inputs.ctx)
    return max(free // per_sequence, 0) if per_sequence else 0


def memory_at(spec: ModelSpec, device: Device, cpu: Device | None, inputs: PredictInputs) -> tuple[MemoryFit, ...]:
    """Each pool's memory for the placement `inputs` names, without its speeds (no bandwidth needed)."""
    place = placement(spec, inputs.n_gpu_layers, device.is_discrete_gpu, inputs.n_cpu_moe, inputs.tensor_buft_overrides)
    return memory_pools(spec, device, cpu, place, inputs)
