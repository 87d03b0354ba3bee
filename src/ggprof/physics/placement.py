"""Where a model's bytes live: each tensor on the GPU or in the CPU's memory, as llama.cpp
places them for `-ngl` (the output layer first, then the last repeating layers; the input
embedding stays in host memory), `-ncmoe` (the routed experts of the first layers in RAM) and
`-ot PATTERN=BUFFER` (a tensor whose name the first matching pattern names goes to that buffer:
a CPU buffer is RAM, any other the GPU's; llama.cpp's llama-model.cpp, regex_search in order).
What a decode step reads from each side is its decode share of those bytes, each side at its own
device's share of its bandwidth (`blended_band`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ggprof.figures import Figure
from ggprof.machine.device import Device, EfficiencyBand
from ggprof.model.spec import OUTPUT_LAYER_TENSORS, ModelSpec, offloaded_layers

if TYPE_CHECKING:
    from ggprof.physics.memory import MemoryFit
    from ggprof.physics.shares import ShareFit


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Which bytes live on the accelerator and which on the CPU (partial offload)."""

    gpu_layers: tuple[int, ...]
    output_on_gpu: bool
    gpu_weight_bytes: int
    cpu_weight_bytes: int
    gpu_decode_bytes: int
    cpu_decode_bytes: int
    experts_in_ram_decode_bytes: int = 0  # of cpu_decode_bytes: the experts -ncmoe kept in RAM
    overridden_in_ram_decode_bytes: int = 0  # of cpu_decode_bytes: the tensors -ot put in a CPU buffer
    cpu_expert_weight_bytes: int = 0  # of cpu_weight_bytes: routed experts' tensors (a prompt copies the used ones)


def layers_on_gpu(n_layers: int, n_gpu_layers: int | None) -> tuple[tuple[int, ...], bool]:
    """The layers on the one GPU, and whether the output layer is too (offloaded_layers)."""
    start, ngl = offloaded_layers(n_layers, n_gpu_layers)
    return tuple(range(start, n_layers)), ngl >= 1


# The routed experts' tensors, as llama.cpp's --n-cpu-moe N keeps those of blocks 0..N-1 in the
# CPU's memory (common/common.h LLM_FFN_EXPS_REGEX, searched in each tensor's name)
EXPERT_TENSORS = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")


def buffer_of(name: str, overrides: tuple[tuple[str, str], ...]) -> str | None:
    """The buffer -ot names for a tensor: the first pattern found in its name (None: none)."""
    return next((b for p, b in overrides if re.search(p, name)), None)


def placement(
    spec: ModelSpec,
    n_gpu_layers: int | None,
    has_gpu: bool,
    n_cpu_moe: int = 0,
    overrides: tuple[tuple[str, str], ...] = (),
) -> Placement:
    gpu_layers, output_on_gpu = layers_on_gpu(spec.n_layers, n_gpu_layers if has_gpu else 0)
    on_gpu = set(gpu_layers)
    gw = cw = gd = cd = experts = overridden = cpu_experts = 0
    for t in spec.tensors:
        gpu = (t.layer in on_gpu) if t.layer is not None else (output_on_gpu and t.name in OUTPUT_LAYER_TENSORS)
        decode = int(t.n_bytes * spec.decode_share(t))
        buffer = buffer_of(t.name, overrides) if overrides and has_gpu and not spec.is_lookup(t) else None
        if buffer is not None:  # -ot taken before -ncmoe (llama.cpp: the first pattern added that matches)
            in_ram = buffer.upper().startswith("CPU")
            overridden += decode if in_ram and gpu else 0
            gpu = not in_ram
        elif gpu and t.layer is not None and t.layer < n_cpu_moe and EXPERT_TENSORS.search(t.name):
            gpu, experts = False, experts + decode
        lookup = spec.is_lookup(t)
        if lookup and has_gpu:  # llama.cpp keeps the input embedding on the CPU; one row is noise
            cw, gd = cw + t.n_bytes, gd + decode
            continue
        if spec.is_tied_head(t) and output_on_gpu:
            # llama.cpp duplicates a tied embedding as the output tensor on the output's device
            gw, gd, cw = gw + t.n_bytes, gd + decode, cw + t.n_bytes
            continue
        if gpu:
            gw, gd = gw + t.n_bytes, gd + decode
        else:
            cw, cd = cw + t.n_bytes, cd + decode
            cpu_experts += t.n_bytes if EXPERT_TENSORS.search(t.name) else 0
    return Placement(
        gpu_layers=gpu_layers,
        output_on_gpu=output_on_gpu,
        gpu_weight_bytes=gw,
        cpu_weight_bytes=cw,
        gpu_decode_bytes=gd,
        cpu_decode_bytes=cd,
        experts_in_ram_decode_bytes=experts,
        overridden_in_ram_decode_bytes=overridden,
        cpu_expert_weight_bytes=cpu_experts,
    )


