"""Where a model's bytes live: each tensor on the GPU or in the CPU's memory, as llama.cpp
places them for `-ngl` (the output layer first, then the last repeating layers; the input
embedding stays in host memory), `-ncmoe` (the routed experts of the first layers in RAM) and
`-ot PATTERN=BUFFER` (a tensor whose name the first matching pattern names goes to that buffer:
a CPU buffer is RAM, any other the GPU's; llama.cpp's llama-model.cpp, regex_search in order).
What a decode step reads from each side is its decode share of those bytes, each side at its own
device's share of its bandwidth (`blended_band`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ggprof.machine.device import EfficiencyBand
from ggprof.model.spec import OUTPUT_LAYER_TENSORS, ModelSpec, offloaded_layers


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
    gw = cw = gd = cd = experts = overridden = 0
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
    return Placement(
        gpu_layers=gpu_layers,
        output_on_gpu=output_on_gpu,
        gpu_weight_bytes=gw,
        cpu_weight_bytes=cw,
        gpu_decode_bytes=gd,
        cpu_decode_bytes=cd,
        experts_in_ram_decode_bytes=experts,
        overridden_in_ram_decode_bytes=overridden,
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
