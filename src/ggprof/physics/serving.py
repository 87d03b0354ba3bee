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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ggprof.errors import BadInputError
from ggprof.llamacpp import CACHE_TYPE
from ggprof.machine.device import Device
from ggprof.machine.links import Link
from ggprof.model.spec import ModelSpec
from ggprof.physics.roofline import GPU_RESERVE_FRACTION, compute_buffer_bytes, prefill_flops
from ggprof.physics.rpc import HOP_COMMAND_BYTES, Member, member_bytes, params_shares, split_of, stretches

CONSTRAINTS = ("memory", "bandwidth", "compute")


@dataclass(frozen=True, kw_only=True)
class PlanInputs:
    qps: float  # requests per second
    prompt: int  # tokens per request's prompt
    gen: int  # tokens generated per request
    tpot_slo_ms: float
    ttft_slo_ms: float | None = None
    ctx: int | None = None  # context each sequence holds (default prompt + gen)
    cache_type_k: str = CACHE_TYPE
    cache_type_v: str = CACHE_TYPE

    @property
    def context(self) -> int:
        return self.ctx or self.prompt + self.gen


@dataclass(frozen=True, kw_only=True)
class Shard:
    """A device holding part of one copy of the model. llama.cpp splits by layers: a step visits
    the devices in turn, so their times add (a split adds memory, not speed; pipelining only
    overlaps the micro-batches of a prompt)."""

    label: str  # "this host", the rpc-server's endpoint, "device 2 of 3"
    device: Device
    usable_bytes: int
    weight_bytes: int  # held
    read_bytes: int  # weights one decode step reads
    buffer_bytes: int
    kv_share: float  # of every sequence's KV: its layers'
    params_share: float  # of the FLOPs of a token: its layers'


@dataclass(frozen=True, kw_only=True)
class Wire:
    """A stretch of layers behind an rpc-server as a batched decode step crosses it: a round trip,
    each sequence's activation and mask row out, its activation (or its logits, when the stretch
    ends with the output layer) back."""

    label: str
    link: Link
    returns_logits: bool


@dataclass(frozen=True, kw_only=True)
class Plan:
    inputs: PlanInputs
    device: Device  # the device one copy is placed on (for a split: the main host's)
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
    memory_per_device_bytes: int  # usable: total less the driver's reserve (a split: its smallest)
    shards: tuple[Shard, ...]  # the devices one copy of the model is split over
    wires: tuple[Wire, ...] = ()  # the links a step crosses (a split over RPC)
    split_over_rpc: bool = False  # one device did not suffice: placed over the listed machines
    tpot_floor_ms: float  # batch 1: the physical floor of the SLO
    network_ms: float  # the links' share of a step at batch_per_group
    batch_limits: dict[str, int]  # the largest batch per group each constraint allows
    batch_per_group: int
    groups: int
    step_time_ms: float  # at batch_per_group
    ridge_flops_per_byte: float | None
    intensity_flops_per_byte: float
    active_params: int

    @property
    def group_size(self) -> int:
        """Devices one copy of the model is split over (1 when it fits one)."""
        return len(self.shards)

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


def usable_bytes(device: Device) -> int | None:
    """What a device offers a model: a GPU less the driver's reserve, RAM as it is."""
    memory = device.memory_bytes
    if not memory:
        return None
    return int(memory * (1 - GPU_RESERVE_FRACTION)) if device.is_discrete_gpu else memory


def group_shards(spec: ModelSpec, device: Device, inputs: PlanInputs) -> tuple[Shard, ...]:
    """One copy on `device`, or split over as many of it as its weights, buffers and one
    sequence's KV need (llama.cpp's layer split: each holds an equal share)."""
    usable = usable_bytes(device)
    if not usable:
        raise BadInputError(f"{device.name} has no memory size: pass a --device whose profile has one, or --memory GB")
    weights, buffers = spec.tensor_bytes, compute_buffer_bytes(spec, inputs.context)
    kv_seq = spec.kv_bytes_at(inputs.context, inputs.cache_type_k, inputs.cache_type_v)
    n = max(math.ceil((weights + buffers + kv_seq) / usable), 1)
    return tuple(
        Shard(
            label=f"device {i + 1} of {n}" if n > 1 else "",
            device=device,
            usable_bytes=usable,
            weight_bytes=weights // n,
            read_bytes=spec.decode_bytes_per_token // n,
            buffer_bytes=buffers // n,
            kv_share=1 / n,
            params_share=1 / n,
        )
        for i in range(n)
    )


