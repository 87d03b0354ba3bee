"""Roofline ceilings for decode and prefill, latency and memory fit. Pure functions, no I/O.

Decode (batch 1) reads every weight it touches plus the KV cache once per token, so
    TPOT_floor = (weight bytes + KV bytes at depth) / bandwidth,  tok/s ceiling = 1 / TPOT_floor.
Prefill is compute-bound: 2 x active params per token plus attention (grows with the
square of the prompt). Roofline: attainable = min(peak, bandwidth x intensity), ridge =
peak / bandwidth. The formulas, their sources and worked figures: docs/physics.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ggprof.errors import BadInputError, NoBandwidthError
from ggprof.llamacpp import CACHE_TYPE, N_BATCH, N_CTX, N_GEN, N_PROMPT, N_UBATCH
from ggprof.machine.device import Device, EfficiencyBand, ExpectedSpeed, int_dot_ceiling
from ggprof.model.spec import ModelSpec
from ggprof.physics.expected import dominant_family
from ggprof.physics.memory import (
    GPU_RESERVE_FRACTION,
    MemoryFit,
    batch_max,
    compute_buffer_bytes,
    device_memory,
    kv_split,
    max_context,
    memory_fit,
    memory_pools,
)
from ggprof.physics.moe import MoeLayerFit, moe_band, moe_layers
from ggprof.physics.placement import (
    LINK_BAND,
    Placement,
    blended_band,
    cache_spill_rule,
    link_band_of,
    link_bytes_a_batch,
    link_spill,
    placement,
    spill_what,
    trips_band,
)
from ggprof.physics.shares import ShareFit, TokenParts
from ggprof.physics.speculative import Drafting, VerifyStep, expected_speculative, verify_step

if TYPE_CHECKING:
    from ggprof.physics.devices import DeviceSplit
    from ggprof.physics.rpc import Split

__all__ = [  # the memory fit lives in physics.memory; its names stay importable from here
    "GPU_RESERVE_FRACTION",
    "MemoryFit",
    "batch_max",
    "compute_buffer_bytes",
    "device_memory",
    "max_context",
    "memory_fit",
]

DEPTH_TABLE = (0, 4096, 16384, 32768)
DEFAULT_N_BATCH = N_BATCH  # the logical batch: logits once per batch
DEFAULT_N_UBATCH = N_UBATCH


@dataclass(frozen=True, kw_only=True)
class PredictInputs:
    """What a prediction is for: llama.cpp's parameters as a run (or a report) used them."""

    depth: int = 0
    prompt: int = N_PROMPT
    gen: int = N_GEN
    ctx: int = N_CTX
    batch: int = 1
    cache_type_k: str = CACHE_TYPE
    cache_type_v: str = CACHE_TYPE
    n_gpu_layers: int | None = None  # None: all on the device (llama.cpp's default); 0: CPU only
    n_cpu_moe: int = 0  # -ncmoe: the routed experts of the first N layers stay in the CPU's memory
    tensor_buft_overrides: tuple[tuple[str, str], ...] = ()  # -ot PATTERN=BUFFER: a CPU buffer is RAM
    no_kv_offload: bool = False  # -nkvo: the KV cache stays in RAM (attention runs on the CPU)
    n_batch: int = DEFAULT_N_BATCH  # logical batch: the LM head runs once per batch of a prompt
    n_ubatch: int = DEFAULT_N_UBATCH  # physical batch: weights are read once per ubatch
    flash_attn: str = "auto"  # on: no attention-score matrix in the compute buffer
    # several devices (ggprof.physics.devices): how they share the model, as llama.cpp's flags say
    split_mode: str = "layer"  # -sm: layer (in sequence), row or tensor (in parallel), none (-mg's alone)
    main_gpu: int = 0  # -mg: the one device with -sm none; intermediate results with -sm row
    tensor_split: tuple[float, ...] = ()  # -ts: each device's share (none: by each device's memory)
    devices: tuple[str, ...] = ()  # -dev: llama.cpp's device names (none: every GPU a profile names)