def blended_band(gpu: EfficiencyBand, cpu: EfficiencyBand, gpu_s: float, cpu_s: float) -> EfficiencyBand:
    """The band of a token whose GPU part takes `gpu_s` and whose RAM part takes `cpu_s` at full
    bandwidth, each part at its own backend's share: `(gpu_s + cpu_s) / (gpu_s / g + cpu_s / c)` at
    each end. Times add, so the slower part's share weighs by its time."""
    total = gpu_s + cpu_s

    def share(g: float, c: float) -> float:
        return total / (gpu_s / g + cpu_s / c) if g > 0 and c > 0 else 0.0

    ram = cpu_s / total if total else 0.0
    return EfficiencyBand(
        low=share(gpu.low, cpu.low),
        high=share(gpu.high, cpu.high),
        source=f"{1 - ram:.0%} of the time at the GPU's band ({gpu.source}); {ram:.0%} in RAM at the CPU's "
        f"({cpu.low:.0%}-{cpu.high:.0%}: {cpu.source})",
        judged=gpu.judged and cpu.judged,
    )


def link_band_of(
    gpu: EfficiencyBand,
    link: EfficiencyBand,
    ceiling_s: float,
    gpu_s: float,
    link_s: float,
    what: str,
    fast_link_s: float | None = None,
) -> EfficiencyBand:
    """The band, as a share of a ceiling of `ceiling_s`, of work whose GPU part takes `gpu_s` at
    full rate (at the GPU's band) and whose copies over the host link take `link_s` at its full
    rate (at the link's share): a spilled token, every weight of the GPU's allocation over the link
    (Windows' fallback keeps the whole allocation in RAM, managed memory pages it out and in each
    token: SPILL_CROSSINGS); a prompt's batches, the weights in RAM copied to the GPU. The fast
    end's link time is `fast_link_s` where it differs (a spill whose mechanism is unsaid)."""

    def share(g: float, c: float, link_s: float) -> float:
        return ceiling_s / (gpu_s / g + link_s / c) if g > 0 and c > 0 else 0.0

    return EfficiencyBand(
        low=share(gpu.low, link.low, link_s),
        high=share(gpu.high, link.high, link_s if fast_link_s is None else fast_link_s),
        source=f"{what}: {link_s / (gpu_s + link_s):.0%} of the time at full rate over the host link, at "
        f"{link.low:.0%}-{link.high:.0%} of its rate ({link.source}); the rest at the GPU's band ({gpu.source})",
        judged=gpu.judged and link.judged,
    )