def split_shards(
    spec: ModelSpec,
    members: Sequence[Member],
    inputs: PlanInputs,
    *,
    n_gpu_layers: int | None = None,
    tensor_split: Sequence[float] = (),
) -> tuple[tuple[Shard, ...], tuple[Wire, ...]]:
    """One copy of the model over the main host (member 0) and its rpc-servers, placed as
    llama.cpp places it (physics.rpc.split_of): each member holding layers is a shard (its
    layers' share of every sequence's KV and of the FLOPs, the compute buffers in the same
    share), each stretch of layers behind a link a wire."""
    per_layer, output = split_of(spec, members, n_gpu_layers, tensor_split)
    held, read = member_bytes(spec, per_layer, output, len(members))
    kv = spec.kv_layer_bytes_at(inputs.context, inputs.cache_type_k, inputs.cache_type_v)
    kv_total = sum(kv) or 1
    params = params_shares(spec, per_layer, output, len(members))
    buffers = compute_buffer_bytes(spec, inputs.context)
    shards = []
    for i, m in enumerate(members):
        if not held[i] or params[i] <= 1e-3:
            continue  # nothing, or only the input embedding's rows looked up on the main host
        usable = m.free_bytes or m.device.memory_available_bytes or usable_bytes(m.device)
        if not usable:
            raise BadInputError(f"{m.device.name} ({m.label}) has no memory size: give a --rpc-device profile with one")
        kv_share = sum(b for il, b in enumerate(kv) if per_layer[il] == i) / kv_total
        shards.append(
            Shard(
                label=m.label,
                device=m.device,
                usable_bytes=usable,
                weight_bytes=held[i],
                read_bytes=read[i],
                buffer_bytes=int(buffers * params[i]),
                kv_share=kv_share,
                params_share=params[i],
            )
        )
    wires = tuple(
        Wire(label=members[m].label, link=link, returns_logits=last)
        for m, _, last in stretches(per_layer, output)
        if (link := members[m].link) is not None
    )
    return tuple(shards), wires


def plan(
    spec: ModelSpec,
    device: Device,
    inputs: PlanInputs,
    shards: Sequence[Shard] | None = None,
    wires: Sequence[Wire] = (),
) -> Plan:
    """The capacity plan for one copy of the model on `device` (split over more of it when it
    does not fit), or over `shards` and `wires` (a split over RPC, built by physics.rpc)."""
    if shards is None:
        if not device.bandwidth_bytes_per_s:
            raise BadInputError(f"no bandwidth is known for {device.name}: pass --device ID or --bandwidth")
        shards = group_shards(spec, device, inputs)
    for s in shards:
        if not s.device.bandwidth_bytes_per_s:
            raise BadInputError(f"no bandwidth is known for {s.device.name}: pass --device ID or --bandwidth")
    where = device.name if not wires else "the split"
    ctx = inputs.context
    kv_seq = spec.kv_bytes_at(ctx, inputs.cache_type_k, inputs.cache_type_v)
    kv_read = spec.kv_bytes_at(inputs.prompt + inputs.gen // 2, inputs.cache_type_k, inputs.cache_type_v)
    depth = inputs.prompt + inputs.gen // 2
    step = _Step(spec, tuple(shards), tuple(wires), kv_read, depth)
    # the devices that multiply (a main host holding only the embedding table looks rows up)
    peaks = [s.device.peak_flops.value if s.device.peak_flops else None for s in shards if s.params_share > 1e-3]
    peak_sum = sum(p for p in peaks if p) if all(peaks) else None
    ttft_ms, ttft_source = _ttft(spec, inputs, peak_sum)
    request_s = ttft_ms / 1e3 + inputs.gen * inputs.tpot_slo_ms / 1e3
    concurrency = inputs.qps * request_s
    floor_ms = step.seconds(1) * 1e3
    if floor_ms > inputs.tpot_slo_ms:
        raise SloBelowFloorError(
            f"--tpot-slo {inputs.tpot_slo_ms:g} ms is below the physical floor: one decode step on {where} reads "
            f"{spec.decode_bytes_per_token / 1e9:.3g} GB of weights, {floor_ms:.3g} ms even at batch 1"
        )
    slo_s = inputs.tpot_slo_ms / 1e3
    limits = {
        "memory": min(
            (_floor_div(s.usable_bytes - s.weight_bytes - s.buffer_bytes, kv_seq * s.kv_share) for s in shards),
            default=UNLIMITED,
        ),
        "bandwidth": step.largest(slo_s, step.memory_s),
        "compute": step.largest(slo_s, step.compute_s) if all(peaks) else UNLIMITED,
    }
    batch_max = min(limits.values())
    if batch_max < 1:
        raise BadInputError(f"not even one sequence of {ctx:,} tokens fits next to the weights on {where}")
    need = max(math.ceil(concurrency), 1)
    groups = math.ceil(need / batch_max)
    batch = math.ceil(need / groups)
    read = spec.decode_bytes_per_token
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
        weights_bytes=spec.tensor_bytes,
        weights_read_bytes=read,
        buffer_bytes=sum(s.buffer_bytes for s in shards),
        memory_per_device_bytes=min(s.usable_bytes for s in shards),
        shards=tuple(shards),
        wires=tuple(wires),
        split_over_rpc=bool(wires),
        tpot_floor_ms=floor_ms,
        network_ms=step.network_s(batch) * 1e3,
        batch_limits=limits,
        batch_per_group=batch,
        groups=groups,
        step_time_ms=step.seconds(batch) * 1e3,
        ridge_flops_per_byte=_ridge(shards),
        intensity_flops_per_byte=intensity,
        active_params=spec.active_params,
    )