def expected_decode(
    ceiling_tok_s: float, band: EfficiencyBand | None, roof: ExpectedSpeed | None = None
) -> ExpectedSpeed | None:
    """The expected decode band: the backend's efficiency band times the bandwidth ceiling,
    capped by a measured compute roof where that is lower. `predict` and the verdicts both
    call this, so they cannot disagree."""
    if band is None:
        return None
    low, high = band.low * ceiling_tok_s, band.high * ceiling_tok_s
    basis = f"{band.low:.0%}-{band.high:.0%} of the bandwidth ceiling; {band.source}"
    if roof is None or (roof.high_tok_s >= high and roof.low_tok_s >= low):
        return ExpectedSpeed(low_tok_s=low, high_tok_s=high, basis=basis)
    return ExpectedSpeed(
        low_tok_s=min(low, roof.low_tok_s), high_tok_s=min(high, roof.high_tok_s), basis=f"compute roof: {roof.basis}"
    )


def is_partial_offload(n_gpu_layers: int | None, n_layers: int) -> bool:
    """Whether -ngl leaves some layers (or the output layer) on the CPU: 0 <= ngl <= layers."""
    return n_gpu_layers is not None and 0 <= n_gpu_layers <= n_layers


def splits_to_cpu(inputs: PredictInputs, n_layers: int) -> bool:
    """Whether the placement leaves weights in the CPU's memory (a partial -ngl), so that the
    CPU's bandwidth is part of a token's time."""
    to_ram = any(b.upper().startswith("CPU") for _, b in inputs.tensor_buft_overrides)
    return is_partial_offload(inputs.n_gpu_layers, n_layers) or inputs.n_cpu_moe > 0 or inputs.no_kv_offload or to_ram


@dataclass(frozen=True, kw_only=True)
class DepthRow:
    depth: int
    kv_bytes: int
    decode_ceiling_tok_s: float
    tpot_floor_ms: float