def trips_band(band: EfficiencyBand, full_s: float, layers: int, trip: ShareFit | None) -> EfficiencyBand:
    """`band` (shares of a token's time at full rate, `full_s`) with -nkvo's round trips added: each
    of `layers` layers whose cache is in RAM sends its activations to the CPU, whose attention (or
    recurrent update) runs there, and takes the result back, a fixed time `trip` fits on public rows
    (none where no fit is committed: the ceiling and its band read only the bytes). A share s
    becomes 1 / (1/s + layers x t / full_s), the slow end at t's high end, the fast end at its low."""
    if trip is None or layers <= 0 or full_s <= 0:
        return band
    return replace(
        band,
        low=1 / (1 / band.low + layers * trip.high / full_s),
        high=1 / (1 / band.high + layers * trip.low / full_s),
        source=f"{band.source}; plus {layers} layers' round trips to the CPU with their cache in RAM (-nkvo) at "
        f"{trip.low * 1e6:.0f}-{trip.high * 1e6:.0f} us each ({trip.what}: fitted on {trip.rows} public rows of "
        f"{trip.machines} machines)",
    )


# The share of its link a GPU reaches reading weights kept in host RAM, where no fit on public
# rows is committed (ggprof.calibration.placement_fits): CUDA's pinned host-to-device copies reach
# 80-90% of PCIe's rate (NVIDIA bandwidthTest); a driver's spill to system memory and managed
# memory paging reach less (docs/physics.md, "Spill").
LINK_BAND = EfficiencyBand(
    low=0.25, high=0.9, source="the host link: 25%-90% of its rate (managed-memory paging to pinned copies)"
)
MIN_OFFLOAD_BATCH = 32  # ggml-cuda's offload_op: a batch this large computes RAM's weights on the GPU


@dataclass(frozen=True, kw_only=True)
class Spill:
    """Weights of a full offload beyond the GPU's memory, read from host RAM over its link every
    token: Windows' CUDA system-memory fallback, GGML_CUDA_ENABLE_UNIFIED_MEMORY=1 (on Linux
    llama.cpp fails to load such a placement instead)."""

    weight_bytes: int
    decode_bytes: int

    def rule(self, device: Device) -> str:
        link = device.link.describe() if device.link else "unknown"
        return (
            f"spill: {self.weight_bytes / 1e9:.3g} GB of weights beyond {device.id}'s memory, "
            f"{self.decode_bytes / 1e9:.3g} GB of them read a token over the host link ({link})"
        )


def spilled(place: Placement, kv_gpu_bytes: int, device: Device) -> Spill | None:
    """The weights a full offload cannot hold in the GPU's memory (weights and KV over its total;
    the compute buffers' estimate left out, so that no ceiling is made too low)."""
    total = device.memory_bytes
    over = place.gpu_weight_bytes + kv_gpu_bytes - total if total else 0
    if over <= 0 or not place.gpu_weight_bytes:
        return None
    over = min(over, place.gpu_weight_bytes)
    return Spill(weight_bytes=over, decode_bytes=int(place.gpu_decode_bytes * over / place.gpu_weight_bytes))


# How a GPU's driver serves an allocation beyond its memory, where the user says (check --spill):
# fallback, Windows' CUDA system-memory fallback, places the allocations that no longer fit the
# memory then free in RAM, read in place over the link (driver 536.40 and later; "CUDA - Sysmem
# Fallback Policy" turns it off from 546.01: https://nvidia.custhelp.com/app/answers/detail/a_id/5490);
# managed, GGML_CUDA_ENABLE_UNIFIED_MEMORY=1, allocates managed memory (cudaMallocManaged with no
# advice, ggml-cuda.cu) whose pages migrate on demand: the memory full, the driver evicts a page to
# RAM to fault the next one in, and a token's weights cycle through it (llama.cpp PR #8035); mapped,
# managed memory a build advises to stay in RAM (cudaMemAdviseSetPreferredLocation, the CPU: docs/
# physics.md quotes the CUDA Runtime API), every page mapped and read in place, those that would fit
# too. Unsaid: fallback or managed on CUDA; another backend's driver migrates nothing.
SPILLS = {
    "fallback": "Windows' CUDA system-memory fallback: what no longer fits is placed in RAM",
    "managed": "managed memory (GGML_CUDA_ENABLE_UNIFIED_MEMORY=1): pages migrate on demand",
    "mapped": "managed memory advised to stay in RAM (a patched build): every weight read in place",
}
# How many times a spilled byte crosses the link a pass, at the band's slow end and at its fast end:
# read in place, once; migrated, a page goes out for each that comes in, twice in bytes, and between
# once and twice in time (the two copies go opposite ways on a full-duplex link).
SPILL_CROSSINGS = {"fallback": (1, 1), "managed": (2, 1), "mapped": (1, 1)}


