"""Capacity planning: how many devices serve R requests/s within a TPOT SLO. Pure functions.

The method (docs/physics.md, "Serving many users"):
1. Little's law: a request stays about TTFT + gen x TPOT, so R requests/s keep
   R x that many requests in flight (the concurrency).
2. Memory: each in-flight sequence holds its KV cache at the full context; a device holds
   the weights, the compute buffers and as many sequences as fit.
3. Bandwidth: a decode step at batch b reads the weights once and every sequence's KV
   (at its average depth): step time = bytes / bandwidth, which must stay within the
   TPOT SLO; compute (2 x active params x b FLOPs) must too. Below the ridge point
   (intensity < peak / bandwidth) the step is bandwidth-bound.
4. The answer: the batch a device can run is the smallest of the three limits; devices =
   concurrency / that batch (a model too large for one device is sharded over a group).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ggprof.errors import BadInputError
from ggprof.machine.device import Device
from ggprof.model.spec import ModelSpec
from ggprof.physics.roofline import GPU_RESERVE_FRACTION, compute_buffer_bytes, prefill_flops

CONSTRAINTS = ("memory", "bandwidth", "compute")


@dataclass(frozen=True, kw_only=True)
class PlanInputs:
    qps: float  # requests per second
    prompt: int  # tokens per request's prompt
    gen: int  # tokens generated per request
    tpot_slo_ms: float
    ttft_slo_ms: float | None = None
    ctx: int | None = None  # context each sequence holds (default prompt + gen)
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"

    @property
    def context(self) -> int:
        return self.ctx or self.prompt + self.gen


@dataclass(frozen=True, kw_only=True)
class Plan:
    inputs: PlanInputs
    device: Device
    ttft_ms: float
    ttft_source: str  # "compute floor", "--ttft-slo", or "unknown (0)"
    request_s: float
    concurrency: float
    kv_bytes_per_sequence: int  # held, at the full context
    kv_read_bytes_per_sequence: int  # read per step, at the average depth
    kv_bytes_total: int
    weights_bytes: int  # held on the device
    weights_read_bytes: int  # read per decode step
    buffer_bytes: int
    memory_per_device_bytes: int  # usable: total less the driver's reserve
    group_size: int  # devices one copy of the model is sharded over (1 when it fits one)
    tpot_floor_ms: float  # batch 1: the physical floor of the SLO
    batch_limits: dict[str, int]  # the largest batch per group each constraint allows
    batch_per_group: int
    groups: int
    step_time_ms: float  # at batch_per_group
    ridge_flops_per_byte: float | None
    intensity_flops_per_byte: float
    active_params: int

    @property
    def devices_needed(self) -> int:
        return self.groups * self.group_size

    @property
    def binding_constraint(self) -> str:
        """The limit the batch meets first (memory, bandwidth or compute)."""
        return min(CONSTRAINTS, key=lambda c: self.batch_limits[c])

    @property
    def below_ridge(self) -> bool | None:
        return None if self.ridge_flops_per_byte is None else self.intensity_flops_per_byte < self.ridge_flops_per_byte


class SloBelowFloorError(BadInputError):
    """The TPOT SLO is shorter than one decode step can ever take on the device."""


def plan(spec: ModelSpec, device: Device, inputs: PlanInputs) -> Plan:
    bw, memory = device.bandwidth_bytes_per_s, device.memory_bytes
    if not bw:
        raise BadInputError(f"no bandwidth is known for {device.name}: pass --device ID or --bandwidth")
    if not memory:
        raise BadInputError(f"{device.name} has no memory size: pass a --device whose profile has one, or --memory GB")
    peak = device.peak_flops.value if device.peak_flops else None
    ctx = inputs.context
    kv_seq = spec.kv_bytes_at(ctx, inputs.cache_type_k, inputs.cache_type_v)
    kv_read = spec.kv_bytes_at(inputs.prompt + inputs.gen // 2, inputs.cache_type_k, inputs.cache_type_v)
    weights, read = spec.tensor_bytes, spec.decode_bytes_per_token
    buffers = compute_buffer_bytes(spec, ctx)
    usable = int(memory * (1 - GPU_RESERVE_FRACTION)) if device.is_discrete_gpu else memory
    group = max(math.ceil((weights + buffers + kv_seq) / usable), 1)
    ttft_ms, ttft_source = _ttft(spec, inputs, peak, group)
    request_s = ttft_ms / 1e3 + inputs.gen * inputs.tpot_slo_ms / 1e3
    concurrency = inputs.qps * request_s
    floor_ms = _step_seconds(read, kv_read, 1, bw * group, peak * group if peak else None, spec.active_params) * 1e3
    if floor_ms > inputs.tpot_slo_ms:
        raise SloBelowFloorError(
            f"--tpot-slo {inputs.tpot_slo_ms:g} ms is below the physical floor: one decode step on "
            f"{device.name} reads {read / 1e9:.3g} GB of weights, {floor_ms:.3g} ms at its bandwidth even at batch 1"
        )
    slo_s = inputs.tpot_slo_ms / 1e3
    limits = {
        "memory": _floor_div(group * usable - weights - buffers, kv_seq),
        "bandwidth": _floor_div(slo_s * bw * group - read, kv_read),
        "compute": _floor_div(slo_s * peak * group, 2 * spec.active_params) if peak else UNLIMITED,
    }
    batch_max = min(limits.values())
    if batch_max < 1:
        raise BadInputError(f"not even one sequence of {ctx:,} tokens fits next to the weights on {device.name}")
    need = max(math.ceil(concurrency), 1)
    groups = math.ceil(need / batch_max)
    batch = math.ceil(need / groups)
    step_s = _step_seconds(read, kv_read, batch, bw * group, peak * group if peak else None, spec.active_params)
    intensity = 2 * spec.active_params * batch / (read + batch * kv_read)
    return Plan(
        inputs=inputs,
        device=device,
        ttft_ms=ttft_ms,
        ttft_source=ttft_source,
        request_s=request_s,
        concurrency=concurrency,
        kv_bytes_per_sequence=kv_seq,
        kv_read_bytes_per_sequence=kv_read,
        kv_bytes_total=kv_seq * need,
        weights_bytes=weights,
        weights_read_bytes=read,
        buffer_bytes=buffers,
        memory_per_device_bytes=usable,
        group_size=group,
        tpot_floor_ms=floor_ms,
        batch_limits=limits,
        batch_per_group=batch,
        groups=groups,
        step_time_ms=step_s * 1e3,
        ridge_flops_per_byte=peak / bw if peak else None,
        intensity_flops_per_byte=intensity,
        active_params=spec.active_params,
    )


UNLIMITED = 2**62


def _floor_div(numerator: float, denominator: float) -> int:
    if numerator <= 0:
        return 0
    return UNLIMITED if denominator <= 0 else int(numerator // denominator)


def concurrent_decode_ceiling_tok_s(
    read_bytes: int, kv_bytes_per_sequence: int, users: int, bandwidth: float, peak: float | None, active_params: int
) -> float:
    """Aggregate decode tok/s of `users` sequences decoded together (a server's parallel slots):
    each step reads the weights once and every sequence's KV, so the step grows slowly with
    users while bandwidth binds and aggregate tok/s rises almost linearly; compute caps it."""
    return users / _step_seconds(read_bytes, kv_bytes_per_sequence, users, bandwidth, peak, active_params)


def _step_seconds(read: int, kv_read: int, batch: int, bw: float, peak: float | None, active_params: int) -> float:
    """A decode step at `batch`: the weights once plus every sequence's KV over the bandwidth,
    or the FLOPs over the peak, whichever is longer."""
    memory_s = (read + batch * kv_read) / bw
    compute_s = 2 * active_params * batch / peak if peak else 0.0
    return max(memory_s, compute_s)


def _ttft(spec: ModelSpec, inputs: PlanInputs, peak: float | None, group: int) -> tuple[float, str]:
    """TTFT for Little's law: the SLO when given (checked against the compute floor), else the floor."""
    floor_ms = prefill_flops(spec, inputs.prompt) / (peak * group) * 1e3 if peak else None
    if inputs.ttft_slo_ms is not None:
        if floor_ms is not None and floor_ms > inputs.ttft_slo_ms:
            raise SloBelowFloorError(
                f"--ttft-slo {inputs.ttft_slo_ms:g} ms is below the physical floor: a {inputs.prompt:,}-token "
                f"prompt needs {floor_ms:.3g} ms of compute at the device's peak"
            )
        return inputs.ttft_slo_ms, "--ttft-slo"
    if floor_ms is not None:
        return floor_ms, "compute floor of the prompt"
    return 0.0, "unknown (no peak FLOP/s): counted as 0"