@dataclass(frozen=True, kw_only=True)
class Prediction:
    inputs: PredictInputs
    device: Device
    cpu: Device | None
    band: EfficiencyBand | None  # None: no plugin knows the backend, so no expected band
    placement: Placement
    decode_bytes_per_token: int
    kv_bytes_per_token: int
    kv_bytes_at_depth: int
    decode_seconds_per_token: float
    prefill_flops: float
    prefill_seconds: float | None
    peak_flops: float | None
    depth_table: tuple[DepthRow, ...]
    memory: tuple[MemoryFit, ...]
    max_ctx_fits: int | None
    batch_max: int | None
    active_params: int
    rules: tuple[str, ...] = field(default=())
    warnings: tuple[str, ...] = ()  # what the user should know: a plugin that failed computing a band
    prefill_band: EfficiencyBand | None = None  # fraction of the compute ceiling (None: ceiling only)
    split: Split | None = None  # a model split over machines with llama.cpp's RPC backend
    roof: ExpectedSpeed | None = None  # a compute roof measured on this host for the model (CPU)
    roof_note: str | None = None  # where that roof came from, or why there is none
    step: VerifyStep | None = None  # speculative decoding: the verify step (ggprof.physics.speculative)
    devices: DeviceSplit | None = None  # several GPUs of one machine (ggprof.physics.devices)
    spill_bytes: int = 0  # weights beyond a GPU's memory, read from host RAM over its link (physics.placement)
    # the weights fit, the cache does not (Windows' fallback): the cache a token reads over the link
    cache_spill_bytes: int | None = None
    parts: TokenParts | None = None  # a token's and a prompt's time by memory (one GPU, the fits' input)

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.device.bandwidth_bytes_per_s or 0.0

    @property
    def decode_ceiling_tok_s(self) -> float:
        """One plain decode step per token: the bandwidth ceiling."""
        return 1.0 / self.decode_seconds_per_token

    @property
    def decode_limit_tok_s(self) -> float:
        """What no run may pass: the bandwidth ceiling, or with speculative decoding n + 1 tokens
        per target pass."""
        return self.step.ceiling_tok_s if self.step is not None else self.decode_ceiling_tok_s

    @property
    def tpot_floor_ms(self) -> float:
        return self.decode_seconds_per_token * 1e3

    @property
    def expected(self) -> ExpectedSpeed | None:
        """The expected decode band before a run: the band, capped by a compute roof measured
        on this host for the model where one is kept (`roof`); a speculative run's from its
        verify step."""
        if self.step is not None:
            return expected_speculative(self.step, self.band, self.roof)
        return expected_decode(self.decode_ceiling_tok_s, self.band, self.roof)

    @property
    def prefill_flops_per_token(self) -> float:
        return self.prefill_flops / self.inputs.prompt if self.inputs.prompt else 0.0

    @property
    def prefill_ceiling_tok_s(self) -> float | None:
        return self.inputs.prompt / self.prefill_seconds if self.prefill_seconds else None

    @property
    def prefill_expected_tok_s(self) -> tuple[float, float] | None:
        """The prefill the backend's band expects: its shares of the compute ceiling (what a band
        is a share of), never above the ceiling reading the weights once per ubatch allows."""
        band, ceiling, per_token = self.prefill_band, self.prefill_ceiling_tok_s, self.prefill_flops_per_token
        if band is None or ceiling is None or not self.peak_flops or not per_token:
            return None
        compute = self.peak_flops / per_token
        if self.parts is not None and self.parts.prompt_link_s:  # a share of the ceiling with the copies
            return band.low * ceiling, band.high * ceiling
        return min(band.low * compute, ceiling), min(band.high * compute, ceiling)

    @property
    def ttft_floor_ms(self) -> float | None:
        return self.prefill_seconds * 1e3 if self.prefill_seconds is not None else None

    @property
    def e2e_floor_ms(self) -> float | None:
        if self.ttft_floor_ms is None:
            return None
        return self.ttft_floor_ms + max(self.inputs.gen - 1, 0) * self.tpot_floor_ms

    @property
    def ridge_flops_per_byte(self) -> float | None:
        return self.peak_flops / self.bandwidth_bytes_per_s if self.peak_flops and self.bandwidth_bytes_per_s else None

    @property
    def decode_intensity_flops_per_byte(self) -> float:
        """Decode at batch B: the weights are read once for B tokens, the KV once per sequence."""
        b = self.inputs.batch
        flops = 2.0 * self.active_params * b
        return flops / (self.decode_bytes_per_token + b * self.kv_bytes_at_depth)

    @property
    def prefill_intensity_flops_per_byte(self) -> float:
        p = self.inputs.prompt
        n_ubatch = -(-p // self.inputs.n_ubatch) if p else 1
        weight_reads = self.placement.gpu_weight_bytes + self.placement.cpu_weight_bytes
        return self.prefill_flops / (weight_reads * n_ubatch) if weight_reads else 0.0


# -- the pieces ------------------------------------------------------------------------------
def attention_flops(spec: ModelSpec, prompt: int, depth: int = 0) -> float:
    """QK^T and softmax(QK^T)V for a causal prompt after `depth` cached tokens, all layers."""
    full = _keys_attended(prompt, depth, None)
    windowed = _keys_attended(prompt, depth, spec.sliding_window)
    total = 0.0
    for swa in spec.swa_layers or (False,) * spec.n_layers:
        keys = windowed if swa and spec.sliding_window else full
        total += 2.0 * spec.n_heads * (spec.head_dim_k + spec.head_dim_v) * keys
    return total


def _keys_attended(prompt: int, depth: int, window: int | None) -> int:
    """sum over prompt tokens i = 1..P of the keys token i attends: min(depth + i, window)."""
    if window is None:
        return prompt * depth + prompt * (prompt + 1) // 2
    growing = max(0, min(prompt, window - depth))  # tokens whose key count is still below the window
    return growing * depth + growing * (growing + 1) // 2 + (prompt - growing) * window


def prefill_flops(
    spec: ModelSpec, prompt: int, depth: int = 0, logits_every_token: bool = False, n_batch: int = DEFAULT_N_BATCH
) -> float:
    """FLOPs of a prompt: 2 x active params per token + attention.

    llama.cpp computes logits only for the last token of each batch, so the LM head runs
    once per batch; `logits_every_token` counts it for every token (the textbook 2P rule).
    """
    head = spec.lm_head_params
    body = spec.active_params - head
    head_runs = prompt if logits_every_token else -(-prompt // n_batch)
    return 2.0 * body * prompt + 2.0 * head * head_runs + attention_flops(spec, prompt, depth)


def with_prompt_kernels(device: Device, spec: ModelSpec) -> Device:
    """The device as a prompt on `spec` sees it: its compute ceiling the int8 dot-product units'
    where the build may have run the model's weights on them (machine.device.int_dot_ceiling)."""
    dot = int_dot_ceiling(device, dominant_family(spec))
    return replace(device, peak_flops=dot[0]) if dot else device


# -- the whole prediction --------------------------------------------------------------------
def predict(
    spec: ModelSpec,
    device: Device,
    inputs: PredictInputs,
    band: EfficiencyBand | None,
    cpu: Device | None = None,
    prefill_band: EfficiencyBand | None = None,
    cpu_band: EfficiencyBand | None = None,
    spill_band: EfficiencyBand = LINK_BAND,
    copies_band: EfficiencyBand = LINK_BAND,
    moe: MoeLayerFit | None = None,
    trip: ShareFit | None = None,
) -> Prediction:
    """Ceilings and fit for `spec` on `device` (with `cpu` holding layers not offloaded, its part
    of a token at `cpu_band`'s share of its bandwidth where given; spilled weights over the host
    link at `spill_band`'s share of its rate, a prompt's copies of weights in RAM at `copies_band`'s;
    each MoE layer the GPU runs at `moe`'s fixed time on top; with -nkvo each layer with a cache
    at `trip`'s round trip to the CPU)."""
    if spec.decode_bytes_per_token <= 0:
        raise BadInputError(f"{spec.path.name}: the model has no weight tensors: a token reads nothing to predict from")
    device = with_prompt_kernels(device, spec)
    has_gpu = device.is_discrete_gpu
    place = placement(spec, inputs.n_gpu_layers, has_gpu, inputs.n_cpu_moe, inputs.tensor_buft_overrides)
    ck, cv = inputs.cache_type_k, inputs.cache_type_v
    kv_gpu, kv_cpu = kv_split(spec, inputs, place, inputs.depth, state_passes=2)
    seconds, rules = _decode_seconds(device, cpu, place, kv_gpu, kv_cpu, inputs.no_kv_offload)
    in_ram_s = (place.cpu_decode_bytes + kv_cpu) / cpu.bandwidth.value if has_gpu and cpu and cpu.bandwidth else 0
    if band is not None and device.backend != "cpu":  # a GPU's MoE layers: their kernels' fixed time
        on_gpu = set(place.gpu_layers) if has_gpu else None
        band = moe_band(band, seconds - in_ram_s, moe_layers(spec, on_gpu, inputs.n_cpu_moe), moe)
    gpu_band = band
    if band is not None and cpu_band is not None and in_ram_s > 0:
        band = blended_band(band, cpu_band, seconds - in_ram_s, in_ram_s)
    trips = cache_layers(spec, ck, cv, place.gpu_layers) if inputs.no_kv_offload and has_gpu else 0
    if band is not None and trips:
        band = trips_band(band, seconds, trips, trip)
    memory = memory_pools(spec, device, cpu, place, inputs)
    full = has_gpu and not is_partial_offload(inputs.n_gpu_layers, spec.n_layers)
    spilling = link_spill(place, kv_gpu, memory[0], device, full)
    spill, cache, over, link_bytes = spilling.spill, spilling.cache, spilling.over, spilling.link_bytes
    crossings, fast_crossings = spilling.crossings
    bw = device.bandwidth_bytes_per_s or 1.0
    link_s = crossings * link_bytes / device.link.value if over and device.link else 0.0
    # what the GPU reads itself: everything; with its weights over the link its KV alone; with its
    # cache over the link its weights alone
    gpu_s = (seconds - in_ram_s - kv_gpu / bw) if cache else kv_gpu / bw if over else seconds - in_ram_s
    if spill is not None and device.link is not None:
        seconds += spill.decode_bytes / device.link.value - spill.decode_bytes / bw
        rules.append(spill.rule(device))
    if cache and device.link is not None:
        rules.append(cache_spill_rule(memory[0], kv_gpu, inputs.depth, device))
    if over and band is not None:
        what, fast_link_s = spill_what(device.spill, device.backend), link_s * fast_crossings / crossings
        band = link_band_of(band, spill_band, seconds, gpu_s + in_ram_s, link_s, what, fast_link_s)
    table = tuple(_depth_row(spec, device, cpu, place, inputs, d) for d in depth_points(spec))
    peak = device.peak_flops.value if device.peak_flops else None
    flops = prefill_flops(spec, inputs.prompt, inputs.depth, n_batch=inputs.n_batch)
    prefill_s = _prefill_seconds(flops, peak, place, device, inputs)
    compute_s = prefill_s or 0.0
    link = device.link.value if has_gpu and device.link else 0.0
    batches = -(-inputs.prompt // inputs.n_ubatch)
    # the ceiling: the least a batch copies (its tokens all routed to the same experts)
    crossing = link_bytes_a_batch(spec, place, spill.weight_bytes if spill else 0, inputs, least=True) if link else 0
    if prefill_s is not None and crossing:  # each batch's weights in RAM cross the link to the GPU
        prefill_s += crossing * batches / link
        least = " at least (of the experts, those a batch uses)" if place.cpu_expert_weight_bytes else ""
        rules.append(
            f"a prompt's batches on the GPU: {crossing / 1e9:.3g} GB of weights in RAM cross the link{least} "
            f"({device.link.describe()}) for each batch of {inputs.n_ubatch} tokens"  # type: ignore[union-attr]
        )
    over_link_bytes = link_bytes if cache else place.gpu_weight_bytes if over else 0  # each batch reads it again
    # a prompt's time over the link at the band's slow end and at its fast end
    copy_s, fast_copy_s = (
        link_bytes_a_batch(spec, place, n * over_link_bytes, inputs) * batches / link if link else 0.0
        for n in spilling.crossings
    )
    gpu_prompt_band = prefill_band
    if prefill_band is not None and prefill_s and copy_s:
        spilled_what = f"reading the spilled {'cache' if cache else 'weights'}"
        what = f"a prompt's batches {spilled_what if over else 'copying the weights in RAM'}"
        share = spill_band if over else copies_band
        prefill_band = link_band_of(prefill_band, share, prefill_s, compute_s, copy_s, what, fast_copy_s)
    parts = TokenParts(
        gpu_s=gpu_s,
        ram_s=in_ram_s,
        link_s=link_s,
        prompt_link_s=copy_s,
        prompt_compute_s=compute_s,
        trips=trips,
        gpu_band=gpu_band,
        prompt_band=gpu_prompt_band,
    )
    avail = device_memory(device)[0]
    weights = place.gpu_weight_bytes if has_gpu else place.cpu_weight_bytes
    return Prediction(
        inputs=inputs,
        device=device,
        cpu=cpu,
        band=band,
        prefill_band=prefill_band,
        placement=place,
        decode_bytes_per_token=spec.decode_bytes_per_token,
        kv_bytes_per_token=spec.kv_bytes_per_token(ck, cv),
        kv_bytes_at_depth=kv_gpu + kv_cpu,
        decode_seconds_per_token=seconds,
        prefill_flops=flops,
        prefill_seconds=prefill_s,
        peak_flops=peak,
        depth_table=table,
        memory=memory,
        max_ctx_fits=max_context(spec, inputs, place, avail, device_memory(cpu)[0] if cpu else None) if avail else None,
        batch_max=batch_max(spec, inputs, weights, avail) if avail else None,
        rules=(*spec.decode_rules(), *rules, *_kv_in_ram(inputs, has_gpu, kv_cpu)),
        active_params=spec.active_params,
        spill_bytes=spill.weight_bytes if spill is not None else 0,
        cache_spill_bytes=kv_gpu if cache else None,
        parts=parts if has_gpu else None,
    )


def drafted(p: Prediction, drafting: Drafting, reach: EfficiencyBand | None = None) -> Prediction:
    """The prediction of a speculative run: its decode judged per verify step on the same
    placement (the plain step's time, the KV read again for each drafted position); `reach`, the
    share of the modelled speed-up published runs reach (ggprof.calibration.speculative_reach)."""
    beside_gpu = p.device.is_discrete_gpu and p.cpu is not None and p.cpu.bandwidth_bytes_per_s
    ram = p.cpu.bandwidth_bytes_per_s if beside_gpu and p.cpu is not None else None
    step = verify_step(drafting, p.kv_bytes_at_depth, p.bandwidth_bytes_per_s, p.decode_seconds_per_token, ram, reach)
    return replace(p, step=step)


def depth_points(spec: ModelSpec) -> list[int]:
    top = spec.context_length or DEPTH_TABLE[-1]
    return sorted({d for d in DEPTH_TABLE if d < top} | {top})


def cache_layers(spec: ModelSpec, cache_type_k: str, cache_type_v: str, offloaded: tuple[int, ...]) -> int:
    """The offloaded layers that keep a cache (a KV cache or a recurrent state): with -nkvo each
    runs its attention, or its recurrent update, on the CPU (llama.cpp's llama_memory_hybrid and
    llama_memory_recurrent keep their state where offload_kqv says, src/llama-model.cpp); a layer
    not offloaded runs there anyway."""
    kv = spec.kv_layer_bytes_at(1, cache_type_k, cache_type_v)
    on_gpu = set(offloaded)
    return sum(
        1 for il, (b, r) in enumerate(zip(kv, spec.state_layer_bytes(), strict=True)) if (b or r) and il in on_gpu
    )


def _kv_in_ram(inputs: PredictInputs, has_gpu: bool, kv_cpu: int) -> tuple[str, ...]:
    if not (inputs.no_kv_offload and has_gpu):
        return ()
    return (
        f"KV in RAM (-nkvo): the KV cache ({kv_cpu / 1e9:.3g} GB at depth {inputs.depth:,}) is read at the "
        "CPU's bandwidth, and each layer with a cache makes a round trip to the CPU (its band)",
    )


def _decode_seconds(
    device: Device, cpu: Device | None, place: Placement, kv_gpu: int, kv_cpu: int, kv_in_ram: bool = False
) -> tuple[float, list[str]]:
    """A token's time at full rate, and its rules; `kv_in_ram`: -nkvo put the cache there (its own rule)."""
    bw = device.bandwidth_bytes_per_s or 0.0
    if not device.is_discrete_gpu:
        return (place.cpu_decode_bytes + kv_cpu) / bw, []
    cpu_bytes = place.cpu_decode_bytes + kv_cpu
    seconds = (place.gpu_decode_bytes + kv_gpu) / bw
    rules = []
    if cpu_bytes:
        cpu_bw = cpu.bandwidth_bytes_per_s if cpu else None
        if not cpu_bw:
            raise NoBandwidthError(
                "the model is split between the GPU and the CPU, but the CPU's bandwidth is unknown: "
                "run `ggprof host` first"
            )
        seconds += cpu_bytes / cpu_bw
        if place.overridden_in_ram_decode_bytes:
            rules.append(
                f"tensors in RAM (-ot): {place.overridden_in_ram_decode_bytes / 1e9:.3g} GB a token of the tensors "
                f"its patterns put in a CPU buffer read at the CPU's bandwidth, the rest on {device.id}; decode "
                "time is the sum of both parts"
            )
        if place.experts_in_ram_decode_bytes:
            rules.append(
                f"experts in RAM (-ncmoe): {place.experts_in_ram_decode_bytes / 1e9:.3g} GB of routed experts a "
                f"token read at the CPU's bandwidth, the rest on {device.id}; decode time is the sum of both parts"
            )
        layers_in_ram = place.cpu_decode_bytes > 1 << 20 or (kv_cpu and not kv_in_ram)
        if not place.experts_in_ram_decode_bytes and not place.overridden_in_ram_decode_bytes and layers_in_ram:
            rules.append(
                f"offload: {len(place.gpu_layers)} layers on {device.id}, the rest read at the CPU's "
                "bandwidth; decode time is the sum of both parts"
            )
    return seconds, rules


def _depth_row(
    spec: ModelSpec, device: Device, cpu: Device | None, place: Placement, inputs: PredictInputs, depth: int
) -> DepthRow:
    kv_gpu, kv_cpu = kv_split(spec, inputs, place, depth, state_passes=2)
    seconds, _ = _decode_seconds(device, cpu, place, kv_gpu, kv_cpu)
    return DepthRow(
        depth=depth, kv_bytes=kv_gpu + kv_cpu, decode_ceiling_tok_s=1 / seconds, tpot_floor_ms=seconds * 1e3
    )


def _prefill_seconds(
    flops: float, peak: float | None, place: Placement, device: Device, inputs: PredictInputs
) -> float | None:
    """The larger of the compute floor and reading the weights once per ubatch."""
    prompt = inputs.prompt
    if not peak or not prompt:
        return None
    n_ubatch = -(-prompt // inputs.n_ubatch)
    weights = place.gpu_weight_bytes + place.cpu_weight_bytes
    memory_s = weights * n_ubatch / (device.bandwidth_bytes_per_s or float("inf"))
    return max(flops / peak, memory_s)