def spill_crossings(spill: str | None, backend: str) -> tuple[int, int]:
    """(slow end, fast end): the mechanism's crossings (SPILL_CROSSINGS); unsaid, CUDA's migrating
    at the slow end, another backend's in place."""
    return SPILL_CROSSINGS.get(spill or "") or SPILL_CROSSINGS["managed" if backend == "cuda" else "fallback"]


def spill_what(spill: str | None, backend: str) -> str:
    """What a spilled token's band reads over the link: how the driver serves the spill (SPILLS) and
    how often a byte crosses (SPILL_CROSSINGS)."""
    slow, fast = spill_crossings(spill, backend)
    how = SPILLS.get(spill or "", "how the driver spills unsaid")
    return f"spill ({how}: {'once' if slow == fast == 1 else f'{fast} to {slow} times'} over the link)"


@dataclass(frozen=True, kw_only=True)
class LinkSpill:
    """What a full offload beyond its GPU's memory reads over the host link: the weights over the
    card (`spill`, the ceiling's excess), and at the band, `link_bytes` a token (every weight of the
    allocation; with the fallback where the weights fit, the cache a token reads: `cache`) times
    `crossings` (slow end, fast end)."""

    over: bool
    spill: Spill | None
    cache: bool
    link_bytes: int
    crossings: tuple[int, int]


def link_spill(place: Placement, kv_gpu_bytes: int, pool: MemoryFit, device: Device, full: bool) -> LinkSpill:
    """A full offload's spill: beyond the GPU with its buffers, the whole weights allocation goes
    over the link; with Windows' fallback where the weights fit, what is allocated after them
    beyond the memory then free, "tight" too (the cache: its KV and state, however deep)."""
    spill = spilled(place, kv_gpu_bytes, device) if full else None
    fallback = device.spill == "fallback" and place.gpu_weight_bytes <= (device.memory_bytes or 0)
    spill = None if fallback else spill
    beyond = pool.verdict == "does_not_fit" or (fallback and pool.verdict == "tight") or device.spill == "mapped"
    over = full and device.link is not None and (spill is not None or beyond)
    cache = over and fallback
    return LinkSpill(
        over=over,
        spill=spill,
        cache=cache,
        link_bytes=(kv_gpu_bytes if cache else place.gpu_decode_bytes) if over else 0,
        crossings=spill_crossings(device.spill, device.backend),
    )


def cache_spill_rule(pool: MemoryFit, kv_bytes: int, depth: int, device: Device) -> str:
    link = device.link.describe() if device.link else "unknown"
    free_bytes = pool.available_bytes if pool.available_bytes is not None else pool.total_bytes
    over = max(pool.required_bytes - (free_bytes or 0), 0) / 1e9
    return (
        f"spilled cache: the weights fit {device.id}'s memory, the KV cache and buffers at the context do not fit "
        f"what is free ({over:.3g} GB over); the cache a token reads ({kv_bytes / 1e9:.3g} GB at depth {depth:,}, "
        f"a recurrent state read and written) goes over the host link ({link}) at most, none of it at best"
    )