def _ridge(shards: Sequence[Shard]) -> float | None:
    """The ridge point of a split: its FLOP/s over its bandwidth, both as the time-weighted sums
    a step sees (each device's share of the work at its own rate)."""
    shards = [s for s in shards if s.params_share > 1e-3]
    if any(s.device.peak_flops is None or not s.device.bandwidth_bytes_per_s for s in shards):
        return None
    flop_s = sum(s.params_share / s.device.peak_flops.value for s in shards if s.device.peak_flops)
    byte_s = sum(s.kv_share / (s.device.bandwidth_bytes_per_s or 1) for s in shards)
    return byte_s / flop_s if flop_s else None


class _Step:
    """A decode step at batch b over the shards and wires: each device in turn (the larger of
    its bytes over its bandwidth and its FLOPs over its peak) plus each link."""

    def __init__(self, spec: ModelSpec, shards: tuple[Shard, ...], wires: tuple[Wire, ...], kv_read: int, depth: int):
        self.spec, self.shards, self.wires, self.kv_read, self.depth = spec, shards, wires, kv_read, depth

    def _memory(self, s: Shard, batch: int) -> float:
        return (s.read_bytes + batch * self.kv_read * s.kv_share) / (s.device.bandwidth_bytes_per_s or 1)

    def _compute(self, s: Shard, batch: int) -> float:
        peak = s.device.peak_flops.value if s.device.peak_flops else None
        return 2 * self.spec.active_params * s.params_share * batch / peak if peak else 0.0

    def memory_s(self, batch: int) -> float:
        return sum(self._memory(s, batch) for s in self.shards) + self.network_s(batch)

    def compute_s(self, batch: int) -> float:
        return sum(self._compute(s, batch) for s in self.shards) + self.network_s(batch)

    def network_s(self, batch: int) -> float:
        """Per sequence: its activation, position and f16 mask row (each sequence's own KV
        stream) out, its activation or logits back; per step a round trip and the command."""
        total = 0.0
        e, vocab = self.spec.n_embd, self.spec.vocab_size
        for w in self.wires:
            sent = batch * (4 * e + 4 + 2 * self.depth) + HOP_COMMAND_BYTES
            back = batch * 4 * (vocab if w.returns_logits else e)
            total += w.link.rtt_s + sent / w.link.throughput_bytes_per_s + back / w.link.download_bytes_per_s
        return total

    def seconds(self, batch: int) -> float:
        devices = sum(max(self._memory(s, batch), self._compute(s, batch)) for s in self.shards)
        return devices + self.network_s(batch)

    @staticmethod
    def largest(slo_s: float, cost: Callable[[int], float]) -> int:
        """The largest batch whose `cost` (linear in the batch) stays within the SLO."""
        fixed, per = cost(0), cost(1) - cost(0)
        return _floor_div(slo_s - fixed, per)


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


def _ttft(spec: ModelSpec, inputs: PlanInputs, peak: float | None) -> tuple[float, str]:
    """TTFT for Little's law: the SLO when given (checked against the compute floor: every
    device of a split busy, as pipelined micro-batches at best keep them), else the floor."""
    floor_ms = prefill_flops(spec, inputs.prompt) / peak * 1e3 if peak else None
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