def link_bytes_a_batch(
    spec: ModelSpec, place: Placement, spilled_bytes: int, inputs: object, *, least: bool = False
) -> int:
    """The weights in RAM a prompt's batch takes to the GPU (ggml offloads a batch of 32 tokens or
    more to it): every weight in RAM but the input embedding, which is looked up on the CPU, and an
    output layer left in RAM, which runs for the prompt's last token alone; and
    `spilled_bytes` of the GPU's own. Of a routed expert tensor ggml-backend copies only the
    experts the batch's tokens use (ggml_backend_sched_compute_splits): `least`, the k of n every
    token of the batch may share (the ceiling); else as many as B tokens routed evenly reach,
    1 - (1 - k/n)^B of them (the expected). A batch under 32 tokens copies nothing (the CPU
    computes what is in RAM), but the GPU still reads its own spilled weights over the link: the
    expected reads them all, the ceiling none (of a mixture's, a few tokens use a few experts)."""
    ubatch = min(getattr(inputs, "prompt", 0), getattr(inputs, "n_ubatch", 0))
    if ubatch < MIN_OFFLOAD_BATCH:
        return spilled_bytes if ubatch > 0 and not least else 0
    # what stays in RAM: the input embedding (a lookup, GET_ROWS, is never offloaded; a tied one's RAM
    # copy too) and an output layer left there, which a prompt runs for its last token alone
    # (inp_out_ids: a batch of 1, under the offload's 32)
    output_in_ram = not place.output_on_gpu
    lookup = sum(
        t.n_bytes
        for t in spec.tensors
        if spec.is_lookup(t)
        or spec.is_tied_head(t)
        or (output_in_ram and t.layer is None and t.name in OUTPUT_LAYER_TENSORS)
    )
    experts = place.cpu_expert_weight_bytes
    used = batch_expert_share(spec, ubatch, least=least) if experts else 1.0
    return max(place.cpu_weight_bytes - lookup - experts, 0) + int(experts * used) + spilled_bytes


def batch_expert_share(spec: ModelSpec, batch: int, *, least: bool = False) -> float:
    """The share of a layer's routed experts a batch of `batch` tokens uses: k/n at the least (all
    route alike), 1 - (1 - k/n)^batch routed evenly."""
    k, n = spec.n_experts_used, spec.n_experts
    if not n or not k:
        return 1.0
    return k / n if least else 1 - (1 - k / n) ** batch


# RAM behind a GPU when the report does not state it: its class's JEDEC peaks (profiles
# ddr4-2400-dual to ddr5-6400-dual beside a desktop GPU, ddr4-3200-8ch to ddr5-6000-12ch
# beside a datacenter one). Judged against the fastest (never impossible below it), the band
# reaching down to the slowest.
RAM_CLASSES = {
    "desktop": (38.4e9, 102.4e9, "dual-channel DDR4-2400 to DDR5-6400"),
    "server": (204.8e9, 576e9, "8-channel DDR4-3200 to 12-channel DDR5-6000"),
}


def ram_class(gpu: Device) -> Device:
    """The host RAM of a GPU whose RAM no one stated: the fastest any host has (a desktop GPU sits
    in EPYC and Threadripper workstations too), the slowest of the GPU's own class kept as
    `bandwidth_low` (labelled as a class default)."""
    kind = "server" if gpu.device_class and "datacenter" in gpu.device_class else "desktop"
    low, _, what = RAM_CLASSES[kind]
    _, high, fastest = RAM_CLASSES["server"]
    span = what.split(" to ")[0] + " to a server's " + fastest.split(" to ")[1] if kind == "desktop" else what
    detail = (
        f"RAM not stated: a {kind}'s {span} ({low / 1e9:.3g}-{high / 1e9:.3g} GB/s JEDEC peaks; "
        "--ram-bandwidth BW for the one that ran)"
    )
    return Device(
        id="ram",
        name="host RAM (not stated)",
        backend="cpu",
        bandwidth=Figure(high, "theoretical", detail),
        bandwidth_low=Figure(low, "theoretical", detail),
    )


def class_band(cpu_band: EfficiencyBand, cpu: Device) -> EfficiencyBand:
    """A RAM known only by its class: the band's low end at its slowest member's bandwidth."""
    if cpu.bandwidth_low is None or cpu.bandwidth is None:
        return cpu_band
    ratio = cpu.bandwidth_low.value / cpu.bandwidth.value
    return replace(cpu_band, low=cpu_band.low * ratio, source=f"{cpu_band.source}; {cpu.bandwidth.detail}")
